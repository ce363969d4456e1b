package load

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name in the decode profile.
const Name sched.Name = "load"

// PrefillName is the scorer's name in the prefill profile.
const PrefillName sched.Name = "prefill-load"

// Scorer scores outstanding work; see the package comment for the formula.
type Scorer struct{}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the load scorer.
func New() *Scorer { return &Scorer{} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

// Scope is sched.ScopeSnapshot: the scores depend on the snapshot's loads alone. They also depend on which
// candidates there are (L is the largest load among them), so the scorer is not separable
// (sched.SeparableScorer): a profile scores it once per view, and again over the candidates left when a
// request filter drops the most loaded (SubsetHolds).
func (*Scorer) Scope() sched.Scope { return sched.ScopeSnapshot }

// Work is the load the scorer counts for an instance: in-flight plus queued requests.
func Work(in *view.Instance) int64 {
	return int64(max(in.Load.InFlight, 0)) + int64(max(in.Load.Queued, 0))
}

var _ sched.SubsetScorer = (*Scorer)(nil)

// SubsetHolds implements sched.SubsetScorer. A candidate that scored more than 0 had less than the largest
// load (l/L is 1 when l = L), so dropping only such candidates leaves L, and every other score, as it was.
func (*Scorer) SubsetHolds(scores []float64, kept []bool) bool {
	for i, s := range scores {
		if !kept[i] && !(s > 0) {
			return false
		}
	}
	return true
}

// Score implements sched.Scorer.
func (*Scorer) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
	var most int64
	for _, in := range cands {
		most = max(most, Work(in))
	}
	for i, in := range cands {
		if most == 0 {
			out[i] = 1
			continue
		}
		out[i] = 1 - float64(Work(in))/float64(most)
	}
}
