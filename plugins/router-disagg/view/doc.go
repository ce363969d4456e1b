// Package view indexes a router.Snapshot for routing: nodes and instances by id, instances by model (all of
// them, and those whose role can decode or prefill), network paths by (from, to) node, what the instance links
// say (which instances are prefill-only, which prefill instances serve which decode instance, which decode
// instances have a ready partner), per instance the facts every filter asks about (is its node alive, is its
// KV endpoint well formed), and per model the facts that let a filter know it has nothing to drop (the
// shortest context length, a fingerprint they all share). The snapshot's own lookups are linear scans, a
// cluster of n nodes has n·(n-1) paths, and string-keyed maps cost tens of nanoseconds a lookup, so routing
// over hundreds of instances needs the facts resolved once per snapshot to stay in microseconds.
//
// The router asks Cache for the view of the snapshot the gateway handed it with each request; the view's
// instances are the candidates its scheduling profiles (package sched) filter and score.
//
// An engine advertises its KV wire server as host:port, where the host is whatever it bound or guessed (often
// an unspecified address such as 0.0.0.0, or one interface of several). The cluster's paths between nodes
// know better which address of the prefill node the decode node reaches best (Thunderbolt before Ethernet
// before Wi-Fi, as exo's find_ip_prioritised), so across nodes that host wins and the endpoint keeps only its
// port: ResolveKV gives the address a prefill endpoint carries, for the router and for the gateway when
// another node pinned the decision. The view checks each instance's endpoint once (Instance.KVValid,
// KVUnspecified), so that the kv-endpoint filter need not parse it per request.
//
// A snapshot is immutable and the gateway hands the same *Snapshot to every request until the cluster
// changes, so Cache builds the view once per snapshot and keeps the last few. What plugins compute from the
// view alone can live with it (Memoize): the scheduling profiles keep there what their snapshot filters and
// scorers found, so that a request pays only for what depends on it.
package view
