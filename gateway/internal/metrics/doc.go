// Package metrics holds the gateway's Prometheus series, served at GET /metrics: what requests, generations,
// remote prefills, hops, admission and the router did, counted where it happens, and this node's state, read
// when the series are scraped (the engine's figures through the engine contract's Stats, polled at most once
// per StatsEvery however often and by however many scrapers it is read; instance loads; admission; the
// cluster's members; the plugins).
//
// Where an event is counted decides what a sum over the cluster means, and each is counted once: a request by
// the gateway the client called (duet_requests_total and its duration), its generation by the gateway whose
// engine ran it (tokens, time to first token, inter-token latency, prefill, KV bytes), a hop by both of its ends
// (duet_forward_hops_total by direction).
//
// Labels come from small fixed sets, so no client can grow the series: api is one of five names, status an
// HTTP status code, model one the cluster serves (at most MaxModels of them: beyond, "other"; a request for a
// model nobody serves, "unknown"), reason one of the fallback classes of FallbackClass, instance and plugin
// this node's own, and an engine's own figures at most maxEngineMetrics names.
//
// # Adding a series
//
// An event series (a counter or histogram moved where something happens) is a field of Metrics, registered in
// New with the counter or histogram helper (name in base units, ending _total, _seconds or _bytes; help that
// says who counts it), and a method that observes it and does nothing on a nil *Metrics:
//
//	m.estimateError = histogram("duet_pd_estimate_error_ratio", "...", estimateBuckets, "model")
//
//	func (m *Metrics) EstimateError(model string, r float64) {
//		if m == nil {
//			return
//		}
//		m.estimateError.WithLabelValues(model).Observe(r)
//	}
//
// Its labels take values from fixed sets only (a model through Model, never a client's string). On a path
// taken per token, resolve the children once (as seriesOf does) rather than hashing label values each time. A
// state series (a gauge read when scraped) is a Desc in state.go, sent by stateCollector.Collect from a
// function in Sources, which the gateway fills in (gateway/main.go). metrics_test.go checks every series'
// name and help against Prometheus' linter: a new one is checked too.
package metrics
