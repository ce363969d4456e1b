package backend

import (
	"fmt"
	"slices"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// The checks below are the parts of the contract's argument validation that do not depend on how a backend
// stores its weights or caches. Backends call them and prefix their own name to the errors ("cpu: ...").

// NoContextLimit is the context limit of a model whose config.json states none: positions are then bounded by
// memory only.
const NoContextLimit = 1 << 20

// ContextLimit is the most positions a cache of a model with config c may hold (Model.MaxContext).
func ContextLimit(c model.Config) int {
	if n := c.MaxContext(); n > 0 {
		return n
	}
	return NoContextLimit
}

// CheckSeq checks what Forward requires of sequence i of a batch whatever its cache: at least one token, every
// token in [0, vocab), and a Logits buffer, when there is one, of vocab values. The error names the sequence.
func CheckSeq(i int, s Seq, vocab int) error {
	if len(s.Tokens) == 0 {
		return fmt.Errorf("sequence %d has no tokens", i)
	}
	for _, t := range s.Tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("sequence %d: token %d out of range [0, %d)", i, t, vocab)
		}
	}
	if s.Logits != nil && len(s.Logits) != vocab {
		return fmt.Errorf("sequence %d: logits buffer holds %d values, want %d", i, len(s.Logits), vocab)
	}
	return nil
}

