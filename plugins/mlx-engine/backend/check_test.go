package backend_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// wantErr fails unless err is nil for want == "" and otherwise an error whose message is want.
func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error %v", err)
	case want != "" && (err == nil || err.Error() != want):
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestContextLimit(t *testing.T) {
	if got := backend.ContextLimit(model.Config{MaxPositionEmbeddings: 4096}); got != 4096 {
		t.Errorf("ContextLimit = %d, want 4096", got)
	}
	if got := backend.ContextLimit(model.Config{}); got != backend.NoContextLimit {
		t.Errorf("ContextLimit without a limit = %d, want %d", got, backend.NoContextLimit)
	}
}

func TestCheckSeq(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  backend.Seq
		want string
	}{
		{"ok", backend.Seq{Tokens: []int32{0, 9}, Logits: make([]float32, 10)}, ""},
		{"no logits", backend.Seq{Tokens: []int32{3}}, ""},
		{"no tokens", backend.Seq{}, "sequence 2 has no tokens"},
		{"token too large", backend.Seq{Tokens: []int32{1, 10}}, "sequence 2: token 10 out of range [0, 10)"},
		{"negative token", backend.Seq{Tokens: []int32{-1}}, "sequence 2: token -1 out of range [0, 10)"},
		{"short logits", backend.Seq{Tokens: []int32{1}, Logits: make([]float32, 3)}, "sequence 2: logits buffer holds 3 values, want 10"},
		{"empty logits", backend.Seq{Tokens: []int32{1}, Logits: []float32{}}, "sequence 2: logits buffer holds 0 values, want 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, backend.CheckSeq(2, tc.seq, 10), tc.want)
		})
	}
}

func TestLayerLengths(t *testing.T) {
	even, uneven := backend.FullSpans(5, 5, 5), backend.FullSpans(5, 7, 6)
	if even.Len() != 5 || uneven.Len() != 5 || backend.LayerSpans(nil).Len() != 0 {
		t.Errorf("Len: %d, %d, %d", even.Len(), uneven.Len(), backend.LayerSpans(nil).Len())
	}
	for _, tc := range []struct {
		name      string
		p         backend.LayerSpans
		n, limit  int
		wantStart int
		want      string
	}{
		{"even", even, 3, 8, 5, ""},
		{"empty cache", backend.FullSpans(0, 0), 8, 8, 0, ""},
		{"no layers", nil, 1, 8, 0, ""},
		{"context full", even, 4, 8, 0, "5 cached + 4 new positions exceed the context limit 8"},
		{"uneven", uneven, 1, 100, 0, "cache layers hold different numbers of positions (layer 0: 5, layer 1: 7); finish importing first"},
	} {
		t.Run("CheckForward/"+tc.name, func(t *testing.T) {
			start, err := tc.p.CheckForward(tc.n, tc.limit)
			wantErr(t, err, tc.want)
			if start != tc.wantStart {
				t.Errorf("start = %d, want %d", start, tc.wantStart)
			}
		})
	}

	p := slices.Clone(uneven)
	p.Truncate(6)
	if !slices.Equal(p, backend.FullSpans(5, 6, 6)) {
		t.Errorf("Truncate(6) = %v", p)
	}
	p.Truncate(-1)
	if !slices.Equal(p, backend.FullSpans(0, 0, 0)) {
		t.Errorf("Truncate(-1) = %v", p)
	}

	wantErr(t, errOf(uneven.CheckClone(5)), "")
	wantErr(t, errOf(uneven.CheckClone(0)), "")
	wantErr(t, errOf(uneven.CheckClone(6)), "clone of 6 positions from a cache holding 5")
	wantErr(t, errOf(uneven.CheckClone(-1)), "clone of -1 positions from a cache holding 5")
}

