package sched

import (
	"github.com/duet-ai/duet/plugins/router-disagg/affinity"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// Name names a filter, a scorer or a profile. Scorer names key router.Decision.Scores.
type Name string

// Cycle is what one routing decision knows. Plugins read it and must not modify anything it points to.
type Cycle struct {
	Request *router.Request
	View    *view.View
	// Prefix is what the prefix-affinity index remembers of the request's leading blocks.
	Prefix affinity.Match
	// Decode is the chosen decode instance; set only while the prefill profile runs.
	Decode *router.Instance
}

// Filter drops the candidates that cannot serve.
type Filter interface {
	Name() Name
	// Filter returns the candidates that pass, in their order, reusing the backing array of cands.
	Filter(c *Cycle, cands []*router.Instance) []*router.Instance
}

// Scorer rates candidates.
type Scorer interface {
	Name() Name
	// Score writes one score in [0, 1] per candidate into out (len(out) == len(cands)); higher is better.
	Score(c *Cycle, cands []*router.Instance, out []float64)
}

// Predicate makes a Filter from a per-candidate test.
func Predicate(name Name, keep func(c *Cycle, in *router.Instance) bool) Filter {
	return predicate{name: name, keep: keep}
}

type predicate struct {
	name Name
	keep func(*Cycle, *router.Instance) bool
}

func (p predicate) Name() Name { return p.name }

func (p predicate) Filter(c *Cycle, cands []*router.Instance) []*router.Instance {
	out := cands[:0]
	for _, in := range cands {
		if p.keep(c, in) {
			out = append(out, in)
		}
	}
	return out
}

// Renamed returns s under another name, so that one scorer can serve in two profiles (load and prefill-load)
// with distinct keys in the decision's scores.
func Renamed(s Scorer, name Name) Scorer { return renamed{Scorer: s, name: name} }

type renamed struct {
	Scorer
	name Name
}

func (r renamed) Name() Name { return r.name }

// Clamp01 maps x into [0, 1]; NaN becomes 0.
func Clamp01(x float64) float64 {
	switch {
	case x > 1:
		return 1
	case x >= 0:
		return x
	}
	return 0 // negative or NaN
}
