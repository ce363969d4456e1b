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
	Decode *view.Instance
}

// Filter drops the candidates that cannot serve. Filters judge one candidate at a time, so that a profile can
// run them all over each candidate in one pass (each instance is loaded once), or, on timed runs, one filter
// over all candidates at a time; both give the same survivors and the same counts.
type Filter interface {
	Name() Name
	// Keep reports whether the candidate passes.
	Keep(c *Cycle, in *view.Instance) bool
}

// Scorer rates candidates.
type Scorer interface {
	Name() Name
	// Score writes one score in [0, 1] per candidate into out (len(out) == len(cands)); higher is better.
	Score(c *Cycle, cands []*view.Instance, out []float64)
}

// Predicate makes a Filter from a per-candidate test.
func Predicate(name Name, keep func(c *Cycle, in *view.Instance) bool) Filter {
	return predicate{name: name, keep: keep}
}

// SnapshotPredicate makes a Filter of ScopeSnapshot from a per-candidate test that reads only the view, the
// request's Model and the candidate.
func SnapshotPredicate(name Name, keep func(c *Cycle, in *view.Instance) bool) Filter {
	return predicate{name: name, keep: keep, scope: ScopeSnapshot}
}

type predicate struct {
	name  Name
	keep  func(*Cycle, *view.Instance) bool
	scope Scope
}

func (p predicate) Name() Name { return p.name }

func (p predicate) Scope() Scope { return p.scope }

func (p predicate) Keep(c *Cycle, in *view.Instance) bool { return p.keep(c, in) }

// Conditional is a Filter that only some cycles need, such as one that only requests with a certain field
// set can fail. A profile skips it for the cycles Applies is false of, as if it kept every candidate, which
// saves a call per candidate; it removes nothing and is not timed there. Applies may count on the filters
// before it: it may be false where the filter would drop only candidates an earlier filter drops anyway (a
// context filter after the model filter can look at the model's shortest context). A Conditional filter is of
// ScopeRequest.
type Conditional interface {
	Filter
	Applies(c *Cycle) bool
}

// PredicateWhen makes a Conditional filter from a per-cycle condition and a per-candidate test.
func PredicateWhen(name Name, applies func(c *Cycle) bool, keep func(c *Cycle, in *view.Instance) bool) Filter {
	return conditional{predicate: predicate{name: name, keep: keep}, applies: applies}
}

type conditional struct {
	predicate
	applies func(*Cycle) bool
}

func (f conditional) Scope() Scope { return ScopeRequest }

var _ Conditional = conditional{}

func (f conditional) Applies(c *Cycle) bool { return f.applies(c) }

// Renamed returns s under another name, so that one scorer can serve in two profiles (load and prefill-load)
// with distinct keys in the decision's scores.
func Renamed(s Scorer, name Name) Scorer { return renamed{Scorer: s, name: name} }

type renamed struct {
	Scorer
	name Name
}

func (r renamed) Name() Name { return r.name }

// The renamed scorer keeps what the scorer says of itself.
func (r renamed) Scope() Scope                     { return ScopeOf(r.Scorer) }
func (r renamed) Separable() bool                  { return separable(r.Scorer) }
func (r renamed) Uniform(c *Cycle) (float64, bool) { return uniform(r.Scorer, c) }
func (r renamed) Bound(c *Cycle) float64           { return bound(r.Scorer, c) }
func (r renamed) SubsetHolds(scores []float64, kept []bool) bool {
	x, ok := r.Scorer.(SubsetScorer)
	return ok && x.SubsetHolds(scores, kept)
}

var _ interface {
	Scoped
	SeparableScorer
	UniformScorer
	BoundedScorer
	SubsetScorer
} = renamed{}

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
