package cpu

import (
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// TestBlocksMatchReference checks every block against the float64 reference on models with changed specs: on
// every kernel path, a prompt prefilled in chunks of 5 and then 48 greedy tokens (72 positions: a window of 8
// is crossed 8 times) must give the reference's greedy token at every step, with logits within the reference
// test's tolerance.
func TestBlocksMatchReference(t *testing.T) {
	t.Parallel()
	for _, v := range backendtest.BlockVariants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.BlockModel(t, v)
			ref := backendtest.NewReference(t, m)
			prompt := backendtest.Prompt(24, m.Config.VocabSize, 7)
			for _, k := range kernelPaths() {
				bm, err := loadOn(m, backend.Options{PrefillChunk: 5}, k)
				if err != nil {
					t.Fatal(err)
				}
				c := backendtest.NewCache(t, bm)
				toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), 48)
				bm.Close()
				want := ref.Logits(append(slices.Clone(prompt), toks...))
				worst := 0.0
				for i, got := range logits[:len(toks)] {
					w := want[len(prompt)-1+i]
					worst = max(worst, maxAbsDiff(got, w)/max(1, maxAbs(w)))
					if r := backendtest.Argmax(w); r != toks[i] {
						t.Fatalf("%s: step %d: greedy token %d, reference %d", k, i, toks[i], r)
					}
				}
				t.Logf("%s: max relative |Δlogit| = %.2e", k, worst)
				if worst > tolerance(m.DType) {
					t.Errorf("%s: backend differs from the reference by %.3e > %.0e", k, worst, tolerance(m.DType))
				}
			}
		})
	}
}

// TestBlocksExact checks that the changed blocks keep the backend exact on every kernel path: chunked prefill
// (chunk sizes around the window of 8) equals one-shot, and two sequences decoded in one batch equal each one
// decoded alone, bit for bit, over 64 positions and more.
func TestBlocksExact(t *testing.T) {
	t.Parallel()
	for _, v := range backendtest.BlockVariants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.BlockModel(t, v)
			a, b := backendtest.Prompt(64, m.Config.VocabSize, 8), backendtest.Prompt(41, m.Config.VocabSize, 9)
			for _, k := range kernelPaths() {
				var want []float32
				for _, chunk := range []int{64, 1, 3, 7, 8, 9} {
					bm, err := loadOn(m, backend.Options{PrefillChunk: chunk}, k)
					if err != nil {
						t.Fatal(err)
					}
					got := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), a...)
					bm.Close()
					if want == nil {
						want = got
					} else if !slices.Equal(got, want) {
						t.Fatalf("%s: prefill in chunks of %d differs from one-shot", k, chunk)
					}
				}
				bm, err := loadOn(m, backend.Options{PrefillChunk: 16}, k)
				if err != nil {
					t.Fatal(err)
				}
				// Alone: each sequence prefilled and decoded for 24 tokens.
				var alone [2][][]float32
				var toks [2][]int32
				for i, p := range [][]int32{a, b} {
					c := backendtest.NewCache(t, bm)
					toks[i], alone[i] = backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, p...), 24)
				}
				// Batched: both prompts in one Forward, then both sequences' next tokens in one Forward per step.
				ca, cb := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
				la, lb := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
				if err := bm.Forward([]backend.Seq{{Cache: ca, Tokens: a, Logits: la}, {Cache: cb, Tokens: b, Logits: lb}}); err != nil {
					t.Fatal(err)
				}
				for step := 0; ; step++ {
					if !slices.Equal(la, alone[0][step]) || !slices.Equal(lb, alone[1][step]) {
						t.Fatalf("%s: step %d: batched logits differ from unbatched", k, step)
					}
					if step == len(toks[0]) {
						break
					}
					la, lb = make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
					if err := bm.Forward([]backend.Seq{
						{Cache: ca, Tokens: []int32{toks[0][step]}, Logits: la},
						{Cache: cb, Tokens: []int32{toks[1][step]}, Logits: lb},
					}); err != nil {
						t.Fatal(err)
					}
				}
				bm.Close()
			}
		})
	}
}

// TestLoadRefusesMoEWithoutExperts checks that a layer whose spec is a mixture of experts but whose weights
// are a dense MLP is refused at load with a clear error.
func TestLoadRefusesMoEWithoutExperts(t *testing.T) {
	t.Parallel()
	m := backendtest.Generate(t, backendtest.Tiny(nil))
	s := &m.Config.Arch.Layers[1]
	s.FFN.Kind, s.FFN.MoE = model.FFNMoE, &model.MoESpec{Experts: 4, TopK: 2, Intermediate: 32}
	_, err := Backend{}.Load(m, backend.Options{})
	if err == nil || err.Error() != "cpu: layer 1 has no expert weights" {
		t.Fatalf("Load: %v", err)
	}
}