func TestLayerLengthsExportImport(t *testing.T) {
	l := backend.DenseLayout(2, 2, 2, backend.BFloat16) // 8 bytes per token
	p := backend.FullSpans(4, 2)
	buf := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"export", p.CheckExport(l, 0, 1, 4, buf(24), buf(24)), ""},
		{"export empty", p.CheckExport(l, 1, 2, 2, nil, nil), ""},
		{"export bad layer", p.CheckExport(l, 2, 0, 1, buf(8), buf(8)), "layer 2 out of range (model has 2)"},
		{"export negative layer", p.CheckExport(l, -1, 0, 1, buf(8), buf(8)), "layer -1 out of range (model has 2)"},
		{"export past end", p.CheckExport(l, 1, 1, 3, buf(16), buf(16)), "export of positions [1, 3) from layer 1 holding 2"},
		{"export reversed", p.CheckExport(l, 0, 3, 2, nil, nil), "export of positions [3, 2) from layer 0 holding 4"},
		{"export negative", p.CheckExport(l, 0, -1, 2, buf(24), buf(24)), "export of positions [-1, 2) from layer 0 holding 4"},
		{"export short buffer", p.CheckExport(l, 0, 0, 2, buf(8), buf(16)), "export of 2 positions needs 16-byte buffers, got 8 and 16"},
		{"import bad layer", errOf(p.CheckImport(l, 16, 2, 0, buf(8), buf(8))), "layer 2 out of range (model has 2)"},
		{"import ragged", errOf(p.CheckImport(l, 16, 1, 2, buf(9), buf(9))), "import of 9 key and 9 value bytes: want equal multiples of 8 bytes per token"},
		{"import unequal", errOf(p.CheckImport(l, 16, 1, 2, buf(8), buf(16))), "import of 8 key and 16 value bytes: want equal multiples of 8 bytes per token"},
		{"import gap", errOf(p.CheckImport(l, 16, 1, 3, buf(8), buf(8))), "import at position 3 into layer 1 holding 2 would leave a gap"},
		{"import negative", errOf(p.CheckImport(l, 16, 1, -1, buf(8), buf(8))), "import at position -1 into layer 1 holding 2 would leave a gap"},
		{"import past context", errOf(p.CheckImport(l, 16, 0, 4, buf(13*8), buf(13*8))), "import of positions [4, 17) exceeds the context limit 16"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.err, tc.want) })
	}
	for _, tc := range []struct {
		name        string
		layer, from int
		bytes       int
		want        int
	}{
		{"append", 1, 2, 24, 3},
		{"overwrite", 0, 1, 16, 2},
		{"to the limit", 0, 4, 12 * 8, 12},
		{"nothing", 1, 2, 0, 0},
	} {
		t.Run("import "+tc.name, func(t *testing.T) {
			n, err := p.CheckImport(l, 16, tc.layer, tc.from, buf(tc.bytes), buf(tc.bytes))
			if err != nil || n != tc.want {
				t.Errorf("CheckImport = %d, %v; want %d positions", n, err, tc.want)
			}
		})
	}
}

func errOf[T any](_ T, err error) error { return err }

// fakeCache is enough of a cache for CheckBatch: its layer lengths and whether it may be used.
type fakeCache struct {
	backend.Cache
	lens     backend.LayerSpans
	released bool
}

func ownFake(c backend.Cache) (*fakeCache, backend.LayerSpans, error) {
	fc, ok := c.(*fakeCache)
	if !ok || fc == nil {
		return nil, nil, backend.ErrForeignCache
	}
	if fc.released {
		return nil, nil, backend.ErrReleased
	}
	return fc, fc.lens, nil
}

