package kvutil

import (
	"math"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name.
const Name sched.Name = "kv-utilization"

// Scorer scores free KV-cache memory; see the package comment for the formula.
type Scorer struct{}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the KV-utilisation scorer.
func New() *Scorer { return &Scorer{} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

// Scope is sched.ScopeSnapshot: a candidate's score is its KV utilisation in the snapshot.
func (*Scorer) Scope() sched.Scope { return sched.ScopeSnapshot }

// Separable is true: a candidate's score does not depend on the other candidates.
func (*Scorer) Separable() bool { return true }

// Score implements sched.Scorer.
func (*Scorer) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		u := in.Load.KVUtilization
		if math.IsNaN(u) {
			u = 1
		}
		out[i] = 1 - sched.Clamp01(u)
	}
}
