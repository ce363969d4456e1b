package backendtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// HybridVariants are the tiny hybrid models of modelgen.TinyFamily (Gated DeltaNet layers with two full
// attention layers with an output gate and partial RoPE) that LinearLayers runs on: qwen3_next in the Hugging
// Face layout in float32, and qwen3_5_moe in mlx-community's, bfloat16 with 4-bit weights.
func HybridVariants() []Variant {
	return []Variant{
		TinyVariant("qwen3_next/hf/f32", func(o *modelgen.Options) {
			o.Family, o.DType, o.Layout = model.Qwen3Next, dtype.Float32, modelgen.LayoutHF
		}),
		TinyVariant("qwen3_5_moe/mlx/bf16/q4g32", func(o *modelgen.Options) {
			o.Family, o.DType, o.Layout = model.Qwen35MoE, dtype.BFloat16, modelgen.LayoutMLX
			o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		}),
	}
}

// hybridPrompt is long enough to cross the delta rule's 64-token chunks of a chunked implementation several
// times, at positions no split below lines up with.
const hybridPrompt = 300

// linearLayers runs the checks of a backend's linear layers on each of HybridVariants.
func (s *suite) linearLayers(t *testing.T) {
	if !s.opts.Linear {
		t.Skip("the backend does not implement linear layers and gated attention (Options.Linear)")
	}
	for _, v := range HybridVariants() {
		t.Run(v.Name, func(t *testing.T) {
			s.parallel(t)
			mod := Generate(t, v.Options)
			if !backend.LayoutOf(&mod.Config.Arch, mod.DType).HasLinear() {
				t.Fatal("the hybrid variant has no linear layers")
			}
			for _, c := range []struct {
				name string
				fn   func(t *testing.T, mod *model.Model)
			}{
				{"SplitsMatchOneShot", s.linearSplits},
				{"BatchedMatchesUnbatched", s.linearBatched},
				{"StateTransferContinues", s.linearTransfer},
				{"CloneAtCuts", s.linearClone},
			} {
				t.Run(c.name, func(t *testing.T) {
					s.parallel(t)
					c.fn(t, mod)
				})
			}
		})
	}
}

// dumpCache is everything c holds as the wire carries it: the keys and values of every attention layer's
// positions and the state arrays of every linear layer.
func dumpCache(t testing.TB, m backend.Model, c backend.Cache) []byte {
	t.Helper()
	var out []byte
	l := m.KVLayout()
	for i, ly := range l.Layers {
		if ly.Kind == backend.KVLinear {
			bufs := make([][]byte, len(ly.State))
			for j, a := range ly.State {
				bufs[j] = make([]byte, a.Bytes())
			}
			if err := c.ExportState(i, bufs); err != nil {
				t.Fatal(err)
			}
			for _, b := range bufs {
				out = append(out, b...)
			}
			continue
		}
		n := c.Len()
		k, v := make([]byte, n*l.LayerTokenBytes(i)), make([]byte, n*l.LayerTokenBytes(i))
		if err := c.ExportKV(i, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, k...), v...)
	}
	return out
}