func TestCheckBatch(t *testing.T) {
	a, b := &fakeCache{lens: backend.FullSpans(3, 3)}, &fakeCache{lens: backend.FullSpans(0, 0)}
	uneven, released := &fakeCache{lens: backend.FullSpans(3, 4)}, &fakeCache{released: true}
	tok := []int32{1}
	for _, tc := range []struct {
		name  string
		batch []backend.Seq
		want  string
	}{
		{"foreign", []backend.Seq{{Cache: a, Tokens: tok}, {Tokens: tok}}, "sequence 1: backend: cache does not belong to this model"},
		{"released", []backend.Seq{{Cache: released, Tokens: tok}}, "sequence 0: backend: cache has been released"},
		{"twice", []backend.Seq{{Cache: a, Tokens: tok}, {Cache: b, Tokens: tok}, {Cache: a, Tokens: tok}}, "sequence 2: the same cache appears twice in one batch"},
		{"bad token", []backend.Seq{{Cache: a, Tokens: tok}, {Cache: b, Tokens: []int32{10}}}, "sequence 1: token 10 out of range [0, 10)"},
		{"uneven", []backend.Seq{{Cache: uneven, Tokens: tok}}, "sequence 0: cache layers hold different numbers of positions (layer 0: 3, layer 1: 4); finish importing first"},
		{"context full", []backend.Seq{{Cache: b, Tokens: tok}, {Cache: a, Tokens: make([]int32, 6)}}, "sequence 1: 3 cached + 6 new positions exceed the context limit 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caches, starts, err := backend.CheckBatch(tc.batch, 10, 8, ownFake)
			wantErr(t, err, tc.want)
			if caches != nil || starts != nil {
				t.Errorf("a refused batch returned caches %v and starts %v", caches, starts)
			}
		})
	}
	caches, starts, err := backend.CheckBatch([]backend.Seq{{Cache: a, Tokens: tok}, {Cache: b, Tokens: make([]int32, 8)}}, 10, 8, ownFake)
	if err != nil || !slices.Equal(caches, []*fakeCache{a, b}) || !slices.Equal(starts, []int{3, 0}) {
		t.Errorf("CheckBatch = %v, %v, %v", caches, starts, err)
	}
	if _, _, err := backend.CheckBatch([]backend.Seq{{Tokens: tok}}, 10, 8, ownFake); !errors.Is(err, backend.ErrForeignCache) {
		t.Errorf("foreign cache: %v is not ErrForeignCache", err)
	}
}

// TestLayerSpansWindows: what a sliding layer holds after Forward, Truncate and ImportKV, and which positions
// Forward, Clone and ExportKV then accept.
func TestLayerSpansWindows(t *testing.T) {
	l := backend.KVLayout{Layers: []backend.LayerKV{{Kind: backend.KVFull, KVHeads: 1, HeadDim: 2}, {Kind: backend.KVSliding, Window: 4, KVHeads: 1, HeadDim: 2}}, DType: backend.BFloat16}
	p := backend.NewLayerSpans(l)
	if !slices.Equal(p, backend.LayerSpans{{}, {Window: 4}}) {
		t.Fatalf("NewLayerSpans = %v", p)
	}
	for i := range p {
		p.Advance(i, 10)
	}
	if !slices.Equal(p, backend.LayerSpans{{Hi: 10}, {Lo: 6, Hi: 10, Window: 4}}) {
		t.Fatalf("after 10 positions: %v", p)
	}
	// A query at n sees [n-3, n]: the layer holding [6, 10) serves n = 10 and n = 9 only.
	for n, want := range map[int]bool{10: true, 9: true, 8: false, 0: false, 11: false} {
		if got := p.Restorable(n); got != want {
			t.Errorf("Restorable(%d) = %v, want %v", n, got, want)
		}
	}
	if spans, err := p.CheckClone(9); err != nil || !slices.Equal(spans, backend.LayerSpans{{Hi: 9}, {Lo: 6, Hi: 9, Window: 4}}) {
		t.Errorf("CheckClone(9) = %v, %v", spans, err)
	}
	if _, err := p.CheckClone(8); !errors.Is(err, backend.ErrWindowGone) {
		t.Errorf("CheckClone(8): %v, want ErrWindowGone", err)
	}
	buf := func(n int) []byte { return make([]byte, n) }
	wantErr(t, p.CheckExport(l, 1, 6, 10, buf(16), buf(16)), "")
	if err := p.CheckExport(l, 1, 5, 10, buf(20), buf(20)); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("export of an evicted position: %v, want ErrNotHeld", err)
	}
	q := slices.Clone(p)
	q.Truncate(8)
	if _, err := q.CheckForward(1, 100); !errors.Is(err, backend.ErrWindowGap) {
		t.Errorf("Forward after Truncate(8): %v, want ErrWindowGap", err)
	}
	q.Truncate(0)
	if _, err := q.CheckForward(1, 100); err != nil {
		t.Errorf("Forward after Truncate(0): %v", err)
	}
	// Imports: a gap in a sliding layer is allowed (it then holds only what came), not in a full one.
	if _, err := p.CheckImport(l, 100, 1, 20, buf(8), buf(8)); err != nil {
		t.Errorf("gap into a sliding layer: %v", err)
	}
	wantErr(t, errOf(p.CheckImport(l, 100, 0, 20, buf(8), buf(8))), "import at position 20 into layer 0 holding 10 would leave a gap")
	for _, tc := range []struct {
		name     string
		from, n  int
		want     backend.Span
		forwards bool // Forward at the layer's end is accepted afterwards
	}{
		{"gap, three positions", 17, 3, backend.Span{Lo: 17, Hi: 20, Window: 4}, true},
		{"gap, two positions", 18, 2, backend.Span{Lo: 18, Hi: 20, Window: 4}, false},
		{"overlap", 8, 6, backend.Span{Lo: 10, Hi: 14, Window: 4}, true},
		{"append", 10, 1, backend.Span{Lo: 7, Hi: 11, Window: 4}, true},
	} {
		q := slices.Clone(p)
		got := q.Import(1, tc.from, tc.n)
		if got != tc.want || q[1] != tc.want {
			t.Errorf("%s: holds %+v, want %+v", tc.name, got, tc.want)
		}
		q.Import(0, q[0].Hi, got.Hi-q[0].Hi)
		if _, err := q.CheckForward(1, 100); (err == nil) != tc.forwards {
			t.Errorf("%s: Forward: %v", tc.name, err)
		}
	}
}

