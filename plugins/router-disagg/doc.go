// Package routerdisagg is duet's prefill/decode (P/D) router: for each request it picks the instance that
// decodes it and, when the part of the prompt that instance would have to compute is long, an ordered list of
// prefill instances that compute it and ship the KV cache over the KV wire, as exo's "MLX P/D" does.
//
// A request comes from the gateway, which calls Route with it and the cluster snapshot (in process when the
// router is built in, or over go-plugin's gRPC through sdk/router when cmd/duet-router-disagg serves it). The
// decision goes back to the gateway: it forwards the request to the decode instance's node or runs it on its
// own engine, which dials the prefill endpoints over the KV wire.
//
// Routing is filter → score → pick (package sched), in two profiles:
//
//   - decode, always: ready instances of the model that can decode, on live nodes, that the request does not
//     exclude, whose context fits; scored by load, KV utilisation, prefix affinity, locality and (for long
//     prompts) a ready prefill partner; the best weighted mean wins, ties to the lowest instance id.
//   - prefill, when the decider (decider.go) says the uncached prompt reaches the threshold: ready instances of the
//     decode instance's model whose KV it can ingest (its fingerprint, or, where an instance link pairs them,
//     its KV compatibility family at another quantization: an approximate endpoint), a dialable KV endpoint,
//     on live nodes, linked to the decode instance when instance links say who serves whom; scored by load,
//     the network path to the decode node and, optionally, hardware class, exact endpoints first on ties;
//     the best few are listed so the engine can fall back.
//
// The filters are package filter's, the scorers package scorer's (one file each). A prefill endpoint's address
// is the prefill instance's KV endpoint with its host replaced by the path address between the two nodes
// (view.ResolveKV).
//
// Config.PD says who decides remote prefill: the threshold on uncached tokens (PDThreshold, exo's rule), or
// PDAuto, which estimates each placement's time from the speeds the instances' nodes measured (package cost:
// queues, prefill by prompt band, the transfer that outlasts the prefill, ingest, the hop, decoding) for the
// decode profile's best few and their prefill candidates, takes the fastest, and says the estimates in the
// reason. Short prompts skip it.
//
// What depends only on the snapshot (status, roles, load, KV utilisation) is worked out once per snapshot
// and model and kept with the snapshot's view; a request runs only the filters and scorers that read it and
// scores the candidates best first until the rest cannot win, with the decisions a full pass would make.
//
// The router is pure with respect to the snapshot: it reads it (through an index built once per snapshot,
// package view) and never does I/O. Its only state is the prefix-affinity index (package affinity), which
// remembers which instance each recent prompt prefix went to, and its latency counters (Stats). A decision
// costs microseconds; see the benchmarks and the README for figures.
package routerdisagg
