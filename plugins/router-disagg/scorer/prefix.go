package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// PrefixName is the scorer's name.
const PrefixName sched.Name = "prefix"

// Prefix scores decode instances by how much of the request's prompt they likely hold in their prefix cache,
// as the router's affinity index remembers (see plugins/router-disagg/affinity): a request whose leading
// blocks went to an instance recently is worth sending there again, since that instance skips recomputing
// them.
//
// Formula, with B the request's block hashes considered and b_i the leading blocks the index says instance i
// served recently:
//
//	score_i = b_i / B    (0 when the request has no block hashes)
//
// A candidate's score is its own (sched.SeparableScorer), 0 for all when the index holds none of the prompt
// (sched.UniformScorer), and at most the deepest hit's b / B (sched.BoundedScorer): most candidates score 0,
// so a profile can stop scoring once the rest cannot beat the best.
type Prefix struct{}

var _ sched.Scorer = (*Prefix)(nil)

// NewPrefix returns the prefix-affinity scorer. It reads the match the router put in the cycle.
func NewPrefix() *Prefix { return &Prefix{} }

// Name is PrefixName.
func (*Prefix) Name() sched.Name { return PrefixName }

var _ interface {
	sched.SeparableScorer
	sched.UniformScorer
	sched.BoundedScorer
} = (*Prefix)(nil)

// Score implements sched.Scorer.
func (*Prefix) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
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
func (*Prefix) Separable() bool { return true }

// Uniform implements sched.UniformScorer: every candidate scores 0 when the index holds none of the prompt.
func (*Prefix) Uniform(c *sched.Cycle) (float64, bool) {
	return 0, c.Prefix.Blocks == 0 || len(c.Prefix.Hits) == 0
}

// Bound implements sched.BoundedScorer: no candidate scores more than the deepest hit.
func (*Prefix) Bound(c *sched.Cycle) float64 {
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