// hybridLayout is a full attention layer, a linear layer (K=4, conv_dim 6, Nv=2, Dv=3, Dk=4) and a sliding one.
func hybridLayout(dt backend.DType) backend.KVLayout {
	return backend.KVLayout{DType: dt, Layers: []backend.LayerKV{
		{Kind: backend.KVFull, KVHeads: 1, HeadDim: 2},
		backend.LinearLayer(dt, 4, 6, 2, 3, 4),
		{Kind: backend.KVSliding, Window: 4, KVHeads: 1, HeadDim: 2},
	}}
}

func TestLinearLayout(t *testing.T) {
	l := hybridLayout(backend.BFloat16)
	ly := l.Layers[1]
	if !ly.Equal(backend.LayerKV{Kind: backend.KVLinear, State: []backend.ArraySpec{
		{DType: backend.BFloat16, Shape: []int{1, 3, 6}}, {DType: backend.Float32, Shape: []int{1, 2, 3, 4}}}}) {
		t.Errorf("LinearLayer = %+v", ly)
	}
	if ly.Equal(backend.LinearLayer(backend.BFloat16, 4, 6, 2, 4, 3)) || ly.Equal(l.Layers[0]) {
		t.Error("Equal ignores the state's shape or the kind")
	}
	// 3×6 bf16 + 2×3×4 float32.
	if got := ly.StateBytes(); got != 36+96 || l.StateBytes() != 132 {
		t.Errorf("StateBytes = %d, layout %d; want 132", got, l.StateBytes())
	}
	if l.LayerTokenBytes(1) != 0 || l.PositionBytes() != 2*4+2*4 {
		t.Errorf("a linear layer costs %d bytes per token; PositionBytes %d", l.LayerTokenBytes(1), l.PositionBytes())
	}
	if !l.HasLinear() || backend.DenseLayout(2, 1, 2, backend.BFloat16).HasLinear() {
		t.Error("HasLinear")
	}
	if kv, hd, ok := l.Uniform(); !ok || kv != 1 || hd != 2 {
		t.Errorf("Uniform over the attention layers = %d, %d, %v", kv, hd, ok)
	}
	if backend.KVLinear.String() != "linear" || backend.LayerKind(9).String() != "LayerKind(9)" {
		t.Errorf("LayerKind names: %s, %s", backend.KVLinear, backend.LayerKind(9))
	}
	if p := backend.NewLayerSpans(l); !slices.Equal(p, backend.LayerSpans{{}, {}, {Window: 4}}) {
		t.Errorf("NewLayerSpans = %v", p)
	}
}

