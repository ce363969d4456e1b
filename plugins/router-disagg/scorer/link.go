package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// LinkName is the scorer's name.
const LinkName sched.Name = "link"

// Link scores prefill instances by the network path their KV cache takes to the decode instance: the KV of an
// 8k-token prompt of an 8B model is about 1 GiB, so Thunderbolt against Wi-Fi is seconds of time to first
// token. (The scorer is named for the network link; it has nothing to do with instance links.)
//
// Formula, for a prefill instance on node P and the decode instance on node D:
//
//	same node                        → 1
//	no path P→D (nor D→P)            → 0
//	path                             → clamp(Quality, 0, 1); Quality 0 (unknown) and NaN score 0
//
// Quality is the cluster's own score of the path: serfcluster computes it from the path's kind, speed and RTT
// (and the gateway copies it into router.Path), so the scorer keeps no formula or speed table of its own. The
// path from P to D is the one the KV travels; when only D→P is known it stands in.
type Link struct{}

var _ sched.Scorer = (*Link)(nil)

// NewLink returns the link scorer. It reads the decode instance from the cycle, so it belongs in the prefill
// profile.
func NewLink() *Link { return &Link{} }

// Name is LinkName.
func (*Link) Name() sched.Name { return LinkName }

// Separable is true (sched.SeparableScorer): a candidate's score is its own path to the decode node.
func (*Link) Separable() bool { return true }

// Score implements sched.Scorer.
func (*Link) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		out[i] = LinkBetween(c.View, in, c.Decode)
	}
}

// LinkBetween scores the path from one instance's node to another's.
func LinkBetween(v *view.View, from, to *view.Instance) float64 {
	if from.Node == to.Node {
		return 1
	}
	p, ok := v.PathBetween(from, to)
	if !ok {
		if p, ok = v.PathBetween(to, from); !ok {
			return 0
		}
	}
	return LinkQuality(p)
}

// LinkPath returns the path from one node to another, or the reverse path when only that is known.
func LinkPath(v *view.View, from, to string) (*router.Path, bool) {
	if p, ok := v.Path(from, to); ok {
		return p, true
	}
	return v.Path(to, from)
}

// LinkQuality is a path's score: its Quality clamped to [0, 1], where 0 (unknown) and NaN score 0. The cluster
// computes Quality from the path's kind, speed and RTT (serfcluster's Path), so the scorer does not.
func LinkQuality(p *router.Path) float64 { return sched.Clamp01(p.Quality) }
