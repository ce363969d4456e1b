package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

type suite struct {
	b    backend.Backend
	opts Options
}

func (s *suite) parallel(t *testing.T) {
	if s.opts.Parallel {
		t.Parallel()
	}
}

// eachVariant runs check as one subtest per variant.
func (s *suite) eachVariant(check func(t *testing.T, v Variant)) func(t *testing.T) {
	return func(t *testing.T) {
		for _, v := range s.opts.Variants {
			t.Run(v.Name, func(t *testing.T) {
				s.parallel(t)
				check(t, v)
			})
		}
	}
}

func (s *suite) load(t *testing.T, o modelgen.Options, opts backend.Options) backend.Model {
	t.Helper()
	return Load(t, s.b, Generate(t, o), opts)
}

// matches reports whether got is close enough to want: equal when the backend is exact, within the tolerance of
// dtype d and with the same greedy token otherwise. It returns how far apart they are.
func (s *suite) matches(got, want []float32, d dtype.DType) (bool, float64) {
	if s.opts.Exact {
		return slices.Equal(got, want), RelDiff(got, want)
	}
	diff := RelDiff(got, want)
	return diff <= s.opts.Tolerance(d) && Argmax(got) == Argmax(want), diff
}

// equalExports fails unless caches a and b export the same bytes for all their positions.
func equalExports(t *testing.T, m backend.Model, a, b backend.Cache) {
	t.Helper()
	k1, v1 := ExportAll(t, m, a, 0, a.Len())
	k2, v2 := ExportAll(t, m, b, 0, b.Len())
	for layer := range k1 {
		if !bytes.Equal(k1[layer], k2[layer]) || !bytes.Equal(v1[layer], v2[layer]) {
			t.Fatalf("layer %d exports differ", layer)
		}
	}
}

// kvTransfer is the disaggregation guarantee: KV exported from one cache and imported into a fresh one (layers
// arriving in several chunks, out of layer order) continues with bit-identical logits and greedy tokens to the
// cache it came from, and both then export the same bytes. An exact backend must also match a one-shot
// prefill of the whole prompt.
func (s *suite) kvTransfer(t *testing.T, v Variant) {
	m := s.load(t, v.Options, backend.Options{})
	p := Prompt(21, m.VocabSize(), 2)
	n := len(p) - 1
	prefill := NewCache(t, m)
	Forward(t, m, prefill, p[:n]...)
	keys, values := ExportAll(t, m, prefill, 0, n)
	decode := NewCache(t, m)
	ImportAll(t, m, decode, keys, values)
	localLogits := Forward(t, m, prefill, p[n])
	localTokens, _ := Greedy(t, m, prefill, localLogits, 16)
	remoteLogits := Forward(t, m, decode, p[n])
	if !slices.Equal(remoteLogits, localLogits) {
		t.Fatal("logits after importing KV differ from the cache it was exported from")
	}
	if got, _ := Greedy(t, m, decode, remoteLogits, 16); !slices.Equal(got, localTokens) {
		t.Fatalf("greedy tokens after import %v, local %v", got, localTokens)
	}
	equalExports(t, m, prefill, decode)
	if !s.opts.Exact {
		return
	}
	oneShot := NewCache(t, m)
	oneShotLogits := Forward(t, m, oneShot, p...)
	if !slices.Equal(remoteLogits, oneShotLogits) {
		t.Fatal("logits after importing KV differ from a one-shot local prefill")
	}
	if got, _ := Greedy(t, m, oneShot, oneShotLogits, 16); !slices.Equal(got, localTokens) {
		t.Fatalf("greedy tokens after a one-shot prefill %v, after import %v", got, localTokens)
	}
	equalExports(t, m, oneShot, decode)
}