func TestCheckLayout(t *testing.T) {
	bf := backend.BFloat16
	with := func(mod func(l *backend.KVLayout)) backend.KVLayout {
		l := hybridLayout(bf)
		l.Layers[1].State = slices.Clone(l.Layers[1].State)
		mod(&l)
		return l
	}
	for _, tc := range []struct {
		name string
		l    backend.KVLayout
		want string
	}{
		{"hybrid", hybridLayout(bf), ""},
		{"dense", backend.DenseLayout(2, 2, 8, bf), ""},
		{"float32", hybridLayout(backend.Float32), ""},
		{"no heads", with(func(l *backend.KVLayout) { l.Layers[0].KVHeads = 0 }), "layer 0: full attention with 0 KV heads of 2 dims, window 0 and 0 state arrays"},
		{"sliding without window", with(func(l *backend.KVLayout) { l.Layers[2].Window = 0 }), "layer 2: sliding attention with 1 KV heads of 2 dims, window 0 and 0 state arrays"},
		{"full with window", with(func(l *backend.KVLayout) { l.Layers[0].Window = 3 }), "layer 0: full attention with 1 KV heads of 2 dims, window 3 and 0 state arrays"},
		{"attention with state", with(func(l *backend.KVLayout) { l.Layers[0].State = l.Layers[1].State }), "layer 0: full attention with 1 KV heads of 2 dims, window 0 and 2 state arrays"},
		{"linear with heads", with(func(l *backend.KVLayout) { l.Layers[1].KVHeads = 1 }), "layer 1: linear layer with 1 KV heads of 0 dims and window 0: it has none"},
		{"one array", with(func(l *backend.KVLayout) { l.Layers[1].State = l.Layers[1].State[:1] }), "layer 1: linear layer with 1 state arrays, want 2 (conv window, state)"},
		{"conv dtype", with(func(l *backend.KVLayout) { l.Layers[1].State[0].DType = backend.Float16 }), "layer 1: state array 0 is float16 [1 3 6], want bfloat16 of rank 3, leading dimension 1, every dimension positive"},
		{"state dtype", with(func(l *backend.KVLayout) { l.Layers[1].State[1].DType = bf }), "layer 1: state array 1 is bfloat16 [1 2 3 4], want float32 of rank 4, leading dimension 1, every dimension positive"},
		{"rank", with(func(l *backend.KVLayout) { l.Layers[1].State[1].Shape = []int{2, 3, 4} }), "layer 1: state array 1 is float32 [2 3 4], want float32 of rank 4, leading dimension 1, every dimension positive"},
		{"batch of two", with(func(l *backend.KVLayout) { l.Layers[1].State[0].Shape = []int{2, 3, 6} }), "layer 1: state array 0 is bfloat16 [2 3 6], want bfloat16 of rank 3, leading dimension 1, every dimension positive"},
		{"kernel of 1", with(func(l *backend.KVLayout) { l.Layers[1].State[0].Shape = []int{1, 0, 6} }), "layer 1: state array 0 is bfloat16 [1 0 6], want bfloat16 of rank 3, leading dimension 1, every dimension positive"},
		{"unknown kind", with(func(l *backend.KVLayout) { l.Layers[2].Kind = 7 }), "layer 2: unknown kind LayerKind(7)"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, backend.CheckLayout(tc.l), tc.want) })
	}
}

