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

var _ interface {
	sched.SeparableScorer
	sched.UniformScorer
} = (*Scorer)(nil)

// Separable is true: a candidate's score is where it runs.
func (*Scorer) Separable() bool { return true }

// Uniform implements sched.UniformScorer: every candidate scores 0 when the request does not name its source
// node.
func (*Scorer) Uniform(c *sched.Cycle) (float64, bool) { return 0, c.Request.SourceNode == "" }

// Score implements sched.Scorer.
func (*Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	src := c.Request.SourceNode
	if n, ok := nodeIndex(c, src); ok {
		// The candidates are the view's: an instance is on the source node exactly when its node index is the
		// source node's.
		for i, in := range cands {
			out[i] = 0
			if in.NodeIndex() == n {
				out[i] = 1
			}
		}
		return
	}
	for i, in := range cands {
		out[i] = 0
		if src != "" && in.Node == src {
			out[i] = 1
		}
	}
}

// nodeIndex resolves the source node in the cycle's view.
func nodeIndex(c *sched.Cycle, src string) (int32, bool) {
	if c.View == nil || src == "" {
		return 0, false
	}
	return c.View.NodeIndex(src)
}