// cloneTruncateRelease: a clone of a prefix continues like the original, which cloning leaves unchanged;
// truncating and refeeding reproduces the same logits; Release frees the memory and later use fails with
// backend.ErrReleased. Each path ends with the same steps (6 tokens, then 10), so logits compare bit for bit
// on any backend; an exact one is also checked along other splits.
func (s *suite) cloneTruncateRelease(t *testing.T) {
	m := s.load(t, Tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 }), backend.Options{})
	p := Prompt(16, m.VocabSize(), 4)
	ref := NewCache(t, m)
	Forward(t, m, ref, p[:6]...)
	want := Forward(t, m, ref, p[6:]...)
	if s.opts.Exact {
		if got := Forward(t, m, NewCache(t, m), p...); !slices.Equal(got, want) {
			t.Fatal("a one-shot prefill differs from one in two steps")
		}
	}

	prefix := NewCache(t, m)
	Forward(t, m, prefix, p[:6]...)
	Forward(t, m, prefix, p[6:10]...)
	clone, err := prefix.Clone(6)
	if err != nil {
		t.Fatal(err)
	}
	defer clone.Release()
	if clone.Len() != 6 || prefix.Len() != 10 {
		t.Fatalf("clone holds %d, original %d", clone.Len(), prefix.Len())
	}
	if got := Forward(t, m, clone, p[6:]...); !slices.Equal(got, want) {
		t.Error("clone continued differently from the original prefix")
	}
	if s.opts.Exact {
		if got := Forward(t, m, prefix, p[10:]...); !slices.Equal(got, want) {
			t.Error("original changed by cloning")
		}
		prefix.Truncate(9)
		if prefix.Len() != 9 {
			t.Fatalf("truncated cache holds %d", prefix.Len())
		}
		if got := Forward(t, m, prefix, p[9:]...); !slices.Equal(got, want) {
			t.Error("truncate + refeed differs")
		}
	}
	// The original is unchanged by cloning and by the clone's writes.
	prefix.Truncate(6)
	if got := Forward(t, m, prefix, p[6:]...); !slices.Equal(got, want) {
		t.Error("original changed by cloning")
	}
	// Truncating and refeeding reproduces the same logits.
	prefix.Truncate(6)
	if prefix.Len() != 6 {
		t.Fatalf("truncated cache holds %d", prefix.Len())
	}
	if got := Forward(t, m, prefix, p[6:]...); !slices.Equal(got, want) {
		t.Error("truncate + refeed differs")
	}
	prefix.Truncate(100) // no-op
	if prefix.Len() != 16 {
		t.Errorf("Truncate beyond the length changed it to %d", prefix.Len())
	}
	if _, err := prefix.Clone(17); err == nil {
		t.Error("cloned more positions than held")
	}
	empty, err := prefix.Clone(0)
	if err != nil || empty.Len() != 0 {
		t.Fatalf("Clone(0) = %v, %v", empty, err)
	}
	Forward(t, m, empty, p[:6]...)
	if got := Forward(t, m, empty, p[6:]...); !slices.Equal(got, want) {
		t.Error("an empty clone does not behave like a new cache")
	}
	empty.Release()
	if prefix.Bytes() <= 0 || clone.Bytes() <= 0 {
		t.Errorf("Bytes: %d, %d", prefix.Bytes(), clone.Bytes())
	}
	// Release frees memory and later use fails cleanly.
	clone.Release()
	clone.Release()
	if clone.Bytes() != 0 || clone.Len() != 0 {
		t.Error("released cache still holds memory")
	}
	err = m.Forward([]backend.Seq{{Cache: clone, Tokens: []int32{1}}})
	if !errors.Is(err, backend.ErrReleased) {
		t.Errorf("Forward on a released cache: %v", err)
	}
	if err := clone.ExportKV(0, 0, 0, nil, nil); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("ExportKV on a released cache: %v", err)
	}
	if _, err := clone.Clone(0); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("Clone of a released cache: %v", err)
	}
}

