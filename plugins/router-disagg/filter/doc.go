// Package filter holds the router's filters: the rules that take an instance out of the running before any
// scoring. The decode profile keeps ready decode-capable instances of the model on live nodes, not excluded by
// the request, whose context fits it; the prefill profile keeps ready prefill-capable instances on live nodes
// that can hand their KV cache to the chosen decode instance: same model, same fingerprint (exact) or, where
// an instance link pairs them, same KV compatibility family (approximate), a dialable KV endpoint, linked to it
// when the instance links say who serves whom.
//
// A request reaches the filters from a scheduling profile (sched.Profile.Run, which the router runs per
// request); the candidates they keep go on to the profile's scorers (package scorer).
//
// Each filter is a sched.Predicate with a typed name; the router reports how many candidates each one
// removed when nothing is left, which is most of what an operator needs to see why a request failed. The
// filters that read only the snapshot and the request's model (model, ready, node-alive, decode-role,
// prefill-role) are sched.SnapshotPredicates, which a profile runs once per snapshot. Those that only some
// requests can fail are sched.Conditional and skipped for the others: not-excluded without exclusions,
// context-fits and prompt-fits for a request that fits the model's shortest context, kv-compatible when every
// instance of the model shares the decode instance's fingerprint, linked when the decode instance has no
// instance links.
package filter
