// Package view indexes a router.Snapshot for routing: nodes and instances by id, instances by model (all of
// them, and those whose role can decode or prefill), network paths by (from, to) node, what the instance links
// say (which instances are prefill-only, which prefill instances serve which decode instance), and, per
// instance, the facts every filter asks about (is its node alive, is its KV endpoint well formed). The
// snapshot's own lookups are linear scans, a cluster of n nodes has n·(n-1) paths, and string-keyed maps cost
// tens of nanoseconds a lookup, so routing over hundreds of instances needs the facts resolved once per
// snapshot to stay in microseconds.
//
// A snapshot is immutable and the gateway hands the same *Snapshot to every request until the cluster
// changes, so Cache builds the view once per snapshot and keeps the last few.
package view