// importExportErrors: every bad argument of ExportKV and ImportKV is an error that says what is wrong, and a
// failed import changes nothing.
func (s *suite) importExportErrors(t *testing.T) {
	m := s.load(t, Tiny(func(o *modelgen.Options) { o.MaxPositionEmbeddings = 16 }), backend.Options{})
	c := NewCache(t, m)
	Forward(t, m, c, 1, 2, 3, 4)
	tb := m.KVLayout().LayerTokenBytes(0)
	buf := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"export bad layer", c.ExportKV(99, 0, 1, buf(tb), buf(tb)), "layer 99 out of range"},
		{"export negative layer", c.ExportKV(-1, 0, 1, buf(tb), buf(tb)), "layer -1 out of range"},
		{"export past end", c.ExportKV(0, 2, 5, buf(3*tb), buf(3*tb)), "positions [2, 5)"},
		{"export reversed", c.ExportKV(0, 3, 2, nil, nil), "positions [3, 2)"},
		{"export short buffer", c.ExportKV(0, 0, 2, buf(tb), buf(2*tb)), "buffers"},
		{"import bad layer", c.ImportKV(2, 4, buf(tb), buf(tb)), "layer 2 out of range"},
		{"import gap", c.ImportKV(1, 6, buf(tb), buf(tb)), "gap"},
		{"import ragged", c.ImportKV(1, 4, buf(tb+1), buf(tb+1)), "multiples"},
		{"import unequal", c.ImportKV(1, 4, buf(tb), buf(2*tb)), "multiples"},
		{"import past context", c.ImportKV(1, 4, buf(13*tb), buf(13*tb)), "context limit"},
		{"import negative", c.ImportKV(1, -1, buf(tb), buf(tb)), "gap"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
	if c.Len() != 4 {
		t.Errorf("failed imports changed the cache: Len %d", c.Len())
	}
	if err := c.ExportKV(0, 2, 2, nil, nil); err != nil {
		t.Errorf("empty export: %v", err)
	}
}

// forwardErrors: every bad batch is refused with an error that names the backend and the sequence, and a
// refused batch changes no cache.
func (s *suite) forwardErrors(t *testing.T) {
	mod := Generate(t, Tiny(func(o *modelgen.Options) { o.MaxPositionEmbeddings = 32 }))
	m := Load(t, s.b, mod, backend.Options{})
	other := Load(t, s.b, mod, backend.Options{})
	good := func() backend.Cache { return NewCache(t, m) }
	shared := good()
	uneven := good()
	Forward(t, m, uneven, 1, 2, 3)
	tb := m.KVLayout().LayerTokenBytes(0)
	if err := uneven.ImportKV(0, 3, make([]byte, tb), make([]byte, tb)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		batch []backend.Seq
		seq   int // the sequence the error must name
		want  string
	}{
		{"no tokens", []backend.Seq{{Cache: good()}}, 0, "no tokens"},
		{"token too large", []backend.Seq{{Cache: good(), Tokens: []int32{int32(m.VocabSize())}}}, 0, "out of range"},
		{"negative token", []backend.Seq{{Cache: good(), Tokens: []int32{-1}}}, 0, "out of range"},
		{"short logits", []backend.Seq{{Cache: good(), Tokens: []int32{1}, Logits: make([]float32, 3)}}, 0, "logits buffer"},
		{"context full", []backend.Seq{{Cache: good(), Tokens: make([]int32, 33)}}, 0, "context limit"},
		{"foreign cache", []backend.Seq{{Cache: NewCache(t, other), Tokens: []int32{1}}}, 0, "does not belong"},
		{"nil cache", []backend.Seq{{Tokens: []int32{1}}}, 0, "does not belong"},
		{"same cache twice", []backend.Seq{{Cache: shared, Tokens: []int32{1}}, {Cache: shared, Tokens: []int32{2}}}, 1, "twice"},
		{"uneven layers", []backend.Seq{{Cache: uneven, Tokens: []int32{1}}}, 0, "different numbers of positions"},
		{"second of two", []backend.Seq{{Cache: good(), Tokens: []int32{1}}, {Cache: good(), Tokens: []int32{-1}}}, 1, "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Forward(tc.batch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Forward error %v, want one containing %q", err, tc.want)
			}
			if msg, prefix := err.Error(), s.b.Name()+": "; !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, fmt.Sprintf("sequence %d", tc.seq)) {
				t.Errorf("Forward error %q does not start with %q and name sequence %d", msg, prefix, tc.seq)
			}
			for _, sq := range tc.batch {
				if sq.Cache != nil && sq.Cache != uneven && sq.Cache.Len() != 0 {
					t.Errorf("a refused Forward changed a cache: Len %d", sq.Cache.Len())
				}
			}
		})
	}
	if shared.Len() != 0 {
		t.Error("a failed Forward changed a cache")
	}
	if uneven.Len() != 3 {
		t.Errorf("a failed Forward changed an unevenly imported cache: Len %d", uneven.Len())
	}
}

