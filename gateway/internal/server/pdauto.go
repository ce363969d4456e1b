package server

import (
	"context"
	"sync"
	"time"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/serfcluster"
)

// What the gateway does for routers that decide by estimated time (router-disagg's PD auto): it learns each
// local instance's speed from the timings of the requests it runs (cluster.Speeds, published through the
// cluster), seeds it with a calibration run when a model loads, and compares each decision's estimate with
// what happened.

// Keys of Decision.Scores that carry an estimate, in seconds (router-disagg's ScoreEstimate*).
const (
	scoreEstimateFirstToken = "estimate-first-token-s"
	scoreEstimateTotal      = "estimate-total-s"
)

// expectEstimate remembers a decision's estimate (when the router made one) for its request, when it runs here.
func (s *Server) expectEstimate(requestID string, d *decision) {
	total, ok := d.Scores[scoreEstimateTotal]
	if !ok || d.local == nil || s.snaps.agent == nil {
		return
	}
	kind := cluster.PlacementLocal
	if len(d.PrefillEndpoints) > 0 {
		kind = cluster.PlacementRemote
	}
	s.snaps.agent.Speeds().Expect(requestID, kind, d.Scores[scoreEstimateFirstToken], total)
}

// observeSpeed wraps a generation's event callback: its first final event feeds the instance's measured
// speed and the estimate's error. done forgets the request's estimate, whatever happened.
func (s *Server) observeSpeed(in *Instance, req engine.GenerateRequest, emit func(engine.Event) error) (func(engine.Event) error, func()) {
	agent := s.snaps.agent
	if agent == nil {
		return emit, func() {}
	}
	speeds := agent.Speeds()
	var once sync.Once
	wrapped := func(ev engine.Event) error {
		if ev.Final != nil && ev.Final.FinishReason != engine.FinishError {
			once.Do(func() { s.learn(speeds, in, req.RequestID, ev.Final) })
		}
		return emit(ev)
	}
	return wrapped, func() { speeds.ForgetRequest(req.RequestID) }
}

// learn feeds one final event to the book.
func (s *Server) learn(speeds *cluster.Speeds, in *Instance, requestID string, f *engine.Final) {
	sm := cluster.Sample{Instance: in.Desc.InstanceID, KV: in.Desc.KV, Usage: f.Usage, Timings: f.Timings}
	if r := f.Timings.Remote; r != nil && r.InstanceID != "" {
		snap := s.snaps.agent.Snapshot()
		if p, ok := snap.Instance(r.InstanceID); ok {
			sm.PrefillNode = string(p.Node)
			if path, ok := snap.Path(p.Node, serfcluster.NodeID(s.reg.Node())); ok && path.RTTKnown {
				sm.RTT = path.RTT
			}
		}
	}
	speeds.Observe(sm)
	speeds.Resolve(requestID, f.Timings)
}

// calibrateInstance runs one short generation on a freshly loaded instance, so that its speeds are known
// before the first real request: CalibrateTokens prompt tokens (spread over the vocabulary, so that no prefix
// cache holds them) and 8 out, counted as load like any request. A failure only means no seed.
func (r *Registry) calibrateInstance(e engine.Engine, in *Instance) {
	vocab := in.Desc.VocabSize
	if vocab < 16 {
		return
	}
	n := r.calibrate
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
	r.begin(in)
	defer r.end(in)
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
