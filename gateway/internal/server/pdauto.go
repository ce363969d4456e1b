package server

import (
	"sync"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/sdk/engine"
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
	if !ok || d.local == nil || s.agent == nil {
		return
	}
	kind := cluster.PlacementLocal
	if len(d.PrefillEndpoints) > 0 {
		kind = cluster.PlacementRemote
	}
	s.agent.Speeds().Expect(requestID, kind, d.Scores[scoreEstimateFirstToken], total)
}

// observeSpeed wraps a generation's event callback: its first final event feeds the instance's measured
// speed and the estimate's error. done forgets the request's estimate, whatever happened.
func (s *Server) observeSpeed(in *node.Instance, req engine.GenerateRequest, emit func(engine.Event) error) (func(engine.Event) error, func()) {
	agent := s.agent
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
func (s *Server) learn(speeds *cluster.Speeds, in *node.Instance, requestID string, f *engine.Final) {
	sm := cluster.Sample{Instance: in.Desc.InstanceID, KV: in.Desc.KV, Usage: f.Usage, Timings: f.Timings}
	if r := f.Timings.Remote; r != nil && r.InstanceID != "" {
		snap := s.agent.Snapshot()
		if p, ok := snap.Instance(r.InstanceID); ok {
			sm.PrefillNode = string(p.Node)
			if path, ok := snap.Path(p.Node, cluster.NodeID(s.reg.Node())); ok && path.RTTKnown {
				sm.RTT = path.RTT
			}
		}
	}
	speeds.Observe(sm)
	speeds.Resolve(requestID, f.Timings)
}
