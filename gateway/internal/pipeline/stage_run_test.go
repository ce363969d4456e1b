package pipeline

import (
	"testing"

	"github.com/duet-ai/duet/sdk/engine"
)

func TestFitMaxTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name             string
		ctx, bytesPerTok int
		promptBytes, max int
		want             int
	}{
		{"fits", 4096, 8, 800, 1000, 1000},
		{"the context less the least prompt is max_tokens", 4096, 8, 800, 3996, 0},
		{"Claude Code's 128000 on a small model", 4096, 8, 50000, 128000, 0},
		{"no bytes-per-token bound: against the context alone", 4096, 0, 50000, 4000, 4000},
		{"no bytes-per-token bound, over the context", 4096, 0, 50000, 4096, 0},
		{"no context known", 0, 8, 800, 128000, 128000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &request{promptBytes: c.promptBytes, generate: engine.GenerateRequest{Sampling: engine.Sampling{MaxTokens: c.max}}}
			fitMaxTokens(engine.Description{ContextLength: c.ctx, MaxBytesPerToken: c.bytesPerTok}, r)
			if got := r.generate.Sampling.MaxTokens; got != c.want {
				t.Errorf("max_tokens %d, want %d", got, c.want)
			}
		})
	}
}
