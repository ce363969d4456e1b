// Package view indexes a router.Snapshot for routing: nodes and instances by id, instances by model (all of
// them, and those whose role can decode or prefill), network paths by (from, to) node, what the instance links
// say (which instances are prefill-only, which prefill instances serve which decode instance, which decode
// instances have a ready partner), per instance the facts every filter asks about (is its node alive, is its
// KV endpoint well formed), and per model the facts that let a filter know it has nothing to drop (the
// shortest context length, a fingerprint they all share). The snapshot's own lookups are linear scans, a
// cluster of n nodes has n·(n-1) paths, and string-keyed maps cost tens of nanoseconds a lookup, so routing
// over hundreds of instances needs the facts resolved once per snapshot to stay in microseconds.
//
// A snapshot is immutable and the gateway hands the same *Snapshot to every request until the cluster
// changes, so Cache builds the view once per snapshot and keeps the last few. What plugins compute from the
// view alone can live with it (Memoize): the scheduling profiles keep there what their snapshot filters and
// scorers found, so that a request pays only for what depends on it.
package view
