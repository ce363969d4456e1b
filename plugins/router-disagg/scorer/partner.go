package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// PartnerName is the scorer's name.
const PartnerName sched.Name = "partner"

// Partner prefers, for a prompt long enough to be prefilled remotely, the decode instances that an operator
// gave prefill partners through instance links: they are the ones set up for disaggregated prefill, and their
// first token comes sooner. A short prompt is prefilled where it decodes, so every instance scores the same
// for it.
//
// Formula: for a request whose PromptTokens is at least the router's PrefillThreshold, score = 1 when the
// instance links give the candidate a prefill instance that is ready on an alive node, 0 otherwise; for a
// shorter (or unknown) prompt, or when no candidate has a partner, 1 for every candidate. The uncached part
// is not known yet when the decode profile runs, so the whole prompt counts here; the router's decider still
// judges the uncached tokens afterwards.
//
// Whether an instance has a ready partner is a fact of the snapshot the view resolves once
// (view.Instance.ReadyPartner). For a short prompt, or a model none of whose instances has a partner, every
// candidate scores 1 and a profile adds that without scoring (sched.UniformScorer).
type Partner struct {
	threshold int
}

var _ sched.Scorer = (*Partner)(nil)

// NewPartner returns the scorer for prompts of at least threshold tokens.
func NewPartner(threshold int) *Partner { return &Partner{threshold: threshold} }

// Name is PartnerName.
func (*Partner) Name() sched.Name { return PartnerName }

var _ sched.UniformScorer = (*Partner)(nil)

// Uniform implements sched.UniformScorer: every candidate scores 1 for a short prompt, and when no instance
// of the model has a ready partner (the candidates are instances of the model: the model filter comes first).
func (s *Partner) Uniform(c *sched.Cycle) (float64, bool) {
	return 1, !s.long(c) || c.View != nil && !c.View.HasReadyPartners(c.Request.Model)
}

func (s *Partner) long(c *sched.Cycle) bool {
	return c.Request.PromptTokens > 0 && c.Request.PromptTokens >= s.threshold
}

// Score implements sched.Scorer. Whether a candidate has a ready partner is a fact of the snapshot, which the
// view resolves once (view.Instance.ReadyPartner); the request decides whether it counts.
func (s *Partner) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	any := false
	if s.long(c) {
		for i, in := range cands {
			out[i] = 0
			if in.ReadyPartner {
				out[i], any = 1, true
			}
		}
	}
	if !any {
		for i := range out {
			out[i] = 1 // a short prompt, or nobody has a partner: neutral
		}
	}
}
