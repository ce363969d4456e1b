package link

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// Name is the scorer's name.
const Name sched.Name = "link"

// Scorer scores the KV path from a prefill instance to the decode instance; see the package comment.
type Scorer struct{}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the link scorer. It reads the decode instance from the cycle, so it belongs in the prefill
// profile.
func New() *Scorer { return &Scorer{} }

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

// Separable is true (sched.SeparableScorer): a candidate's score is its own path to the decode node.
func (*Scorer) Separable() bool { return true }

// Score implements sched.Scorer.
func (*Scorer) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		out[i] = Between(c.View, in, c.Decode)
	}
}

// Between scores the path from one instance's node to another's.
func Between(v *view.View, from, to *view.Instance) float64 {
	if from.Node == to.Node {
		return 1
	}
	p, ok := v.PathBetween(from, to)
	if !ok {
		if p, ok = v.PathBetween(to, from); !ok {
			return 0
		}
	}
	return Quality(p)
}

// Path returns the path from one node to another, or the reverse path when only that is known.
func Path(v *view.View, from, to string) (*router.Path, bool) {
	if p, ok := v.Path(from, to); ok {
		return p, true
	}
	return v.Path(to, from)
}

// Quality is a path's score: its Quality clamped to [0, 1], where 0 (unknown) and NaN score 0. The cluster
// computes Quality from the path's kind, speed and RTT (serfcluster's Path), so the scorer does not.
func Quality(p *router.Path) float64 { return sched.Clamp01(p.Quality) }
