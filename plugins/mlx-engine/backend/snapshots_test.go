package backend_test

import (
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// payload is a test snapshot payload: the position it was taken at and how many holders share it.
type payload struct {
	pos  int
	refs int
}

// snapsAt returns Snapshots with a payload at each of pos, kept in that order.
func snapsAt(t *testing.T, pos ...int) *backend.Snapshots[*payload] {
	t.Helper()
	s := &backend.Snapshots[*payload]{}
	for _, p := range pos {
		s.Keep(p, func() *payload { return &payload{pos: p, refs: 1} })
	}
	return s
}

// positions lists s's positions in iteration order, checking each payload belongs to its position.
func positions(t *testing.T, s *backend.Snapshots[*payload]) []int {
	t.Helper()
	var out []int
	for p, v := range s.All() {
		if v.pos != p {
			t.Errorf("payload of %d at position %d", v.pos, p)
		}
		out = append(out, p)
	}
	if len(out) != s.Len() {
		t.Errorf("All yields %d snapshots, Len %d", len(out), s.Len())
	}
	return out
}

// TestSnapshotsKeep: snapshots stay sorted whatever the order they are kept in, a position is kept once (take
// is not called again), and At finds exactly the kept positions.
func TestSnapshotsKeep(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep []int
		want []int
	}{
		{"none", nil, nil},
		{"ascending", []int{0, 4, 9}, []int{0, 4, 9}},
		{"any order", []int{9, 0, 13, 4}, []int{0, 4, 9, 13}},
		{"repeated", []int{4, 9, 4, 9, 4}, []int{4, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &backend.Snapshots[*payload]{}
			takes := 0
			for _, p := range tc.keep {
				s.Keep(p, func() *payload { takes++; return &payload{pos: p, refs: 1} })
			}
			if got := positions(t, s); !slices.Equal(got, tc.want) || takes != len(tc.want) {
				t.Errorf("positions %v after %d takes, want %v", got, takes, tc.want)
			}
			for p := -1; p <= 14; p++ {
				v, ok := s.At(p)
				if want := slices.Contains(tc.want, p); ok != want || ok && v.pos != p || !ok && v != nil {
					t.Errorf("At(%d) = %v, %v", p, v, ok)
				}
			}
		})
	}
}

