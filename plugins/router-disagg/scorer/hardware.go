package scorer

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// HardwareName is the scorer's name.
const HardwareName sched.Name = "hardware"

// Hardware scores prefill instances by the hardware class of their node, for clusters that mix machines good
// at compute-bound prefill (a GPU box) with machines good at bandwidth-bound decode (a Mac with lots of
// unified memory), as in exo's DGX Spark + M3 Ultra setup.
//
// Formula, with the operator's preference list H = [h_0, h_1, …, h_{n-1}] (best first) and h the instance's
// node's hardware class:
//
//	score = 1 − k/n   when h = h_k
//	score = 0         when h is not in H, the node is unknown, or H is empty
//
// With an empty list every candidate scores 0 and the scorer changes nothing. The class comes from the
// snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot).
type Hardware struct {
	rank map[string]int
	n    int
}

var _ sched.Scorer = (*Hardware)(nil)

// NewHardware returns the hardware scorer for the preference list, best first. A class listed twice keeps its first
// place; empty names are ignored.
func NewHardware(preferred []string) *Hardware {
	s := &Hardware{rank: map[string]int{}}
	for _, h := range preferred {
		if _, dup := s.rank[h]; h != "" && !dup {
			s.rank[h] = s.n
			s.n++
		}
	}
	return s
}

// Name is HardwareName.
func (*Hardware) Name() sched.Name { return HardwareName }

// Scope is sched.ScopeSnapshot: a candidate's score is its node's hardware class in the snapshot.
func (*Hardware) Scope() sched.Scope { return sched.ScopeSnapshot }

// Separable is true: a candidate's score does not depend on the other candidates.
func (*Hardware) Separable() bool { return true }

// Score implements sched.Scorer.
func (s *Hardware) Score(_ *sched.Cycle, cands []*view.Instance, out []float64) {
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
