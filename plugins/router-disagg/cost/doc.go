// Package cost estimates how long a request takes on a given placement, from the speeds its instances'
// nodes measured (sdk/router's Instance.Speed) and the network between them, for the router's `auto` P/D
// mode: prefill here and decode here, or prefill on P and decode on D.
//
// For U uncached prompt tokens and O output tokens:
//
//	local on D:   first token = queue(D) + U / prefill(D, U)
//	remote P → D: first token = queue(D) + RTT(D, P) + queue(P) + U / prefill(P, U)
//	                            + max(0, transfer − prefill on P) + tail + ingest + one decode step
//	total = hop(source, D) + first token + (O − 1) / decode(D)
//
// prefill(X, U) is X's measured prompt tokens per second in the band of U (the nearest measured band when
// that one is not), shared with the requests X already runs: divided by 1 + in-flight. The KV streams while P
// prefills (chunk by chunk), so only the part of the transfer that outlasts the prefill counts, plus its last
// chunk (tail). transfer is U × KV bytes per token over the KV goodput measured into D from P's node, or,
// when none was measured yet, over the path's nominal speed times an efficiency. A hybrid model's
// linear-attention layers hold no KV per token but a fixed state (KV state bytes), sent once the prompt is
// computed: it joins the tail, and ingest is of U × KV bytes per token + KV state bytes. hop is the forwarding hop
// when D is not on the node that received the request. Once D has measured whole remote prefills from P's
// node (prompt tokens over the time from the KV request to its last byte: P's queue, its prefill and the
// transfer that outlasted it), that rate replaces the sum of P's own figures: it is what the path did lately.
// An estimate says which measurement it lacked.
//
// The router's auto mode (auto.go) asks for estimates of the placements its profiles ranked best, and turns
// the fastest into the decision, with the estimates in its reason and scores.
package cost
