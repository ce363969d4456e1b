package backend

import (
	"iter"
	"slices"
)

// Snapshots keeps a hybrid cache's snapshots of its linear layers' state (docs/hybrid-design.md §3.2), in
// ascending position, each with a payload S that is the backend's own representation of that state. It keeps
// the bookkeeping every backend shares (which positions are cuts, which snapshots a clone or a truncation keeps);
// what a payload costs to make, share and let go stays with the backend, through the funcs it passes in. The
// zero value is empty and ready to use.
type Snapshots[S any] struct {
	list []snapEntry[S]
}

type snapEntry[S any] struct {
	pos   int
	state S
}

// Len is how many snapshots there are.
func (s *Snapshots[S]) Len() int { return len(s.list) }

// At returns the snapshot at pos; ok is false (and state the zero S) when there is none.
func (s *Snapshots[S]) At(pos int) (state S, ok bool) {
	if i, found := s.find(pos); found {
		return s.list[i].state, true
	}
	return state, false
}

func (s *Snapshots[S]) find(pos int) (int, bool) {
	return slices.BinarySearchFunc(s.list, pos, func(e snapEntry[S], p int) int { return e.pos - p })
}

// Keep records take()'s state as the snapshot at pos, unless there is one; take is called only when there is
// not.
func (s *Snapshots[S]) Keep(pos int, take func() S) {
	i, found := s.find(pos)
	if found {
		return
	}
	s.list = slices.Insert(s.list, i, snapEntry[S]{pos: pos, state: take()})
}

// KeepLive is Keep at the live position when every linear layer's live state describes exactly spans.Len()
// positions (what Seq.Snapshot keeps after a Forward call); otherwise it keeps nothing.
func (s *Snapshots[S]) KeepLive(l KVLayout, spans LayerSpans, take func() S) {
	if pos, ok := LivePos(l, spans); ok && pos == spans.Len() {
		s.Keep(pos, take)
	}
}

// DropAbove removes the snapshots at positions above pos, newest first, handing each to release.
func (s *Snapshots[S]) DropAbove(pos int, release func(S)) {
	for len(s.list) > 0 && s.list[len(s.list)-1].pos > pos {
		last := len(s.list) - 1
		release(s.list[last].state)
		s.list[last] = snapEntry[S]{}
		s.list = s.list[:last]
	}
}

// Upto returns the snapshots at positions <= n for a clone of n positions, each payload passed through share
// (a retained reference, or a new handle to the same state).
func (s *Snapshots[S]) Upto(n int, share func(S) S) Snapshots[S] {
	var out Snapshots[S]
	for _, e := range s.list {
		if e.pos <= n {
			out.list = append(out.list, snapEntry[S]{pos: e.pos, state: share(e.state)})
		}
	}
	return out
}

// All yields the snapshots by ascending position.
func (s *Snapshots[S]) All() iter.Seq2[int, S] {
	return func(yield func(int, S) bool) {
		for _, e := range s.list {
			if !yield(e.pos, e.state) {
				return
			}
		}
	}
}

// Clear hands every snapshot to release and leaves none.
func (s *Snapshots[S]) Clear(release func(S)) {
	for _, e := range s.list {
		release(e.state)
	}
	s.list = nil
}

// Known lists the positions where the linear layers' state is known, ascending: 0 (the zero state), the
// snapshots, and the live position when every linear layer is there; all at most spans.Len().
func (s *Snapshots[S]) Known(l KVLayout, spans LayerSpans) []int {
	n := spans.Len()
	out := []int{0}
	for _, e := range s.list {
		if e.pos > 0 && e.pos <= n {
			out = append(out, e.pos)
		}
	}
	if pos, ok := LivePos(l, spans); ok && pos == n && out[len(out)-1] != n {
		out = append(out, n)
	}
	return out
}

// Cuts is Cache.Cuts for a cache with linear layers: the known positions (Known) that leave a cache Forward
// accepts (LayerSpans.Restorable).
func (s *Snapshots[S]) Cuts(l KVLayout, spans LayerSpans) []int {
	return slices.DeleteFunc(s.Known(l, spans), func(n int) bool { return !spans.Restorable(n) })
}

// LivePos is the position every linear layer's live state describes (the Hi of its span); ok is false when the
// layout has no linear layers or an unfinished import left them at different positions.
func LivePos(l KVLayout, spans LayerSpans) (pos int, ok bool) {
	pos = -1
	for i := range l.Layers {
		if l.Layers[i].Kind != KVLinear {
			continue
		}
		if pos >= 0 && spans[i].Hi != pos {
			return 0, false
		}
		pos = spans[i].Hi
	}
	return pos, pos >= 0
}

// LinearBeyond reports whether a linear layer's state describes more than n positions (more than none for
// n < 0): truncating such a cache to n has to go back to a cut.
func LinearBeyond(l KVLayout, spans LayerSpans, n int) bool {
	for i := range l.Layers {
		if l.Layers[i].Kind == KVLinear && spans[i].Hi > max(n, 0) {
			return true
		}
	}
	return false
}
