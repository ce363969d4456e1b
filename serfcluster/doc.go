// Package serfcluster is each duet gateway's membership in the cluster and its replica of the cluster
// tables, built on hashicorp/serf.
//
// A Cluster runs one serf agent and one event-loop goroutine. Together the gateways know who is alive
// (serf's SWIM failure detection, tuned by LANTimings to declare a hard-killed node failed in about 1.5 s),
// how each pair of nodes should reach each other (every node advertises its addresses with link kind and
// speed in its tags; serf's Vivaldi coordinates estimate RTT; Snapshot.Path chooses), which model
// instances exist where, and which prefill instances serve which decode instances.
//
// # Replicated tables
//
// Instances and instance links are last-writer-wins maps (internal/lww): every write carries a Lamport time
// and its writer's node ID, and the higher pair wins on every replica whatever order writes arrive in.
// Deletes are tombstones that expire after TombstoneTTL. An instance belongs to its node, which alone
// writes it; links may be written by anyone.
//
// Changes travel three ways, each covering the others' gaps:
//
//   - Deltas: every write is gossiped at once as a namespaced serf user event ("duet:d"). User events are
//     best effort, unordered and limited to one gossip packet (MaxEventBytes, at most 1200 bytes); a
//     value too large for one is sent as a stub (its revision only), and receivers that lack it pull.
//   - Digest queries: every AntiEntropyInterval each node sends a serf query ("duet:ae") carrying a hash of
//     its live keys and revisions. A node whose digest differs answers and pulls from the asker; the asker
//     pulls from a few of those that answered.
//   - Full-state pulls: a node's whole table state is served over HTTP by StateHandler (the gateway mounts
//     it at StatePath) and pulled on join, on a digest mismatch and on a newer stub. Pulls are bounded in
//     time (PullTimeout) and size (MaxStateBytes), validated as strictly as local writes, and in an
//     encrypted cluster sealed with the gossip key and bound to a fresh challenge.
//
// So the tables converge even when every user event is lost.
//
// # Failures
//
// The instances of a failed node are reported unavailable at once (the tables keep them: a node that comes
// back is routable again without rewriting anything). The instances of a node that left, or that serf
// reaped, are deleted by every node on its own at the revision of the value it deletes, so the replicas
// agree without a message. A restarted node pulls the cluster state and writes its instances again at
// revisions above anything it has seen; instances of its own ID that it does not publish again within
// OrphanGrace are deleted.
//
// # Snapshots
//
// Readers never touch the loop's state: every batch of changes publishes an immutable Snapshot (members,
// link state, tables with effective status and load, RTT coordinates) with a rising version, read with
// one atomic load or received through Subscribe, which coalesces so that a slow reader only ever finds
// the newest one waiting.
//
// Loads are soft state: SetLoad is cheap enough to call per request, and each node gossips its instances'
// loads at most once per LoadInterval (and again every anti-entropy round). Measured speeds (SetSpeed: prefill
// and decode rates, queue wait, KV goodput into the instance) ride on the same broadcasts, only when they
// changed and at most once per SpeedInterval (5 s); every node keeps an instance's last speed.
package serfcluster