// TestSnapshotsDropUptoClear: DropAbove releases exactly the snapshots above a position, newest first; Upto
// shares those at or below n into a new set without touching the source; Clear releases all.
func TestSnapshotsDropUptoClear(t *testing.T) {
	for _, tc := range []struct {
		name    string
		have    []int
		at      int
		below   []int // at or below at
		dropped []int // above at, newest first
	}{
		{"empty", nil, 5, nil, nil},
		{"all below", []int{0, 4}, 9, []int{0, 4}, nil},
		{"at a snapshot", []int{0, 4, 9, 13}, 9, []int{0, 4, 9}, []int{13}},
		{"between", []int{0, 4, 9, 13}, 5, []int{0, 4}, []int{13, 9}},
		{"below all", []int{4, 9}, 0, nil, []int{9, 4}},
		{"negative", []int{0, 4}, -1, nil, []int{4, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapsAt(t, tc.have...)
			clone := s.Upto(tc.at, func(v *payload) *payload { v.refs++; return v })
			if got := positions(t, &clone); !slices.Equal(got, tc.below) {
				t.Errorf("Upto(%d) = %v, want %v", tc.at, got, tc.below)
			}
			for p, v := range s.All() {
				if want := 1 + btoi(p <= tc.at); v.refs != want {
					t.Errorf("Upto(%d): snapshot at %d held %d times, want %d", tc.at, p, v.refs, want)
				}
			}
			if got := positions(t, s); !slices.Equal(got, tc.have) {
				t.Errorf("Upto changed its source: %v", got)
			}

			var dropped []int
			s.DropAbove(tc.at, func(v *payload) { v.refs--; dropped = append(dropped, v.pos) })
			if !slices.Equal(dropped, tc.dropped) || !slices.Equal(positions(t, s), tc.below) {
				t.Errorf("DropAbove(%d) released %v leaving %v, want %v leaving %v", tc.at, dropped,
					positions(t, s), tc.dropped, tc.below)
			}

			var cleared []int
			s.Clear(func(v *payload) { v.refs--; cleared = append(cleared, v.pos) })
			if !slices.Equal(cleared, tc.below) || s.Len() != 0 {
				t.Errorf("Clear released %v leaving %d, want %v", cleared, s.Len(), tc.below)
			}
			for p, v := range clone.All() {
				if v.refs != 1 {
					t.Errorf("the clone's snapshot at %d held %d times after the source let go, want 1", p, v.refs)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hybrid is a layout of a full, a linear, a sliding (window 4) and a linear layer.
func hybrid() backend.KVLayout {
	return backend.KVLayout{Layers: []backend.LayerKV{
		{Kind: backend.KVFull}, {Kind: backend.KVLinear}, {Kind: backend.KVSliding, Window: 4}, {Kind: backend.KVLinear},
	}}
}

// spans returns the spans of hybrid(): the attention layers hold [lo, hi) (lo only for the sliding one), the
// linear layers are at lin1 and lin3.
func spans(hi, lo, lin1, lin3 int) backend.LayerSpans {
	return backend.LayerSpans{{Hi: hi}, {Hi: lin1}, {Lo: lo, Hi: hi, Window: 4}, {Hi: lin3}}
}

// TestLivePosAndCuts: LivePos is where every linear layer is; Known lists 0, the snapshots up to Len() and the
// live end; Cuts keeps the Restorable ones; KeepLive keeps the live state only at Len(); LinearBeyond tells whether a truncation has to go back to a cut.
func TestLivePosAndCuts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout backend.KVLayout
		spans  backend.LayerSpans
		snaps  []int
		live   int // -1: none
		known  []int
		cuts   []int
		beyond []int // the n in 0..Len() with LinearBeyond
	}{
		{"no linear layers", backend.DenseLayout(2, 1, 1, backend.Float32), backend.FullSpans(6, 6), nil,
			-1, []int{0}, []int{0}, nil},
		{"fresh", hybrid(), spans(0, 0, 0, 0), nil, 0, []int{0}, []int{0}, nil},
		{"live end", hybrid(), spans(6, 0, 6, 6), []int{3}, 6, []int{0, 3, 6}, []int{0, 3, 6},
			[]int{0, 1, 2, 3, 4, 5}},
		{"snapshot at the end", hybrid(), spans(6, 0, 6, 6), []int{0, 6}, 6, []int{0, 6}, []int{0, 6},
			[]int{0, 1, 2, 3, 4, 5}},
		{"snapshots past Len", hybrid(), spans(5, 0, 9, 9), []int{2, 5, 9}, 9, []int{0, 2, 5}, []int{0, 2, 5},
			[]int{0, 1, 2, 3, 4, 5}},
		{"unfinished import", hybrid(), spans(8, 0, 8, 3), []int{3}, -1, []int{0, 3}, []int{0, 3},
			[]int{0, 1, 2, 3}},
		{"evicted window", hybrid(), spans(10, 5, 10, 10), []int{4, 8}, 10, []int{0, 4, 8, 10}, []int{8, 10},
			[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pos, ok := backend.LivePos(tc.layout, tc.spans)
			if ok != (tc.live >= 0) || ok && pos != tc.live {
				t.Errorf("LivePos = %d, %v, want %d", pos, ok, tc.live)
			}
			s := snapsAt(t, tc.snaps...)
			if got := s.Known(tc.layout, tc.spans); !slices.Equal(got, tc.known) {
				t.Errorf("Known = %v, want %v", got, tc.known)
			}
			if got := s.Cuts(tc.layout, tc.spans); !slices.Equal(got, tc.cuts) {
				t.Errorf("Cuts = %v, want %v", got, tc.cuts)
			}
			k := &backend.Snapshots[*payload]{}
			k.KeepLive(tc.layout, tc.spans, func() *payload { return &payload{pos: pos, refs: 1} })
			var kept []int
			if tc.live >= 0 && tc.live == tc.spans.Len() {
				kept = []int{tc.live}
			}
			if got := positions(t, k); !slices.Equal(got, kept) {
				t.Errorf("KeepLive kept %v, want %v", got, kept)
			}
			var beyond []int
			for n := range tc.spans.Len() + 1 {
				if backend.LinearBeyond(tc.layout, tc.spans, n) {
					beyond = append(beyond, n)
				}
			}
			if !slices.Equal(beyond, tc.beyond) {
				t.Errorf("LinearBeyond at %v, want %v", beyond, tc.beyond)
			}
		})
	}
}
