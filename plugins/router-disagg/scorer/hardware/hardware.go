package hardware

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Name is the scorer's name.
const Name sched.Name = "hardware"

// Scorer scores by the node's hardware class; see the package comment for the formula.
type Scorer struct {
	rank map[string]int
	n    int
}

var _ sched.Scorer = (*Scorer)(nil)

// New returns the hardware scorer for the preference list, best first. A class listed twice keeps its first
// place; empty names are ignored.
func New(preferred []string) *Scorer {
	s := &Scorer{rank: map[string]int{}}
	for _, h := range preferred {
		if _, dup := s.rank[h]; h != "" && !dup {
			s.rank[h] = s.n
			s.n++
		}
	}
	return s
}

// Name is Name.
func (*Scorer) Name() sched.Name { return Name }

// Scope is sched.ScopeSnapshot: a candidate's score is its node's hardware class in the snapshot.
func (*Scorer) Scope() sched.Scope { return sched.ScopeSnapshot }

// Separable is true: a candidate's score does not depend on the other candidates.
func (*Scorer) Separable() bool { return true }

// Score implements sched.Scorer.
func (s *Scorer) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		out[i] = 0
		if s.n == 0 {
			continue
		}
		if in.NodeInfo == nil {
			continue
		}
		if k, ok := s.rank[in.NodeInfo.Hardware]; ok {
			out[i] = 1 - float64(k)/float64(s.n)
		}
	}
}