// linearSplits: a 300-token prompt fed in one call with prefill chunks of 1, 3, 64 and 300 tokens, in calls of
// irregular sizes, and token by token, on 1, 2 and 5 threads, gives the same last logits and leaves the same
// cache (bit for bit on an exact backend), and greedy decoding continues identically.
func (s *suite) linearSplits(t *testing.T, mod *model.Model) {
	p := Prompt(hybridPrompt, mod.Config.VocabSize, 31)
	type run struct {
		name  string
		opts  backend.Options
		calls []int // call sizes; nil: one call
	}
	runs := []run{
		{"chunk300", backend.Options{PrefillChunk: 300}, nil},
		{"chunk1", backend.Options{PrefillChunk: 1}, nil},
		{"chunk3", backend.Options{PrefillChunk: 3}, nil},
		{"chunk64", backend.Options{PrefillChunk: 64}, nil},
		{"calls", backend.Options{PrefillChunk: 64}, []int{1, 2, 61, 64, 5, 100, 67}},
		{"token by token", backend.Options{PrefillChunk: 64}, slices.Repeat([]int{1}, hybridPrompt)},
		{"1 thread", backend.Options{PrefillChunk: 64, Threads: 1}, nil},
		{"2 threads", backend.Options{PrefillChunk: 64, Threads: 2}, nil},
		{"5 threads", backend.Options{PrefillChunk: 64, Threads: 5}, nil},
	}
	var wantLogits []float32
	var wantDump []byte
	var wantToks []int32
	for _, r := range runs {
		m := Load(t, s.b, mod, r.opts)
		c := NewCache(t, m)
		var logits []float32
		if r.calls == nil {
			logits = Forward(t, m, c, p...)
		} else {
			at := 0
			for _, n := range r.calls {
				logits = Forward(t, m, c, p[at:at+n]...)
				at += n
			}
			if at != len(p) {
				t.Fatalf("%s: the calls cover %d tokens", r.name, at)
			}
		}
		dump := dumpCache(t, m, c)
		toks, _ := Greedy(t, m, c, logits, 8)
		if wantLogits == nil {
			wantLogits, wantDump, wantToks = logits, dump, toks
			continue
		}
		if ok, d := s.matches(logits, wantLogits, mod.DType); !ok {
			t.Errorf("%s: last logits differ from one call in one step by %.2e", r.name, d)
		}
		if s.opts.Exact && !slices.Equal(dump, wantDump) {
			t.Errorf("%s: the cache holds other bytes than after one call in one step", r.name)
		}
		if !slices.Equal(toks, wantToks) {
			t.Errorf("%s: greedy continuation %v, after one call in one step %v", r.name, toks, wantToks)
		}
	}
}

// linearBatched: sequences decoded together, one of them prefilled inside the batch, get the logits each gets
// alone, step after step: each has its own conv window and recurrent state.
func (s *suite) linearBatched(t *testing.T, mod *model.Model) {
	m := Load(t, s.b, mod, backend.Options{PrefillChunk: 16})
	prompts := [][]int32{Prompt(37, m.VocabSize(), 40), Prompt(5, m.VocabSize(), 41), Prompt(70, m.VocabSize(), 42)}
	const steps = 4
	// Alone: each prompt, then the same fixed continuation token by token.
	alone := make([][][]float32, len(prompts))
	for i, p := range prompts {
		c := NewCache(t, m)
		alone[i] = append(alone[i], Forward(t, m, c, p...))
		for j := range steps {
			alone[i] = append(alone[i], Forward(t, m, c, p[j]))
		}
	}
	caches := make([]backend.Cache, len(prompts))
	for i, p := range prompts {
		caches[i] = NewCache(t, m)
		if i < 2 {
			Forward(t, m, caches[i], p[:len(p)-1]...)
		}
	}
	for j := range steps + 1 {
		var batch []backend.Seq
		for i, p := range prompts {
			toks := []int32{p[len(p)-1]}
			switch {
			case j > 0:
				toks = []int32{p[j-1]}
			case i == 2:
				toks = p
			}
			batch = append(batch, backend.Seq{Cache: caches[i], Tokens: toks, Logits: make([]float32, m.VocabSize())})
		}
		if err := m.Forward(batch); err != nil {
			t.Fatal(err)
		}
		for i := range prompts {
			if ok, d := s.matches(batch[i].Logits, alone[i][j], mod.DType); !ok {
				t.Errorf("step %d, sequence %d: batched logits differ from unbatched by %.2e", j, i, d)
			}
		}
	}
}

