package cpu

import (
	"errors"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// windows are the sliding windows of the test arch, layer by layer: two windows and two full layers, short
// enough that a 64-token prompt crosses them several times.
var windows = []int{8, 0, 5, 0}

func windowedModel(t *testing.T, d dtype.DType) *model.Model {
	t.Helper()
	return backendtest.GenerateWindowed(t, backendtest.Tiny(func(o *modelgen.Options) {
		o.NumLayers, o.DType = 4, d
	}), windows...)
}

// TestWindowMatchesReference: with sliding layers, on every kernel path, the backend agrees with the float64
// reference (whose sliding query at p sees exactly [p-W+1, p]) at every position of a 64-token sequence fed as
// a chunked prefill and then decoded, and the windows matter: the dense reference disagrees.
func TestWindowMatchesReference(t *testing.T) {
	t.Parallel()
	for _, d := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16} {
		for _, k := range kernelPaths() {
			t.Run(string(d)+"/"+pathNames[k], func(t *testing.T) {
				t.Parallel()
				m := windowedModel(t, d)
				tokens := backendtest.Prompt(64, m.Config.VocabSize, 11)
				want := backendtest.NewReference(t, m).Logits(tokens)
				bm, err := loadOn(m, backend.Options{PrefillChunk: 5}, k)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { bm.Close() })
				c := backendtest.NewCache(t, bm)
				got := [][]float32{backendtest.Forward(t, bm, c, tokens[:23]...)}
				for _, tok := range tokens[23:] {
					got = append(got, backendtest.Forward(t, bm, c, tok))
				}
				worst := 0.0
				for i, g := range got {
					w := want[22+i]
					worst = max(worst, maxAbsDiff(g, w)/max(1, maxAbs(w)))
				}
				t.Logf("max relative |Δlogit| = %.2e", worst)
				if worst > tolerance(d) {
					t.Errorf("backend differs from the reference by %.3e > %.0e", worst, tolerance(d))
				}
				if backendtest.Argmax(got[len(got)-1]) != backendtest.Argmax(want[len(want)-1]) {
					t.Error("greedy token differs from the reference")
				}
				dense := backendtest.Generate(t, backendtest.Tiny(func(o *modelgen.Options) { o.NumLayers, o.DType = 4, d }))
				w := backendtest.NewReference(t, dense).Logits(tokens)[63]
				if diff := maxAbsDiff(got[len(got)-1], w) / max(1, maxAbs(w)); diff < 100*tolerance(d) {
					t.Errorf("the windows change nothing: %.2e from the dense reference", diff)
				}
			})
		}
	}
}

