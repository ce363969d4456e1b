package sched

// What a profile may know of its plugins, to do less work per request (see Profile.Run). Each is an optional
// interface: a plugin that implements none of them is run in full on every request, which is always right.

// Scope is what a filter's verdicts or a scorer's scores depend on.
type Scope uint8

const (
	// ScopeRequest plugins may read anything in the cycle: the request, the prefix match, the decode instance.
	// It is the scope of every plugin that does not implement Scoped.
	ScopeRequest Scope = iota
	// ScopeSnapshot plugins read only the view, Request.Model and the candidates: they give every request of
	// a model routed against one view the same answer, so a profile runs them once per view, model and seed.
	// Filters built with SnapshotPredicate have it.
	ScopeSnapshot
)

func (s Scope) String() string {
	if s == ScopeSnapshot {
		return "snapshot"
	}
	return "request"
}

// Scoped is implemented by the filters and scorers that say what they depend on. A plugin of ScopeSnapshot
// is run with a cycle that holds the view and Request.Model alone: claiming the scope for a plugin that reads
// more makes wrong decisions, so claim it only for verdicts the snapshot settles. A Conditional filter is of
// ScopeRequest whatever it says.
type Scoped interface {
	Scope() Scope
}

// ScopeOf returns a filter's or a scorer's scope: ScopeRequest unless it implements Scoped.
func ScopeOf(plugin any) Scope {
	if s, ok := plugin.(Scoped); ok && s.Scope() == ScopeSnapshot {
		return ScopeSnapshot
	}
	return ScopeRequest
}

// SeparableScorer is implemented by the scorers whose score of a candidate does not depend on the other
// candidates: scoring any subset gives each of its candidates the score it gets among all of them. kv-util is
// separable; load (which divides by the largest load among the candidates) and partner (neutral when no
// candidate has a partner) are not. A profile may score a separable request scorer over only the candidates
// that can still win, and keeps the memoized scores of a separable snapshot scorer when a request filter
// drops candidates (it scores a snapshot scorer that is not separable again over those left).
type SeparableScorer interface {
	Separable() bool
}

// SubsetScorer is implemented by the scorers that are not separable but can tell from their scores of a set
// of candidates whether a subset of it gets the same scores, such as load: dropping candidates that are not
// the most loaded leaves the largest load, and so every score, as it was. A profile then keeps a snapshot
// scorer's memoized scores when request filters drop candidates, instead of scoring those left again.
type SubsetScorer interface {
	// SubsetHolds reports whether the scores the scorer gave a set of candidates (scores, clamped, by
	// position) are its scores of the candidates kept marks.
	SubsetHolds(scores []float64, kept []bool) bool
}

// UniformScorer is implemented by the request scorers that can tell, for some cycles, that every candidate
// gets the same score: prefix affinity for a prompt the index knows nothing of, say. A profile then adds that
// score to every candidate without calling Score.
type UniformScorer interface {
	// Uniform returns the score every candidate of the cycle gets, and whether there is one.
	Uniform(c *Cycle) (score float64, ok bool)
}

// BoundedScorer is implemented by the separable request scorers that can bound their scores for a cycle: no
// candidate scores more than Bound(c). A profile assumes 1 for the others. The tighter the bound, the fewer
// candidates a profile has to score before it knows that the rest cannot win.
type BoundedScorer interface {
	Bound(c *Cycle) float64
}

func separable(s Scorer) bool {
	x, ok := s.(SeparableScorer)
	return ok && x.Separable()
}

func uniform(s Scorer, c *Cycle) (float64, bool) {
	if x, ok := s.(UniformScorer); ok {
		return x.Uniform(c)
	}
	return 0, false
}

func bound(s Scorer, c *Cycle) float64 {
	if x, ok := s.(BoundedScorer); ok {
		return x.Bound(c)
	}
	return 1
}
