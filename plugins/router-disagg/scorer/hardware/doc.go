// Package hardware scores prefill instances by the hardware class of their node, for clusters that mix
// machines good at compute-bound prefill (a GPU box) with machines good at bandwidth-bound decode (a Mac with
// lots of unified memory), as in exo's DGX Spark + M3 Ultra setup.
//
// Formula, with the operator's preference list H = [h_0, h_1, …, h_{n-1}] (best first) and h the instance's
// node's hardware class:
//
//	score = 1 − k/n   when h = h_k
//	score = 0         when h is not in H, the node is unknown, or H is empty
//
// With an empty list every candidate scores 0 and the scorer changes nothing. The class comes from the
// snapshot, so a profile scores once per snapshot (sched.ScopeSnapshot).
package hardware
