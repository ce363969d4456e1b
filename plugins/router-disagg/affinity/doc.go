// Package affinity remembers which instances recently served which prompt prefixes, so that the router can
// send a request where its prefix is likely still in the prefix cache.
//
// Requests carry chained block hashes: hash i covers blocks 0..i, so one hash stands for a whole prefix. The
// index maps a hash to the few instances (at most Ways, most recent first) that were sent a prompt through it,
// in a least-recently-used table of bounded size. Recording every block of a long prompt would cost a map
// operation per block, so only sampled positions are kept: every block below DenseBlocks, then 16 positions
// per doubling of the length (a depth is known to within about 6%). The sampled positions are the same for
// every request, so a prefix recorded by one is found by the next.
//
// Instances are kept as 64-bit hashes of their ids (ID), so that the table holds no pointers: the garbage
// collector need not scan it and updates need no write barriers.
//
// Record touches a prompt's positions from the longest to the shortest, so a shorter prefix is never less
// recent than a longer one, and presence is monotone along a prompt: Match finds the deepest remembered
// position by binary search, then walks down from it collecting instances.
//
// The router matches each request's hashes before it runs its profiles (the match goes into the sched.Cycle,
// where the prefix scorer and the decider read it) and records them for the decode instance it picked.
package affinity
