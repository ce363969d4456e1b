package node

import (
	"context"
	"time"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// calibrate runs one short generation on a freshly loaded instance, so that its speeds are known
// before the first real request: CalibrateTokens prompt tokens (spread over the vocabulary, so that no prefix
// cache holds them) and 8 out, counted as load like any request. A failure only means no seed.
func (r *Registry) calibrate(e engine.Engine, in *Instance) {
	vocab := in.Desc.VocabSize
	if vocab < 16 {
		return
	}
	n := r.calibrateTokens
	if in.Desc.ContextLength > 0 {
		n = min(n, in.Desc.ContextLength/2)
	}
	toks := make([]int32, n)
	seed := int(time.Now().UnixNano() % int64(vocab))
	for i := range toks {
		toks[i] = int32(3 + (seed+i*7919)%(vocab-3))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.Begin(in)
	defer r.End(in)
	start := time.Now()
	var final *engine.Final
	err := e.Generate(ctx, engine.GenerateRequest{
		RequestID: "calibrate-" + in.Desc.InstanceID, InstanceID: in.Desc.InstanceID, PromptTokens: toks,
		Sampling: engine.Sampling{MaxTokens: 8, IgnoreEOS: true},
	}, func(ev engine.Event) error {
		if ev.Final != nil && final == nil {
			final = ev.Final
		}
		return nil
	})
	if err != nil || final == nil || final.FinishReason == engine.FinishError {
		r.log.Warn("calibration failed; speeds are learned from requests only", "instance", in.Desc.InstanceID, "error", err)
		return
	}
	r.agent.Speeds().Observe(cluster.Sample{Instance: in.Desc.InstanceID, KV: in.Desc.KV, Usage: final.Usage, Timings: final.Timings})
	sp, _ := r.agent.Speeds().Speed(in.Desc.InstanceID)
	r.log.Info("calibrated", "instance", in.Desc.InstanceID, "prompt_tokens", n, "took", time.Since(start).Round(time.Millisecond),
		"prefill_tok_s", round1(sp.PrefillTPS[router.PrefillBand(n)]), "decode_tok_s", round1(sp.DecodeTPS))
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
