package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// LoadName is the scorer's name in the decode profile.
const LoadName sched.Name = "load"

// PrefillLoadName is the scorer's name in the prefill profile.
const PrefillLoadName sched.Name = "prefill-load"

// Load scores instances by their outstanding work, relative to the other candidates, so that requests
// spread toward the least busy instance. The router uses it twice: as "load" among decode candidates and as
// "prefill-load" among prefill candidates.
//
// Formula, for candidate i with l_i = InFlight_i + Queued_i (negatives count as 0) and L = max_j l_j:
//
//	score_i = 1 − l_i / L    (1 for every candidate when L = 0)
//
// The scale is proportional, not min-max: loads 10 and 11 score 0.09 and 0, not 1 and 0, so a small
// difference cannot outweigh a prefix-cache hit.
//
// Loads come from the snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot). The scores depend
// on which candidates there are, through L, but a request filter that drops candidates other than the most
// loaded leaves them as they were (sched.SubsetScorer); only otherwise are they scored again.
type Load struct{}

var _ sched.Scorer = (*Load)(nil)

// NewLoad returns the load scorer.
func NewLoad() *Load { return &Load{} }

// Name is LoadName.
func (*Load) Name() sched.Name { return LoadName }

// Scope is sched.ScopeSnapshot: the scores depend on the snapshot's loads alone. They also depend on which
// candidates there are (L is the largest load among them), so the scorer is not separable
// (sched.SeparableScorer): a profile scores it once per view, and again over the candidates left when a
// request filter drops the most loaded (SubsetHolds).
func (*Load) Scope() sched.Scope { return sched.ScopeSnapshot }

// Work is the load the scorer counts for an instance: in-flight plus queued requests.
func Work(in *view.Instance) int64 {
	return int64(max(in.Load.InFlight, 0)) + int64(max(in.Load.Queued, 0))
}

var _ sched.SubsetScorer = (*Load)(nil)

// SubsetHolds implements sched.SubsetScorer. A candidate that scored more than 0 had less than the largest
// load (l/L is 1 when l = L), so dropping only such candidates leaves L, and every other score, as it was.
func (*Load) SubsetHolds(scores []float64, kept []bool) bool {
	for i, s := range scores {
		if !kept[i] && !(s > 0) {
			return false
		}
	}
	return true
}

// Score implements sched.Scorer.
func (*Load) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
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
