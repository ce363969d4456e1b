package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// greedyCheck is what greedyMatchesReference runs: the backend's options besides the weights (chunk, threads),
// the prompt and greedy steps, the closest router call the reference may meet (a closer one could route
// differently within the float32 error: the test asks for another seed), and the logits' tolerance relative to
// the largest logit (at least 1).
type greedyCheck struct {
	opts      backend.Options
	prompt    []int32
	steps     int
	minRouter float64
	tol       float64
}

// greedyMatchesReference runs m on every kernel path, with matrices expanded and kept as stored: the prompt,
// then the greedy steps, must choose at every step the token the float64 reference chooses after the same
// sequence, with logits within the tolerance; stored weights give the expanded ones' bits; every path decodes
// the same tokens.
func greedyMatchesReference(t *testing.T, m *model.Model, gc greedyCheck) {
	t.Helper()
	var first []int32
	var want [][]float64
	for _, k := range kernelPaths() {
		var expanded [][]float32
		for _, w := range []backend.Weights{backend.WeightsFloat32, backend.WeightsStored} {
			opts := gc.opts
			opts.Weights = w
			bm, err := loadOn(m, opts, k)
			if err != nil {
				t.Fatal(err)
			}
			c := backendtest.NewCache(t, bm)
			toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, gc.prompt...), gc.steps)
			c.Release()
			bm.Close()
			what := pathNames[k] + " " + string(w)
			if first == nil {
				first = toks
				ref := backendtest.NewReference(t, m)
				want = ref.Logits(append(slices.Clone(gc.prompt), toks...))
				if gap := ref.MinRouterGap(); gap < gc.minRouter {
					t.Fatalf("a router's k-th and (k+1)-th logits are %.1e apart: pick another seed", gap)
				}
			}
			if !slices.Equal(toks, first) {
				t.Fatalf("%s: tokens %v, the first path's %v", what, toks, first)
			}
			worst := 0.0
			for j, g := range logits {
				r := want[len(gc.prompt)-1+j]
				if backendtest.Argmax(g) != backendtest.Argmax(r) {
					t.Fatalf("%s: step %d: greedy token %d, the reference's %d", what, j, backendtest.Argmax(g), backendtest.Argmax(r))
				}
				worst = max(worst, maxAbsDiff(g, r)/max(1, maxAbs(r)))
			}
			t.Logf("%s: relative difference from the reference %.2e", what, worst)
			if worst > gc.tol {
				t.Errorf("%s: differs from the reference by %.3e > %.0e", what, worst, gc.tol)
			}
			if w == backend.WeightsFloat32 {
				expanded = logits
				continue
			}
			for j := range logits {
				for i := range logits[j] {
					if math.Float32bits(logits[j][i]) != math.Float32bits(expanded[j][i]) {
						t.Fatalf("%s: step %d logit %d: stored %v, expanded %v", pathNames[k], j, i, logits[j][i], expanded[j][i])
					}
				}
			}
		}
	}
}
