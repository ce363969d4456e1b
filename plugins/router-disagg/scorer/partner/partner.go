package partner

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
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

// Score implements sched.Scorer.
func (s *Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	long := c.Request.PromptTokens > 0 && c.Request.PromptTokens >= s.threshold
	any := false
	for i, in := range cands {
		out[i] = 1
		if long && !hasPartner(c.View, in) {
			out[i] = 0
		} else if long {
			any = true
		}
	}
	if !any {
		for i := range out {
			out[i] = 1 // nobody has a partner: neutral
		}
	}
}

func hasPartner(v *view.View, decode *view.Instance) bool {
	for _, p := range v.LinkedPrefill(decode) {
		if p.Status == router.InstanceReady && v.NodeAlive(p.Node) {
			return true
		}
	}
	return false
}
