package partner

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name.
const Name sched.Name = "partner"

// Scorer prefers decode instances with linked prefill partners for long prompts; see the package comment.
type Scorer struct {
	threshold int
}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the scorer for prompts of at least threshold tokens.
func New(threshold int) *Scorer { return &Scorer{threshold: threshold} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

var _ sched.UniformScorer = (*Scorer)(nil)

// Uniform implements sched.UniformScorer: every candidate scores 1 for a short prompt, and when no instance
// of the model has a ready partner (the candidates are instances of the model: the model filter comes first).
func (s *Scorer) Uniform(c *sched.Cycle) (float64, bool) {
	return 1, !s.long(c) || c.View != nil && !c.View.HasReadyPartners(c.Request.Model)
}

func (s *Scorer) long(c *sched.Cycle) bool {
	return c.Request.PromptTokens > 0 && c.Request.PromptTokens >= s.threshold
}

// Score implements sched.Scorer. Whether a candidate has a ready partner is a fact of the snapshot, which the
// view resolves once (view.Instance.ReadyPartner); the request decides whether it counts.
func (s *Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
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