// batched: sequences decoded together in one Forward get the logits they get alone (bit for bit on an exact
// backend), including a batch that mixes a prefill with decode steps.
func (s *suite) batched(t *testing.T, v Variant) {
	m := s.load(t, v.Options, backend.Options{PrefillChunk: 8})
	prompts := [][]int32{Prompt(5, m.VocabSize(), 10), Prompt(9, m.VocabSize(), 11), Prompt(2, m.VocabSize(), 12)}
	var alone [][]float32
	for _, p := range prompts {
		c := NewCache(t, m)
		Forward(t, m, c, p[:len(p)-1]...)
		alone = append(alone, Forward(t, m, c, p[len(p)-1]))
	}
	// Together: the first two already prefilled, the third prefilled inside the batch.
	var batch []backend.Seq
	for i, p := range prompts {
		c := NewCache(t, m)
		toks := p[len(p)-1:]
		if i < 2 {
			Forward(t, m, c, p[:len(p)-1]...)
		} else {
			toks = p
		}
		batch = append(batch, backend.Seq{Cache: c, Tokens: toks, Logits: make([]float32, m.VocabSize())})
	}
	if err := m.Forward(batch); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if ok, d := s.matches(batch[i].Logits, alone[i], m.KVLayout().DType); !ok {
			t.Errorf("sequence %d: batched logits differ from unbatched by %.2e", i, d)
		}
		if batch[i].Cache.Len() != len(prompts[i]) {
			t.Errorf("sequence %d: cache holds %d positions after the batch, want %d", i, batch[i].Cache.Len(), len(prompts[i]))
		}
	}
}

// chunked: a prefill split into chunks of 3 tokens gives the logits of one 64-token step (bit for bit on an
// exact backend), and greedy decoding continues identically.
func (s *suite) chunked(t *testing.T, v Variant) {
	mod := Generate(t, v.Options)
	chunked, oneShot := Load(t, s.b, mod, backend.Options{PrefillChunk: 3}), Load(t, s.b, mod, backend.Options{PrefillChunk: 64})
	p := Prompt(40, chunked.VocabSize(), 5)
	c1, c2 := NewCache(t, chunked), NewCache(t, oneShot)
	l1, l2 := Forward(t, chunked, c1, p...), Forward(t, oneShot, c2, p...)
	if ok, d := s.matches(l1, l2, mod.DType); !ok {
		t.Fatalf("chunked prefill logits differ from one-shot by %.2e", d)
	}
	g1, _ := Greedy(t, chunked, c1, l1, 24)
	g2, _ := Greedy(t, oneShot, c2, l2, 24)
	if !slices.Equal(g1, g2) {
		t.Fatalf("greedy continuations differ: %v vs %v", g1, g2)
	}
}

// concurrentForward runs Forward from several goroutines, each with its own cache: the calls serialise and
// every sequence gets the logits it gets alone. An exact backend must also match a one-shot prefill.
func (s *suite) concurrentForward(t *testing.T) {
	m := s.load(t, Tiny(nil), backend.Options{})
	p := Prompt(12, m.VocabSize(), 8)
	want := NewCache(t, m)
	var wantLogits []float32
	for _, tok := range p {
		wantLogits = Forward(t, m, want, tok)
	}
	if s.opts.Exact {
		if got := Forward(t, m, NewCache(t, m), p...); !slices.Equal(got, wantLogits) {
			t.Fatal("a one-shot prefill differs from token-by-token decoding")
		}
	}
	const goroutines = 6
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		go func() {
			c, err := m.NewCache()
			if err != nil {
				errs <- err
				return
			}
			defer c.Release()
			logits := make([]float32, m.VocabSize())
			for _, tok := range p {
				if err := m.Forward([]backend.Seq{{Cache: c, Tokens: []int32{tok}, Logits: logits}}); err != nil {
					errs <- err
					return
				}
			}
			if !slices.Equal(logits, wantLogits) {
				errs <- errors.New("concurrent sequence got different logits")
				return
			}
			errs <- nil
		}()
	}
	for g := 0; g < goroutines; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// closedModel: Close is idempotent, and a closed model refuses Forward and NewCache.
