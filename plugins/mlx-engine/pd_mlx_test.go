//go:build mlx

package mlxengine_test

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// TestPDAcrossBackends prefills on one backend and decodes on the other, both ways: the decoding engine must
// produce the tokens it produces with a local prefill. (KV moves in the model's dtype; the two backends may
// round a bfloat16 element one unit apart, which greedy decoding of these models does not notice, but for the
// bfloat16 hybrid, whose linear layers carry such a difference forward: see sameUntilTie.) Run with -tags mlx
// against an installed mlx-c (see README.md).
func TestPDAcrossBackends(t *testing.T) {
	for _, name := range []string{"llama-bf16", "qwen3-q4", "qwen3_moe-q4", "qwen2_moe-bf16", "gemma3-q4", "gemma3_text-bf16", "gpt_oss-mxfp4", "qwen3_next-bf16", "qwen3_5_moe-q4"} {
		dir := pdModel(t, name)
		for _, dir2 := range []struct{ prefill, decode string }{{"mlx", "cpu"}, {"cpu", "mlx"}} {
			t.Run(name+"/"+dir2.prefill+"-to-"+dir2.decode, func(t *testing.T) {
				ref := startEngine(t, dir, map[string]string{"backend": dir2.decode, "prefix_cache_mb": "0"})
				p := startEngine(t, dir, prefillOpts("backend", dir2.prefill))
				d := startEngine(t, dir, decodeOpts("backend", dir2.decode, "prefix_cache_mb", "0"))
				if p.desc.Backend != dir2.prefill || d.desc.Backend != dir2.decode {
					t.Fatalf("backends %s and %s", p.desc.Backend, d.desc.Backend)
				}
				for i, n := range []int{64, 300, 900} {
					prompt := randomPrompt(uint64(700+i), n, d.desc.VocabSize)
					want, _ := gen(t, ref, prompt)
					got, f := gen(t, d, prompt, p.endpoint())
					if name == "qwen3_next-bf16" {
						sameUntilTie(t, name, dir, prompt, got, want)
					} else {
						sameTokens(t, name, got, want)
					}
					wantRemote(t, f, p.desc.PrefillEndpoint)
				}
			})
		}
	}
}

// hybridTie is how far apart, relative to the largest logit, two candidates of the float64 reference may be for
// a greedy choice between them to depend on which backend computed the KV of a 16-bit hybrid model: the
// tolerance of each backend against the reference (TestHybridMatchesReference, 5e-3).
//
// Why these models need it: a linear layer's conv window holds its pre-conv rows in the cache dtype, so a row
// element whose float32 value lies within the backends' rounding noise of a bfloat16 boundary rounds one ulp
// apart (4e-3 of it), and that difference enters the recurrent state of every later position instead of one
// key; after it the layers downstream differ by about 1e-3, and more elements round apart. Measured on
// qwen3_next-bf16 and the dense qwen3_5 at 300 positions: mlx and cpu states agree to 7e-7 in the first
// linear layer and to 1e-3 from the second on, each backend's logits 1e-4 to 6e-4 from the reference, as far
// from each other as mlx's one-shot prefill from its own token-by-token one. No order of the float32 sums
// avoids it, so across backends the tokens are the same until the first step where the reference itself has
// two candidates within the backends' tolerance.
const hybridTie = 5e-3

// sameUntilTie checks tokens decoded after a prefill on the other backend (got) against the decoding backend's
// own (want) for a 16-bit hybrid model: the same tokens, or the same up to a step where both choices are within
// hybridTie of the reference's best, after which the two continuations are different texts.
func sameUntilTie(t *testing.T, what, dir string, prompt, got, want []int32) {
	t.Helper()
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i == len(want) && len(got) == len(want) {
		return
	}
	if i == len(got) || i == len(want) {
		sameTokens(t, what, got, want)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w := backendtest.NewReference(t, m).Logits(append(slices.Clone(prompt), want[:i]...))[len(prompt)+i-1]
	best, scale := math.Inf(-1), 1.0
	for _, v := range w {
		best, scale = math.Max(best, v), math.Max(scale, math.Abs(v))
	}
	for _, tok := range []int32{got[i], want[i]} {
		if best-w[tok] > hybridTie*scale {
			t.Fatalf("%s: token %d is %d, want %d: the reference puts %d %.3g below its best (%.2e of the largest logit), not a tie\n got %v\nwant %v",
				what, i, got[i], want[i], tok, best-w[tok], (best-w[tok])/scale, got, want)
		}
	}
	t.Logf("%s: the same %d tokens, then %d and %d, which the reference puts %.2e and %.2e of the largest logit below its best",
		what, i, got[i], want[i], (best-w[got[i]])/scale, (best-w[want[i]])/scale)
}