// linearTransfer: a prefilled cache's attention keys and values and linear states, exported and imported into a
// fresh cache (layers in reverse order), continue greedily with the logits of the cache they came from, and
// both then hold the same bytes.
func (s *suite) linearTransfer(t *testing.T, mod *model.Model) {
	m := Load(t, s.b, mod, backend.Options{PrefillChunk: 64})
	p := Prompt(hybridPrompt, m.VocabSize(), 33)
	src := NewCache(t, m)
	logits := Forward(t, m, src, p...)
	l := m.KVLayout()
	dst := NewCache(t, m)
	n := src.Len()
	for i := l.NumLayers() - 1; i >= 0; i-- {
		ly := l.Layers[i]
		if ly.Kind == backend.KVLinear {
			bufs := make([][]byte, len(ly.State))
			for j, a := range ly.State {
				bufs[j] = make([]byte, a.Bytes())
			}
			if err := src.ExportState(i, bufs); err != nil {
				t.Fatal(err)
			}
			if err := dst.ImportState(i, n, bufs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		k, v := make([]byte, n*l.LayerTokenBytes(i)), make([]byte, n*l.LayerTokenBytes(i))
		if err := src.ExportKV(i, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
		if err := dst.ImportKV(i, 0, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if dst.Len() != n {
		t.Fatalf("the imported cache holds %d positions, want %d", dst.Len(), n)
	}
	want, wantLogits := Greedy(t, m, src, logits, 12)
	got, gotLogits := Greedy(t, m, dst, logits, 12)
	if !slices.Equal(got, want) {
		t.Fatalf("the imported cache continues %v, its source %v", got, want)
	}
	for j := range got {
		if ok, d := s.matches(gotLogits[j], wantLogits[j], mod.DType); !ok {
			t.Errorf("step %d: the imported cache's logits differ from its source's by %.2e", j, d)
		}
	}
	if s.opts.Exact && !slices.Equal(dumpCache(t, m, dst), dumpCache(t, m, src)) {
		t.Error("after the same steps the imported cache holds other bytes than its source")
	}
}

// linearClone: with Seq.Snapshot at 100 tokens, a cache can be cloned there (and at 0 and at its length), the
// clone continuing as a cache fed only those tokens does; Truncate goes back to the newest cut below its
// argument and continues from there; anywhere else Clone fails with ErrNoSnapshot.
func (s *suite) linearClone(t *testing.T, mod *model.Model) {
	m := Load(t, s.b, mod, backend.Options{PrefillChunk: 64})
	p := Prompt(160, m.VocabSize(), 34)
	c := NewCache(t, m)
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: p[:100], Snapshot: true}}); err != nil {
		t.Fatal(err)
	}
	Forward(t, m, c, p[100:]...)
	cuts := c.Cuts()
	for _, want := range []int{0, 100, 160} {
		if !slices.Contains(cuts, want) {
			t.Errorf("Cuts() = %v, want %d among them", cuts, want)
		}
	}
	for _, n := range []int{0, 100, 160} {
		cl, err := c.Clone(n)
		if err != nil {
			t.Fatalf("Clone(%d): %v", n, err)
		}
		fresh := NewCache(t, m)
		if n > 0 {
			Forward(t, m, fresh, p[:n]...)
		}
		next := []int32{7, 11, 13}
		got, want := Forward(t, m, cl, next...), Forward(t, m, fresh, next...)
		if ok, d := s.matches(got, want, mod.DType); !ok {
			t.Errorf("Clone(%d) continues with logits %.2e from a cache fed its %d tokens", n, d, n)
		}
		cl.Release()
	}
	// Truncate goes back to the newest cut at or below its argument, and the cache continues from there.
	tr, err := c.Clone(160)
	if err != nil {
		t.Fatal(err)
	}
	tr.Truncate(120)
	if tr.Len() != 100 {
		t.Errorf("Truncate(120) of a cache with cuts %v left %d positions, want 100", cuts, tr.Len())
	}
	again := NewCache(t, m)
	got, want := Forward(t, m, tr, p[tr.Len():]...), Forward(t, m, again, p...)
	if ok, d := s.matches(got, want, mod.DType); !ok {
		t.Errorf("after Truncate the cache continues with logits %.2e from a fresh one's", d)
	}
	tr.Release()
	for _, n := range []int{1, 57, 99, 101, 159} {
		cl, err := c.Clone(n)
		if !errors.Is(err, backend.ErrNoSnapshot) {
			if cl != nil {
				cl.Release()
			}
			t.Errorf("Clone(%d) of a cache with cuts %v: %v, want ErrNoSnapshot", n, cuts, err)
		}
	}
}
