package prefix

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name.
const Name sched.Name = "prefix"

// Scorer scores prefix-cache affinity; see the package comment for the formula.
type Scorer struct{}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the prefix-affinity scorer. It reads the match the router put in the cycle.
func New() *Scorer { return &Scorer{} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

var _ interface {
	sched.SeparableScorer
	sched.UniformScorer
	sched.BoundedScorer
} = (*Scorer)(nil)

// Score implements sched.Scorer.
func (*Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	m := c.Prefix
	if m.Blocks == 0 || len(m.Hits) == 0 {
		clear(out[:len(cands)]) // no instance holds any of the prompt
		return
	}
	blocks := float64(m.Blocks)
	for i, in := range cands {
		out[i] = 0
		for _, h := range m.Hits {
			if h.Instance == in.AffinityID {
				out[i] = float64(h.Blocks) / blocks // as affinity.Match.Fraction
				break
			}
		}
	}
}

// Separable is true: a candidate's score is its own affinity.
func (*Scorer) Separable() bool { return true }

// Uniform implements sched.UniformScorer: every candidate scores 0 when the index holds none of the prompt.
func (*Scorer) Uniform(c *sched.Cycle) (float64, bool) {
	return 0, c.Prefix.Blocks == 0 || len(c.Prefix.Hits) == 0
}

// Bound implements sched.BoundedScorer: no candidate scores more than the deepest hit.
func (*Scorer) Bound(c *sched.Cycle) float64 {
	m := c.Prefix
	if m.Blocks == 0 || len(m.Hits) == 0 {
		return 0
	}
	most := 0
	for _, h := range m.Hits {
		most = max(most, h.Blocks)
	}
	return float64(most) / float64(m.Blocks)
}
