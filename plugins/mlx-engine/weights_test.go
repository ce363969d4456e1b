package mlxengine_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestStoredWeights: weights=stored keeps the embedded model's bfloat16 matrices as stored, says so in the
// stats, and generates exactly what the float32 copy does (streams in a batch, so both kernels run).
func TestStoredWeights(t *testing.T) {
	ctx := context.Background()
	var outs [2][][]int32
	for i, w := range []string{"f32", "stored"} {
		e := mlxengine.New(nil)
		defer e.Close()
		d, err := e.Load(ctx, engine.LoadRequest{Model: mlxengine.EmbeddedModel, Options: map[string]string{"backend": "cpu", "weights": w}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Instances[0].Metrics["cpu_weights_stored"]; got != float64(i) {
			t.Errorf("weights=%s: cpu_weights_stored = %v", w, got)
		}
		outs[i] = make([][]int32, 3)
		var wg sync.WaitGroup
		for j := range outs[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i][j] = run(ctx, t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(uint64(j), 30+20*j, d.VocabSize),
					Sampling: engine.Sampling{MaxTokens: 40, IgnoreEOS: true}}).tokens
			}()
		}
		wg.Wait()
	}
	for j := range outs[0] {
		if !slices.Equal(outs[0][j], outs[1][j]) || len(outs[0][j]) != 40 {
			t.Errorf("stream %d: f32 %v, stored %v", j, outs[0][j], outs[1][j])
		}
	}
}
