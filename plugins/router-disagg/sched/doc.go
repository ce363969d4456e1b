// Package sched is the scheduling framework of the P/D router: filter → score → pick, as in the Gateway API
// Inference Extension and llm-d. A Profile runs its Filters over the candidates (each pass drops the instances
// that cannot serve), then its Scorers (each writes a score in [0, 1] per candidate), and ranks the candidates
// by the weighted mean of their scores, ties going to the candidates the profile prefers (PreferOnTie) and
// then to the lowest instance id, so that decisions are deterministic.
//
// Filters and scorers are small plugins with a typed Name; each scorer lives in its own package under
// plugins/router-disagg/scorer with a README giving its formula. A Cycle carries what one routing decision
// knows (the request, an indexed view of the snapshot, the prefix-affinity match, and, in the prefill profile,
// the chosen decode instance), so plugins stay pure functions of it and are easy to table-test.
//
// Each plugin's time is recorded (Stats) on the runs the caller marks as timed: a clock read costs tens of
// nanoseconds, as much as a cheap filter over a few instances, so the router times a sample of its routes.
package sched
