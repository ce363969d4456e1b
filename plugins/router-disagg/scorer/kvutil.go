package scorer

import (
	"math"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// KVUtilizationName is the scorer's name.
const KVUtilizationName sched.Name = "kv-utilization"

// KVUtilization scores decode instances by the KV-cache memory they have left, so that long generations go
// where they will not be preempted or evicted.
//
// Formula: score = 1 − clamp(KVUtilization, 0, 1). A NaN utilisation counts as full (score 0): a figure that
// cannot be read is no reason to prefer an instance.
//
// The figure comes from the snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot).
type KVUtilization struct{}

var _ sched.Scorer = (*KVUtilization)(nil)

// NewKVUtilization returns the KV-utilisation scorer.
func NewKVUtilization() *KVUtilization { return &KVUtilization{} }

// Name is KVUtilizationName.
func (*KVUtilization) Name() sched.Name { return KVUtilizationName }

// Scope is sched.ScopeSnapshot: a candidate's score is its KV utilisation in the snapshot.
func (*KVUtilization) Scope() sched.Scope { return sched.ScopeSnapshot }

// Separable is true: a candidate's score does not depend on the other candidates.
func (*KVUtilization) Separable() bool { return true }

// Score implements sched.Scorer.
func (*KVUtilization) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		u := in.Load.KVUtilization
		if math.IsNaN(u) {
			u = 1
		}
		out[i] = 1 - sched.Clamp01(u)
	}
}