// CheckBatch checks a Forward batch and returns each sequence's cache as the backend's own type C, with the
// position where its tokens start. own resolves one sequence's cache: it fails with ErrForeignCache when the
// cache is not one of this model's, and with the reason when it may not be used (ErrReleased, ...). The rest is
// checked here, sequence by sequence: no cache appears twice, CheckSeq, and LayerSpans.CheckForward against
// limit. Errors name the sequence; the backend adds its name. Nothing is changed, so a refused batch leaves
// every cache as it was.
func CheckBatch[C comparable](batch []Seq, vocab, limit int, own func(Cache) (C, LayerSpans, error)) (caches []C, starts []int, err error) {
	caches, starts = make([]C, len(batch)), make([]int, len(batch))
	seen := make(map[C]bool, len(batch))
	for i, s := range batch {
		c, spans, err := own(s.Cache)
		if err != nil {
			return nil, nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		if seen[c] {
			return nil, nil, fmt.Errorf("sequence %d: the same cache appears twice in one batch", i)
		}
		seen[c] = true
		if err := CheckSeq(i, s, vocab); err != nil {
			return nil, nil, err
		}
		if starts[i], err = spans.CheckForward(len(s.Tokens), limit); err != nil {
			return nil, nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		caches[i] = c
	}
	return caches, starts, nil
}

// Span is what one layer of a cache holds: positions [Lo, Hi), and the layer's window (0: a full layer, which
// holds from 0). A sliding layer holds at most its last Window positions once a step is done.
type Span struct {
	Lo, Hi, Window int
}

// LayerSpans keeps what each layer of a cache holds. Forward advances every layer together; ImportKV advances
// one layer at a time (chunks of the KV wire arrive per layer), so the layers may differ until an import is
// complete. A backend's cache keeps one and leaves to it Len, Truncate, Restorable and the checks of Forward's,
// Clone's, ExportKV's and ImportKV's arguments that concern positions and buffer sizes.
type LayerSpans []Span

// NewLayerSpans returns the spans of an empty cache of layout l.
func NewLayerSpans(l KVLayout) LayerSpans {
	p := make(LayerSpans, len(l.Layers))
	for i, ly := range l.Layers {
		if ly.Kind == KVSliding {
			p[i].Window = ly.Window
		}
	}
	return p
}

// FullSpans returns the spans of full layers holding [0, his[i]).
func FullSpans(his ...int) LayerSpans {
	p := make(LayerSpans, len(his))
	for i, h := range his {
		p[i].Hi = h
	}
	return p
}

// Len is the number of positions every layer has been fed: the minimum end over layers (Cache.Len).
func (p LayerSpans) Len() int {
	if len(p) == 0 {
		return 0
	}
	n := p[0].Hi
	for _, v := range p {
		n = min(n, v.Hi)
	}
	return n
}

// lacks reports whether a sliding layer holding s lacks a position that a query at n sees ([n-W+1, n)).
func (s Span) lacks(n int) bool {
	return s.Window > 0 && s.Lo > max(0, n-s.Window+1)
}

// Restorable reports whether the first n positions make a cache Forward accepts (Cache.Restorable): n <= Len()
// and every sliding layer holds what a query at n sees.
func (p LayerSpans) Restorable(n int) bool {
	if n < 0 || n > p.Len() {
		return false
	}
	for _, s := range p {
		if s.lacks(n) {
			return false
		}
	}
	return true
}

// CheckForward checks that Forward may append n positions to the cache and returns the position where they
// start: every layer must end at the same position (an import left unfinished makes them uneven), every
// sliding layer must hold what the first new query sees (ErrWindowGap), and n more must fit under limit.
func (p LayerSpans) CheckForward(n, limit int) (start int, err error) {
	for i, v := range p {
		if v.Hi != p[0].Hi {
			return 0, fmt.Errorf("cache layers hold different numbers of positions (layer 0: %d, layer %d: %d); finish importing first", p[0].Hi, i, v.Hi)
		}
	}
	start = p.Len()
	for i, v := range p {
		if v.lacks(start) {
			return 0, fmt.Errorf("layer %d holds [%d, %d) and its window of %d needs [%d, %d): %w", i, v.Lo, v.Hi, v.Window, max(0, start-v.Window+1), start, ErrWindowGap)
		}
	}
	if start+n > limit {
		return 0, fmt.Errorf("%d cached + %d new positions exceed the context limit %d", start, n, limit)
	}
	return start, nil
}

// Advance records that layer i was fed positions up to hi (Forward): a sliding layer then keeps its last
// Window positions.
func (p LayerSpans) Advance(i, hi int) {
	s := &p[i]
	s.Hi = max(s.Hi, hi)
	if s.Window > 0 {
		s.Lo = max(s.Lo, s.Hi-s.Window)
	}
}

// Truncate keeps the first n positions of every layer (Cache.Truncate). A sliding layer that held none of
// them holds [n, n) afterwards, which Forward refuses unless a query at n sees nothing before it.
func (p LayerSpans) Truncate(n int) {
	n = max(n, 0)
	for i := range p {
		p[i].Hi = min(p[i].Hi, n)
		p[i].Lo = min(p[i].Lo, p[i].Hi)
	}
}

// CheckClone checks that a clone of the first n positions is possible (Cache.Clone), and returns what each
// layer of the clone holds: [0, n) for full layers, [max(Lo, n-W), n) for sliding ones.
func (p LayerSpans) CheckClone(n int) (LayerSpans, error) {
	if n < 0 || n > p.Len() {
		return nil, fmt.Errorf("clone of %d positions from a cache holding %d", n, p.Len())
	}
	out := make(LayerSpans, len(p))
	for i, s := range p {
		if s.lacks(n) {
			return nil, fmt.Errorf("clone of %d positions: layer %d holds [%d, %d), its window of %d needs [%d, %d): %w", n, i, s.Lo, s.Hi, s.Window, max(0, n-s.Window+1), n, ErrWindowGone)
		}
		out[i] = Span{Hi: n, Window: s.Window}
		if s.Window > 0 {
			out[i].Lo = max(s.Lo, n-s.Window)
		}
	}
	return out, nil
}

// CheckLayer checks that layer is one of the cache's layers.
func (p LayerSpans) CheckLayer(layer int) error {
	if layer < 0 || layer >= len(p) {
		return fmt.Errorf("layer %d out of range (model has %d)", layer, len(p))
	}
	return nil
}

// checkKind checks that layer is one of the cache's layers and, in layout l, holds KV (linear false) or a state
// (linear true).
func (p LayerSpans) checkKind(l KVLayout, layer int, linear bool) error {
	if err := p.CheckLayer(layer); err != nil {
		return err
	}
	switch k := l.Layers[layer].Kind; {
	case linear && k != KVLinear:
		return fmt.Errorf("layer %d is a %s attention layer: it has keys and values, no state: %w", layer, k, ErrLayerKind)
	case !linear && k == KVLinear:
		return fmt.Errorf("layer %d is a linear layer: it has a state, no keys and values: %w", layer, ErrLayerKind)
	}
	return nil
}

// CheckExport checks ExportKV's arguments: the layer exists and is an attention layer (ErrLayerKind), it holds
// positions [from, to) (ErrNotHeld), and keys and values hold exactly the bytes of those positions in layout l.
func (p LayerSpans) CheckExport(l KVLayout, layer, from, to int, keys, values []byte) error {
	if err := p.checkKind(l, layer, false); err != nil {
		return err
	}
	s := p[layer]
	if from < 0 || from > to || to > s.Hi {
		return fmt.Errorf("export of positions [%d, %d) from layer %d holding %d", from, to, layer, s.Hi)
	}
	if from < s.Lo && from < to {
		return fmt.Errorf("export of positions [%d, %d) from layer %d holding [%d, %d): %w", from, to, layer, s.Lo, s.Hi, ErrNotHeld)
	}
	tb := l.LayerTokenBytes(layer)
	if len(keys) != (to-from)*tb || len(values) != (to-from)*tb {
		return fmt.Errorf("export of %d positions needs %d-byte buffers, got %d and %d", to-from, (to-from)*tb, len(keys), len(values))
	}
	return nil
}

// CheckImport checks ImportKV's arguments and returns how many positions keys and values hold: the layer
// exists and is an attention layer (ErrLayerKind), keys and values are equally long and a whole number of
// positions in layout l, the import starts within what the layer holds (no gap, except in a sliding layer), and
// it ends within limit positions.
func (p LayerSpans) CheckImport(l KVLayout, limit, layer, from int, keys, values []byte) (n int, err error) {
	if err := p.checkKind(l, layer, false); err != nil {
		return 0, err
	}
	tb := l.LayerTokenBytes(layer)
	if len(keys) != len(values) || len(keys)%tb != 0 {
		return 0, fmt.Errorf("import of %d key and %d value bytes: want equal multiples of %d bytes per token", len(keys), len(values), tb)
	}
	n = len(keys) / tb
	s := p[layer]
	if from < 0 || (from > s.Hi && s.Window == 0) {
		return 0, fmt.Errorf("import at position %d into layer %d holding %d would leave a gap", from, layer, s.Hi)
	}
	if from+n > limit {
		return 0, fmt.Errorf("import of positions [%d, %d) exceeds the context limit %d", from, from+n, limit)
	}
	return n, nil
}

// Import records that layer i received positions [from, from+n) (ImportKV, after CheckImport) and returns what
// it holds now: a full layer [0, max(Hi, from+n)); a sliding layer the union with what it held when the two
// touch (only [from, from+n) when the import opens a gap), of which it keeps the last Window positions.
func (p LayerSpans) Import(i, from, n int) Span {
	s := &p[i]
	if s.Window == 0 {
		s.Hi = max(s.Hi, from+n)
		return *s
	}
	if from > s.Hi || from+n < s.Lo || s.Lo == s.Hi {
		s.Lo, s.Hi = from, from+n
	} else {
		s.Lo, s.Hi = min(s.Lo, from), max(s.Hi, from+n)
	}
	s.Lo = max(s.Lo, s.Hi-s.Window)
	return *s
}

// checkArrays checks that bufs holds one slice per state array of linear layer ly, each exactly its bytes.
func checkArrays(ly LayerKV, what string, bufs [][]byte) error {
	if len(bufs) != len(ly.State) {
		return fmt.Errorf("%s of %d arrays, the layer's state has %d", what, len(bufs), len(ly.State))
	}
	for i, a := range ly.State {
		if len(bufs[i]) != a.Bytes() {
			return fmt.Errorf("%s: array %d (%s %v) needs %d bytes, got %d", what, i, a.DType, a.Shape, a.Bytes(), len(bufs[i]))
		}
	}
	return nil
}

// CheckExportState checks ExportState's arguments: the layer exists and is linear (ErrLayerKind), and dst holds
// one slice per state array, each exactly its bytes in layout l.
func (p LayerSpans) CheckExportState(l KVLayout, layer int, dst [][]byte) error {
	if err := p.checkKind(l, layer, true); err != nil {
		return err
	}
	return checkArrays(l.Layers[layer], "state export", dst)
}

// CheckImportState checks ImportState's arguments: the layer exists and is linear (ErrLayerKind), src holds one
// slice per state array, each exactly its bytes in layout l, and the state describes n positions, no fewer
// than the layer holds and at most limit.
func (p LayerSpans) CheckImportState(l KVLayout, limit, layer, n int, src [][]byte) error {
	if err := p.checkKind(l, layer, true); err != nil {
		return err
	}
	if err := checkArrays(l.Layers[layer], "state import", src); err != nil {
		return err
	}
	if n < p[layer].Hi {
		return fmt.Errorf("state import of %d positions into layer %d holding %d: truncate first", n, layer, p[layer].Hi)
	}
	if n > limit {
		return fmt.Errorf("state import of %d positions exceeds the context limit %d", n, limit)
	}
	return nil
}

// CheckCut checks that a cache with cuts (Cache.Cuts; nil: every position) can be cloned at n: n is one of them
// (ErrNoSnapshot, naming the nearest cut below).
func CheckCut(cuts []int, n int) error {
	if cuts == nil || slices.Contains(cuts, n) {
		return nil
	}
	return fmt.Errorf("clone of %d positions: the linear layers' state is kept at %v only: %w", n, cuts, ErrNoSnapshot)
}

// NewestCut is the largest of cuts at most n (n itself when cuts is nil: every position is a cut), or -1 when
// there is none.
func NewestCut(cuts []int, n int) int {
	if cuts == nil {
		return n
	}
	best := -1
	for _, c := range cuts {
		if c <= n {
			best = max(best, c)
		}
	}
	return best
}

// CheckLayout checks that a layout is one a cache can be made of: every layer of a known kind, attention layers
// with a positive shape (and a window when sliding), linear layers with the two state arrays of LinearLayer:
// {l.DType, [1, K-1, conv_dim]} and {float32, [1, Nv, Dv, Dk]}, every dimension positive. Backends check the
// layouts they build from a model's config with it.
func CheckLayout(l KVLayout) error {
	for i, ly := range l.Layers {
		switch ly.Kind {
		case KVFull, KVSliding:
			if ly.KVHeads <= 0 || ly.HeadDim <= 0 || (ly.Kind == KVSliding) != (ly.Window > 0) || ly.Window < 0 || ly.State != nil {
				return fmt.Errorf("layer %d: %s attention with %d KV heads of %d dims, window %d and %d state arrays", i, ly.Kind, ly.KVHeads, ly.HeadDim, ly.Window, len(ly.State))
			}
		case KVLinear:
			if ly.KVHeads != 0 || ly.HeadDim != 0 || ly.Window != 0 {
				return fmt.Errorf("layer %d: linear layer with %d KV heads of %d dims and window %d: it has none", i, ly.KVHeads, ly.HeadDim, ly.Window)
			}
			want := []struct {
				dt   DType
				rank int
			}{{l.DType, 3}, {Float32, 4}}
			if len(ly.State) != len(want) {
				return fmt.Errorf("layer %d: linear layer with %d state arrays, want 2 (conv window, state)", i, len(ly.State))
			}
			for j, a := range ly.State {
				ok := a.DType == want[j].dt && len(a.Shape) == want[j].rank && a.Shape[0] == 1
				for _, d := range a.Shape {
					ok = ok && d > 0
				}
				if !ok {
					return fmt.Errorf("layer %d: state array %d is %s %v, want %s of rank %d, leading dimension 1, every dimension positive", i, j, a.DType, a.Shape, want[j].dt, want[j].rank)
				}
			}
		default:
			return fmt.Errorf("layer %d: unknown kind %s", i, ly.Kind)
		}
	}
	return nil
}