// TestWindowChunkedBatchedExact: with sliding layers, a prefill in chunks shorter and longer than the windows
// gives the one-shot logits bit for bit, and so does a batch of sequences at other positions.
func TestWindowChunkedBatchedExact(t *testing.T) {
	t.Parallel()
	m := windowedModel(t, dtype.BFloat16)
	p := backendtest.Prompt(64, m.Config.VocabSize, 12)
	oneShot := load(t, m, backend.Options{PrefillChunk: 64})
	c := backendtest.NewCache(t, oneShot)
	want := backendtest.Forward(t, oneShot, c, p...)
	wantGreedy, _ := backendtest.Greedy(t, oneShot, c, want, 24)
	for _, chunk := range []int{1, 3, 7, 8, 9, 20} {
		bm := load(t, m, backend.Options{PrefillChunk: chunk})
		c := backendtest.NewCache(t, bm)
		got := backendtest.Forward(t, bm, c, p...)
		if !slices.Equal(got, want) {
			t.Errorf("chunk %d: logits differ from one-shot by %.2e", chunk, backendtest.RelDiff(got, want))
		}
		if g, _ := backendtest.Greedy(t, bm, c, got, 24); !slices.Equal(g, wantGreedy) {
			t.Errorf("chunk %d: greedy continuation %v, want %v", chunk, g, wantGreedy)
		}
	}
	// A batch: the prompt in two steps of 30 and 34 tokens beside another sequence decoding.
	bm := load(t, m, backend.Options{PrefillChunk: 16})
	a, b := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
	other := backendtest.Prompt(50, m.Config.VocabSize, 13)
	backendtest.Forward(t, bm, b, other[:40]...)
	logits, bl := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
	if err := bm.Forward([]backend.Seq{{Cache: b, Tokens: other[40:41]}, {Cache: a, Tokens: p[:30]}}); err != nil {
		t.Fatal(err)
	}
	if err := bm.Forward([]backend.Seq{{Cache: a, Tokens: p[30:], Logits: logits}, {Cache: b, Tokens: other[41:50], Logits: bl}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(logits, want) {
		t.Errorf("batched logits differ from one-shot by %.2e", backendtest.RelDiff(logits, want))
	}
	alone := backendtest.NewCache(t, bm)
	if w := backendtest.Forward(t, bm, alone, other...); !slices.Equal(bl, w) {
		t.Errorf("the other sequence's batched logits differ from alone by %.2e", backendtest.RelDiff(bl, w))
	}
}

// TestWindowCacheBounded: a sliding layer's memory is bounded by its window and the prefill chunk, not by the
// sequence; full layers grow with it.
func TestWindowCacheBounded(t *testing.T) {
	t.Parallel()
	m := windowedModel(t, dtype.BFloat16)
	const chunk = 4
	bm := load(t, m, backend.Options{PrefillChunk: chunk})
	c := backendtest.NewCache(t, bm)
	p := backendtest.Prompt(300, m.Config.VocabSize, 14)
	logits := backendtest.Forward(t, bm, c, p[:200]...)
	backendtest.Greedy(t, bm, c, logits, 100)
	cc := c.(*cache)
	var sliding, full int64
	for i, l := range cc.layers {
		b := int64(len(l.k16)+len(l.v16)) * 2
		if w := windows[i%len(windows)]; w > 0 {
			if l.cap > w+chunk {
				t.Errorf("layer %d (window %d): capacity %d positions, more than window + chunk", i, w, l.cap)
			}
			sliding += b
		} else {
			if l.cap < 300 {
				t.Errorf("full layer %d: capacity %d positions, less than the 300 fed", i, l.cap)
			}
			full += b
		}
	}
	if cc.Len() != 300 || c.Bytes() != sliding+full {
		t.Errorf("Len %d, Bytes %d, want 300 and %d", cc.Len(), c.Bytes(), sliding+full)
	}
	t.Logf("sliding layers %d bytes, full layers %d bytes", sliding, full)
}

// TestWindowRestore: Truncate and Clone are exact where the windows still hold what the next query sees, Clone
// refuses elsewhere (ErrWindowGone), and Forward refuses a cache that lacks a window (ErrWindowGap) without
// changing it, so a missing window never becomes a wrong token.
func TestWindowRestore(t *testing.T) {
	t.Parallel()
	m := windowedModel(t, dtype.BFloat16)
	bm := load(t, m, backend.Options{PrefillChunk: 16})
	p := backendtest.Prompt(65, m.Config.VocabSize, 15)
	ref := backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, ref, p[:63]...)
	want63 := backendtest.Forward(t, bm, ref, p[63])
	want64 := backendtest.Forward(t, bm, ref, p[64])

	c := backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, c, p[:64]...)
	// Layer 0 (W=8) holds [56, 64), layer 2 (W=5) [59, 64): a query at 63 sees [59, 63] and [56, 63].
	for n, want := range map[int]bool{64: true, 63: true, 62: false, 59: false, 0: false, 65: false} {
		if got := c.Restorable(n); got != want {
			t.Errorf("Restorable(%d) = %v, want %v", n, got, want)
		}
	}
	if _, err := c.Clone(62); !errors.Is(err, backend.ErrWindowGone) {
		t.Errorf("Clone(62): %v, want ErrWindowGone", err)
	}
	for _, n := range []int{63, 64} {
		cl, err := c.Clone(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Release)
		got, want := backendtest.Forward(t, bm, cl, p[n]), want64
		if n == 63 {
			want = want63
		}
		if !slices.Equal(got, want) {
			t.Errorf("clone at %d continues %.2e away from the original", n, backendtest.RelDiff(got, want))
		}
	}
	c.Truncate(63)
	if got := backendtest.Forward(t, bm, c, p[63]); !slices.Equal(got, want63) {
		t.Errorf("Truncate(63) continues %.2e away from the original", backendtest.RelDiff(got, want63))
	}
	c.Truncate(60)
	if c.Restorable(60) {
		t.Error("Restorable(60) after Truncate(60)")
	}
	err := bm.Forward([]backend.Seq{{Cache: c, Tokens: p[60:61]}})
	if !errors.Is(err, backend.ErrWindowGap) {
		t.Errorf("Forward after Truncate(60): %v, want ErrWindowGap", err)
	}
	if c.Len() != 60 {
		t.Errorf("a refused Forward changed the cache: Len %d", c.Len())
	}
	c.Truncate(0)
	if got := backendtest.Forward(t, bm, c, p[:64]...); !slices.Equal(got, want63) {
		t.Error("an emptied cache does not prefill as a new one")
	}
}

