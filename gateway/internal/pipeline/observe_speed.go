package pipeline

import (
	"github.com/duet-ai/duet/gateway/internal/cluster"
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

// speedObserver feeds the speed book: a decision's estimate when the request runs here, the first final's
// timings as a speed sample and the estimate's error, and forgets the estimate when the request is over.
type speedObserver struct {
	nopObserver
	cluster clusterState
	node    string
}

// decided remembers the decision's estimate (when the router made one) for the request.
func (o speedObserver) decided(r *request) {
	total, ok := r.decision.Scores[scoreEstimateTotal]
	if !ok || r.local == nil {
		return
	}
	kind := cluster.PlacementLocal
	if len(r.decision.PrefillEndpoints) > 0 {
		kind = cluster.PlacementRemote
	}
	o.cluster.Speeds().Expect(r.id, kind, r.decision.Scores[scoreEstimateFirstToken], total)
}

// final feeds the request's first final event that is not an error to the book.
func (o speedObserver) final(r *request, _ int, f *engine.Final) {
	if r.observed.learned || f.FinishReason == engine.FinishError || r.local == nil {
		return
	}
	r.observed.learned = true
	in := r.local
	sm := cluster.Sample{Instance: in.Desc.InstanceID, KV: in.Desc.KV, Usage: f.Usage, Timings: f.Timings}
	if rt := f.Timings.Remote; rt != nil && rt.InstanceID != "" {
		snap := o.cluster.Snapshot()
		if p, ok := snap.Instance(rt.InstanceID); ok {
			sm.PrefillNode = string(p.Node)
			if path, ok := snap.Path(p.Node, cluster.NodeID(o.node)); ok && path.RTTKnown {
				sm.RTT = path.RTT
			}
		}
	}
	speeds := o.cluster.Speeds()
	speeds.Observe(sm)
	speeds.Resolve(r.id, f.Timings)
}

// finished forgets the request's estimate, whatever happened.
func (o speedObserver) finished(r *request) {
	if r.local != nil {
		o.cluster.Speeds().ForgetRequest(r.id)
	}
}
