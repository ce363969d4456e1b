package link

import (
	"math"
	"time"

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
	l, ok := v.LinkBetween(from, to)
	if !ok {
		if l, ok = v.LinkBetween(to, from); !ok {
			return 0
		}
	}
	return Quality(l)
}

// Path returns the link from one node to another, or the reverse link when only that is known.
func Path(v *view.View, from, to string) (*router.Link, bool) {
	if l, ok := v.Link(from, to); ok {
		return l, true
	}
	return v.Link(to, from)
}

// Quality is a link's score: its own Quality when set, the fallback formula otherwise.
func Quality(l *router.Link) float64 {
	if l.Quality > 0 || math.IsNaN(l.Quality) {
		return sched.Clamp01(l.Quality)
	}
	if l.Kind == "loopback" {
		return 1
	}
	mbps := float64(l.SpeedMbps)
	if mbps <= 0 {
		mbps = float64(NominalMbps(l.Kind))
	}
	bw := sched.Clamp01(math.Log10(math.Max(mbps, 1)) / 5)
	lat := 0.5
	if l.RTT > 0 {
		lat = 1 / (1 + float64(l.RTT)/float64(time.Millisecond))
	}
	return sched.Clamp01(0.7*bw + 0.3*lat)
}

// NominalMbps is the speed assumed for a link kind whose speed is unknown.
func NominalMbps(kind string) int64 {
	switch kind {
	case "thunderbolt":
		return 40000
	case "ethernet":
		return 1000
	case "wifi":
		return 400
	case "loopback":
		return 100000
	}
	return 100
}
