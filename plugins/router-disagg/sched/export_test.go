package sched

import "github.com/duet-ai/duet/plugins/router-disagg/view"

// RunAll runs every plugin over every candidate, without a memo: what Run must agree with.
func (p *Profile) RunAll(c *Cycle, seed []*view.Instance, top int, s *Scratch, timed bool) Result {
	return p.runAll(c, seed, top, s, timed)
}
