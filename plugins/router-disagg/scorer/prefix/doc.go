// Package prefix scores decode instances by how much of the request's prompt they likely hold in their prefix
// cache, as the router's affinity index remembers (see plugins/router-disagg/affinity): a request whose
// leading blocks went to an instance recently is worth sending there again, since that instance skips
// recomputing them.
//
// Formula, with B the request's block hashes considered and b_i the leading blocks the index says instance i
// served recently:
//
//	score_i = b_i / B    (0 when the request has no block hashes)
//
// A candidate's score is its own (sched.SeparableScorer), 0 for all when the index holds none of the prompt
// (sched.UniformScorer), and at most the deepest hit's b / B (sched.BoundedScorer): most candidates score 0,
// so a profile can stop scoring once the rest cannot beat the best.
package prefix
