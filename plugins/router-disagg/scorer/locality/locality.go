package locality

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name.
const Name sched.Name = "locality"

// Scorer prefers the request's source node; see the package comment for the formula.
type Scorer struct{}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the locality scorer.
func New() *Scorer { return &Scorer{} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

// Score implements sched.Scorer.
func (*Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	src := c.Request.SourceNode
	for i, in := range cands {
		out[i] = 0
		if src != "" && in.Node == src {
			out[i] = 1
		}
	}
}