func (s *suite) closedModel(t *testing.T) {
	m, err := s.b.Load(Generate(t, Tiny(nil)), backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: []int32{1}}}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Forward after Close: %v", err)
	}
	if _, err := m.NewCache(); err == nil {
		t.Error("NewCache after Close succeeded")
	}
	c.Release()
}

// slidingWindows: with sliding-window layers, the layout says which layers slide; a chunked prefill matches a
// one-shot one; KV made of the full layers' positions and only the windows of the sliding ones (imported after a
// gap, as the KV wire's receiver does) continues bit for bit like the cache it came from; positions a window
// evicted are not exported (ErrNotHeld), not cloned (ErrWindowGone), and a cache that lacks them is refused by
// Forward (ErrWindowGap) without change.
func (s *suite) slidingWindows(t *testing.T) {
	if !s.opts.Windows {
		t.Skip("the backend does not implement sliding windows (Options.Windows)")
	}
	windows := []int{8, 0, 5, 0}
	mod := GenerateWindowed(t, Tiny(func(o *modelgen.Options) { o.NumLayers, o.DType = 4, dtype.BFloat16 }), windows...)
	m := Load(t, s.b, mod, backend.Options{PrefillChunk: 64})
	l := m.KVLayout()
	for i, ly := range l.Layers {
		want := backend.LayerKV{Kind: backend.KVFull, KVHeads: mod.Config.NumKVHeads, HeadDim: mod.Config.HeadDim}
		if windows[i] > 0 {
			want.Kind, want.Window = backend.KVSliding, windows[i]
		}
		if !ly.Equal(want) {
			t.Fatalf("layer %d: layout %+v, want %+v", i, ly, want)
		}
	}
	p := Prompt(65, m.VocabSize(), 17)
	const n = 64
	src := NewCache(t, m)
	oneShot := Forward(t, m, src, p[:n]...)
	chunked := Load(t, s.b, mod, backend.Options{PrefillChunk: 3})
	if ok, d := s.matches(Forward(t, chunked, NewCache(t, chunked), p[:n]...), oneShot, mod.DType); !ok {
		t.Errorf("chunked prefill logits differ from one-shot by %.2e", d)
	}
	dst := NewCache(t, m)
	for layer, ly := range l.Layers {
		from := 0
		if ly.Kind == backend.KVSliding {
			from = n - ly.Window
			tb := l.LayerTokenBytes(layer)
			if err := src.ExportKV(layer, from-1, n, make([]byte, (n-from+1)*tb), make([]byte, (n-from+1)*tb)); !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("layer %d: export of an evicted position: %v, want ErrNotHeld", layer, err)
			}
		}
		k, v := exportLayer(t, m, src, layer, from, n)
		if err := dst.ImportKV(layer, from, k, v); err != nil {
			t.Fatalf("layer %d: import at %d: %v", layer, from, err)
		}
	}
	if dst.Len() != n || !dst.Restorable(n) {
		t.Fatalf("after the import: Len %d, Restorable %v", dst.Len(), dst.Restorable(n))
	}
	local := Forward(t, m, src, p[n])
	if remote := Forward(t, m, dst, p[n]); !slices.Equal(remote, local) {
		t.Errorf("logits after importing the windows differ from the cache they came from by %.2e", RelDiff(remote, local))
	}
	// src holds 65 positions: layer 0 (W=8) [57, 65), so a query at 63 would need 56.
	if src.Restorable(63) {
		t.Error("Restorable(63) with position 56 evicted")
	}
	if _, err := src.Clone(63); !errors.Is(err, backend.ErrWindowGone) {
		t.Errorf("Clone(63): %v, want ErrWindowGone", err)
	}
	src.Truncate(63)
	if err := m.Forward([]backend.Seq{{Cache: src, Tokens: p[63:64]}}); !errors.Is(err, backend.ErrWindowGap) {
		t.Errorf("Forward after Truncate(63): %v, want ErrWindowGap", err)
	}
	if src.Len() != 63 {
		t.Errorf("a refused Forward changed the cache: Len %d", src.Len())
	}
}