// TestWindowExportImport: a sliding layer exports only the positions it holds; a cache made of the full layers'
// [0, n) and each sliding layer's last positions (imported with a gap, as the KV wire's receiver does)
// continues exactly when it holds what the next query sees, and is refused otherwise; ImportKV works after a
// prefix at start_pos > 0 too.
func TestWindowExportImport(t *testing.T) {
	t.Parallel()
	m := windowedModel(t, dtype.BFloat16)
	bm := load(t, m, backend.Options{PrefillChunk: 16})
	l := bm.KVLayout()
	if l.NumLayers() != 4 || l.Layers[0].Kind != backend.KVSliding || l.Layers[0].Window != 8 || l.Layers[1].Kind != backend.KVFull ||
		l.Layers[2].Window != 5 || !l.HasWindows() {
		t.Fatalf("layout %+v", l)
	}
	p := backendtest.Prompt(65, m.Config.VocabSize, 16)
	const n = 64
	src := backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, src, p[:n]...)
	want := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), p...)

	export := func(layer, from, to int) (k, v []byte) {
		tb := l.LayerTokenBytes(layer)
		k, v = make([]byte, (to-from)*tb), make([]byte, (to-from)*tb)
		if err := src.ExportKV(layer, from, to, k, v); err != nil {
			t.Fatalf("export [%d, %d) of layer %d: %v", from, to, layer, err)
		}
		return k, v
	}
	tb := l.LayerTokenBytes(0)
	if err := src.ExportKV(0, 55, n, make([]byte, 9*tb), make([]byte, 9*tb)); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("export of an evicted position: %v, want ErrNotHeld", err)
	}
	// build imports the full layers from start and each sliding layer's last m positions (m = W-extra).
	build := func(dst backend.Cache, start, extra int) {
		for layer, ly := range l.Layers {
			from := start
			if ly.Kind == backend.KVSliding {
				from = n - (ly.Window - extra)
			}
			k, v := export(layer, from, n)
			if err := dst.ImportKV(layer, from, k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		extra int
		ok    bool
	}{{"whole windows", 0, true}, {"windows less one", 1, true}, {"windows less two", 2, false}} {
		dst := backendtest.NewCache(t, bm)
		build(dst, 0, tc.extra)
		if dst.Len() != n || dst.Restorable(n) != tc.ok {
			t.Errorf("%s: Len %d, Restorable %v", tc.name, dst.Len(), dst.Restorable(n))
		}
		logits := make([]float32, bm.VocabSize())
		err := bm.Forward([]backend.Seq{{Cache: dst, Tokens: p[n:], Logits: logits}})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.ok && !slices.Equal(logits, want):
			t.Errorf("%s: logits differ from a local prefill by %.2e", tc.name, backendtest.RelDiff(logits, want))
		case !tc.ok && !errors.Is(err, backend.ErrWindowGap):
			t.Errorf("%s: Forward: %v, want ErrWindowGap", tc.name, err)
		}
	}
	// start_pos > 0: a prefix of 40 positions computed here, the rest imported (sliding layers after a gap).
	dst := backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, dst, p[:40]...)
	build(dst, 40, 0)
	if got := backendtest.Forward(t, bm, dst, p[n]); !slices.Equal(got, want) {
		t.Errorf("import at start_pos 40: logits differ from a local prefill by %.2e", backendtest.RelDiff(got, want))
	}
	// Sliding chunks that overlap what the layer holds (the end-anchored window reaching below start_pos).
	dst = backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, dst, p[:60]...)
	build(dst, 60, 0)
	if got := backendtest.Forward(t, bm, dst, p[n]); !slices.Equal(got, want) {
		t.Errorf("import at start_pos 60: logits differ from a local prefill by %.2e", backendtest.RelDiff(got, want))
	}
}
