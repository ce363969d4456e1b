// Package sched is the scheduling framework of the P/D router: filter → score → pick, as in the Gateway API
// Inference Extension and llm-d. A Profile runs its Filters over the candidates (each pass drops the instances
// that cannot serve), then its Scorers (each writes a score in [0, 1] per candidate), and ranks the candidates
// by the weighted mean of their scores, ties going to the candidates the profile prefers (PreferOnTie) and
// then to the lowest instance id, so that decisions are deterministic.
//
// A request comes from the router (the parent package), which runs its decode profile, then, when the decider
// says so, its prefill profile; the ranked candidates go back to it to become the decision and its reason.
//
// Filters and scorers are small plugins with a typed Name; the router's filters are package filter, its
// scorers the files of package scorer, each with its formula in the scorer's README. A Cycle carries what one
// routing decision knows (the request, an indexed view of the snapshot, the prefix-affinity match, and, in the prefill profile,
// the chosen decode instance), so plugins stay pure functions of it and are easy to table-test.
//
// Most of what a profile computes does not depend on the request: whether an instance is ready, its load, its
// KV utilisation are the same for every request until the snapshot changes. Plugins say so through optional
// interfaces (scope.go): a Scoped plugin of ScopeSnapshot, a SeparableScorer (a candidate's score ignores the
// other candidates), a SubsetScorer (it can tell when dropping candidates leaves the others' scores alone),
// a UniformScorer (every candidate scores alike for this request) and a BoundedScorer (no candidate scores
// more than this for this request). Profile.Run then runs the snapshot plugins once per view, model and seed
// and memoizes the result in the view (memo.go), runs only the request plugins per request, and ranks by
// branch and bound over the candidates in the order of their memoized sums, stopping once the rest cannot
// reach the top (rank.go). Decisions are those of running every plugin over every candidate, to the bit;
// the package's tests compare the two on random profiles and views.
//
// Each plugin's time is recorded (Stats) on the runs the caller marks as timed: a clock read costs tens of
// nanoseconds, as much as a cheap filter over a few instances, so the router times a sample of its routes. A
// snapshot plugin's runs once per view are always timed, apart (Precomputed).
package sched