func exportLayer(t *testing.T, m backend.Model, c backend.Cache, layer, from, to int) (k, v []byte) {
	t.Helper()
	tb := m.KVLayout().LayerTokenBytes(layer)
	k, v = make([]byte, (to-from)*tb), make([]byte, (to-from)*tb)
	if err := c.ExportKV(layer, from, to, k, v); err != nil {
		t.Fatalf("layer %d: export [%d, %d): %v", layer, from, to, err)
	}
	return k, v
}

// noLinearLayers: a cache of a model without linear layers keeps today's contract under the linear-layer
// additions: Cuts is nil (every position is a cut), ExportState and ImportState refuse every layer with
// ErrLayerKind and change nothing, and Seq.Snapshot changes neither the logits, nor the bytes held, nor where
// the cache can be cut.
func (s *suite) noLinearLayers(t *testing.T) {
	m := s.load(t, Tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 }), backend.Options{})
	if l := m.KVLayout(); l.HasLinear() || l.StateBytes() != 0 {
		t.Fatalf("a dense model's layout has linear layers: %+v", l)
	}
	p := Prompt(12, m.VocabSize(), 9)
	plain, snap := NewCache(t, m), NewCache(t, m)
	Forward(t, m, plain, p[:7]...)
	want := Forward(t, m, plain, p[7:]...)
	got := make([]float32, m.VocabSize())
	if err := m.Forward([]backend.Seq{{Cache: snap, Tokens: p[:7], Snapshot: true}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Forward([]backend.Seq{{Cache: snap, Tokens: p[7:], Logits: got, Snapshot: true}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || snap.Len() != plain.Len() || snap.Bytes() != plain.Bytes() {
		t.Errorf("Seq.Snapshot changed a cache without linear layers (logits equal: %v, Len %d vs %d, Bytes %d vs %d)",
			slices.Equal(got, want), snap.Len(), plain.Len(), snap.Bytes(), plain.Bytes())
	}
	if snap.Cuts() != nil || plain.Cuts() != nil || NewCache(t, m).Cuts() != nil {
		t.Errorf("Cuts of a cache without linear layers: %v, want nil", snap.Cuts())
	}
	for n := 0; n <= snap.Len(); n++ {
		c, err := snap.Clone(n)
		if err != nil {
			t.Fatalf("Clone(%d): %v", n, err)
		}
		if c.Cuts() != nil {
			t.Errorf("Clone(%d).Cuts() = %v", n, c.Cuts())
		}
		c.Release()
	}
	for layer := 0; layer < m.KVLayout().NumLayers(); layer++ {
		bufs := [][]byte{make([]byte, 16), make([]byte, 16)}
		if err := snap.ExportState(layer, bufs); !errors.Is(err, backend.ErrLayerKind) {
			t.Errorf("ExportState of attention layer %d: %v, want ErrLayerKind", layer, err)
		}
		if err := snap.ImportState(layer, snap.Len()+1, bufs); !errors.Is(err, backend.ErrLayerKind) {
			t.Errorf("ImportState into attention layer %d: %v, want ErrLayerKind", layer, err)
		}
	}
	if err := snap.ExportState(-1, nil); err == nil || errors.Is(err, backend.ErrLayerKind) {
		t.Errorf("ExportState of layer -1: %v", err)
	}
	equalExports(t, m, snap, plain)
}