// TestLayerSpansLinear: ExportKV/ImportKV refuse a linear layer and ExportState/ImportState an attention layer
// (ErrLayerKind); state buffers must match the layout's arrays; an import cannot go back.
func TestLayerSpansLinear(t *testing.T) {
	l := hybridLayout(backend.BFloat16)
	p := backend.LayerSpans{{Hi: 5}, {Hi: 5}, {Lo: 1, Hi: 5, Window: 4}}
	buf := func(n int) []byte { return make([]byte, n) }
	state := func() [][]byte { return [][]byte{buf(36), buf(96)} }
	for _, tc := range []struct {
		name string
		err  error
		want string
		kind bool
	}{
		{"export state", p.CheckExportState(l, 1, state()), "", false},
		{"import state", p.CheckImportState(l, 16, 1, 9, state()), "", false},
		{"import state at the same position", p.CheckImportState(l, 16, 1, 5, state()), "", false},
		{"import state to the limit", p.CheckImportState(l, 16, 1, 16, state()), "", false},
		{"export KV of a linear layer", p.CheckExport(l, 1, 0, 1, buf(0), buf(0)), "layer 1 is a linear layer: it has a state, no keys and values: backend: the layer's kind does not hold that", true},
		{"import KV into a linear layer", errOf(p.CheckImport(l, 16, 1, 5, buf(0), buf(0))), "layer 1 is a linear layer: it has a state, no keys and values: backend: the layer's kind does not hold that", true},
		{"export state of a full layer", p.CheckExportState(l, 0, state()), "layer 0 is a full attention layer: it has keys and values, no state: backend: the layer's kind does not hold that", true},
		{"import state into a sliding layer", p.CheckImportState(l, 16, 2, 5, state()), "layer 2 is a sliding attention layer: it has keys and values, no state: backend: the layer's kind does not hold that", true},
		{"export state bad layer", p.CheckExportState(l, 3, state()), "layer 3 out of range (model has 3)", false},
		{"import state negative layer", p.CheckImportState(l, 16, -1, 5, state()), "layer -1 out of range (model has 3)", false},
		{"export state one array", p.CheckExportState(l, 1, state()[:1]), "state export of 1 arrays, the layer's state has 2", false},
		{"export state nil", p.CheckExportState(l, 1, nil), "state export of 0 arrays, the layer's state has 2", false},
		{"import state three arrays", p.CheckImportState(l, 16, 1, 5, append(state(), buf(1))), "state import of 3 arrays, the layer's state has 2", false},
		{"export state short conv", p.CheckExportState(l, 1, [][]byte{buf(35), buf(96)}), "state export: array 0 (bfloat16 [1 3 6]) needs 36 bytes, got 35", false},
		{"import state long state", p.CheckImportState(l, 16, 1, 5, [][]byte{buf(36), buf(97)}), "state import: array 1 (float32 [1 2 3 4]) needs 96 bytes, got 97", false},
		{"import state going back", p.CheckImportState(l, 16, 1, 4, state()), "state import of 4 positions into layer 1 holding 5: truncate first", false},
		{"import state past context", p.CheckImportState(l, 16, 1, 17, state()), "state import of 17 positions exceeds the context limit 16", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.err, tc.want)
			if errors.Is(tc.err, backend.ErrLayerKind) != tc.kind {
				t.Errorf("errors.Is(%v, ErrLayerKind) = %v", tc.err, !tc.kind)
			}
		})
	}
}

func TestCuts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cuts   []int
		n      int
		newest int
		want   string
	}{
		{"every position", nil, 7, 7, ""},
		{"a cut", []int{0, 4, 9}, 4, 4, ""},
		{"the end", []int{0, 4, 9}, 9, 9, ""},
		{"between", []int{0, 4, 9}, 6, 4, "clone of 6 positions: the linear layers' state is kept at [0 4 9] only: backend: no snapshot of the linear layers' state at that position"},
		{"past the end", []int{0, 4, 9}, 12, 9, "clone of 12 positions: the linear layers' state is kept at [0 4 9] only: backend: no snapshot of the linear layers' state at that position"},
		{"below every cut", []int{3}, 2, -1, "clone of 2 positions: the linear layers' state is kept at [3] only: backend: no snapshot of the linear layers' state at that position"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := backend.CheckCut(tc.cuts, tc.n)
			wantErr(t, err, tc.want)
			if (err != nil) != errors.Is(err, backend.ErrNoSnapshot) {
				t.Errorf("%v is not ErrNoSnapshot", err)
			}
			if got := backend.NewestCut(tc.cuts, tc.n); got != tc.newest {
				t.Errorf("NewestCut = %d, want %d", got, tc.newest)
			}
		})
	}
}
