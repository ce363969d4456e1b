// Package scorer holds the P/D router's scorers, one file each, as the Gateway API Inference Extension keeps
// its own: each scorer is a sched.Scorer with a typed name (the XName constants), a constructor (NewX), its
// formula in its type's comment and in README.md, and a table test.
//
// A request reaches a scorer from a scheduling profile (sched.Profile.Run, which the router in the parent
// package runs per request): the profile's filters have kept the candidates, view.Instances of the indexed
// snapshot, and the sched.Cycle carries the request, the view, the prefix-affinity match and, in the prefill
// profile, the chosen decode instance. A scorer writes one score in [0, 1] per candidate, higher is better;
// the profile ranks the candidates by the weighted mean of its scorers' scores and picks the best, and the
// router names each score in the decision's reason and Scores.
//
//	decode profile:  Load ("load"), KVUtilization ("kv-utilization"), Prefix ("prefix"),
//	                 Locality ("locality"), Partner ("partner")
//	prefill profile: Load renamed "prefill-load", Link ("link"), Hardware ("hardware", with a preference list)
//
// A scorer says through sched's optional interfaces what its scores depend on (the snapshot alone, the
// candidate alone, the same for every candidate of a request, bounded for a request), so that a profile scores
// it once per snapshot or skips it where it cannot change the pick; each type's comment says which apply.
package scorer
