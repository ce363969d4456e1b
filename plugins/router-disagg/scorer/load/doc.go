// Package load scores instances by their outstanding work, relative to the other candidates, so that requests
// spread toward the least busy instance. The router uses it twice: as "load" among decode candidates and as
// "prefill-load" among prefill candidates.
//
// Formula, for candidate i with l_i = InFlight_i + Queued_i (negatives count as 0) and L = max_j l_j:
//
//	score_i = 1 − l_i / L    (1 for every candidate when L = 0)
//
// The scale is proportional, not min-max: loads 10 and 11 score 0.09 and 0, not 1 and 0, so a small
// difference cannot outweigh a prefix-cache hit.
//
// Loads come from the snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot). The scores depend
// on which candidates there are, through L, but a request filter that drops candidates other than the most
// loaded leaves them as they were (sched.SubsetScorer); only otherwise are they scored again.
package load
