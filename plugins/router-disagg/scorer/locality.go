package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// LocalityName is the scorer's name.
const LocalityName sched.Name = "locality"

// Locality gives a mild preference to decode instances on the node whose gateway received the request, which
// saves forwarding the request and its stream between gateways.
//
// Formula: score = 1 when the instance is on Request.SourceNode (and that is known), 0 otherwise. Its default
// weight is small, so any real difference in load or prefix affinity wins over it.
type Locality struct{}

var _ sched.Scorer = (*Locality)(nil)

// NewLocality returns the locality scorer.
func NewLocality() *Locality { return &Locality{} }

// Name is LocalityName.
func (*Locality) Name() sched.Name { return LocalityName }

var _ interface {
	sched.SeparableScorer
	sched.UniformScorer
} = (*Locality)(nil)

// Separable is true: a candidate's score is where it runs.
func (*Locality) Separable() bool { return true }

// Uniform implements sched.UniformScorer: every candidate scores 0 when the request does not name its source
// node.
func (*Locality) Uniform(c *sched.Cycle) (float64, bool) { return 0, c.Request.SourceNode == "" }

// Score implements sched.Scorer.
func (*Locality) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	src := c.Request.SourceNode
	if n, ok := sourceNodeIndex(c, src); ok {
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

// sourceNodeIndex resolves the source node in the cycle's view.
func sourceNodeIndex(c *sched.Cycle, src string) (int32, bool) {
	if c.View == nil || src == "" {
		return 0, false
	}
	return c.View.NodeIndex(src)
}
