//go:build !race

package sched_test

import (
	"math/rand/v2"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/filter"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/scorer"
	"github.com/duet-ai/duet/sdk/router"
)

// TestMemoizedRunAllocatesNothing: once the memo is built, a run with a warm Scratch allocates nothing, on
// either ranking path, timed or not.
func TestMemoizedRunAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	v := randomView(rng)
	for len(v.Instances("m")) < 100 {
		v = randomView(rng)
	}
	p, err := sched.NewProfile("p", []sched.Filter{filter.Model(), filter.NotExcluded(), filter.Ready()},
		[]sched.Weighted{{Scorer: scorer.NewLoad(), Weight: 1}, {Scorer: scorer.NewKVUtilization(), Weight: 0.5}, {Scorer: scorer.NewPrefix(), Weight: 1},
			{Scorer: scorer.NewLocality(), Weight: 0.1}, {Scorer: scorer.NewPartner(1000), Weight: 2}})
	if err != nil {
		t.Fatal(err)
	}
	seed := v.Instances("m")
	for name, req := range map[string]*router.Request{
		"nothing dropped": {Model: "m", SourceNode: "n1", PromptTokens: 5000},
		"one excluded":    {Model: "m", SourceNode: "n1", Exclude: []string{seed[0].ID, seed[1].ID}},
	} {
		c := &sched.Cycle{Request: req, View: v}
		var s sched.Scratch
		for _, timed := range []bool{false, true} {
			p.Run(c, seed, 2, &s, timed)
			if n := testing.AllocsPerRun(50, func() { p.Run(c, seed, 2, &s, timed) }); n != 0 {
				t.Errorf("%s, timed %v: %v allocations per run", name, timed, n)
			}
		}
	}
}
