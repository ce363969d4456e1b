// Package lww is a last-writer-wins map: the data structure behind serfcluster's replicated tables.
//
// Every entry carries a revision, a Lamport time plus the ID of the node that wrote it. Two replicas that have
// seen the same set of entries, in any order and with any duplicates, hold the same map: the entry with the
// higher revision wins, ties on Lamport time are broken by the writer ID, and at an equal revision a delete
// wins over a value. That is what lets serfcluster ship deltas as unordered, lossy gossip and repair gaps with
// full-state pulls.
//
// Deletes are kept as tombstones so that an older value arriving late cannot resurrect a key. A tombstone
// carries the time it has left to live, and that remainder travels with it, so a tombstone that has expired
// on one node is not revived forever by replicas that learned of it later. A value older than a tombstone
// that every replica has already dropped can come back; the tombstone TTL must therefore exceed the longest
// time a replica can be out of contact and still rejoin with its old state.
//
// The map is not safe for concurrent use; serfcluster owns each one from its single event loop.
package lww
