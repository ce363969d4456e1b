// Package bench is `duet bench`: the benchmarks an operator runs against a duet cluster, or against one the
// command starts itself on loopback, to see whether prefill/decode disaggregation pays and to publish numbers.
//
//	duet bench pd       exo's prefill/decode benchmark (bench/prefill_decode_bench.py): phases prefill_alone,
//	                    disaggregated and decode_alone per prompt and generation length, plus TTFT and
//	                    inter-token latency percentiles, KV bytes and transfer time, and decode isolation
//	duet bench gateway  what the gateway adds to a request and to a stream, against the echo engine
//	duet bench kvwire   goodput of the KV wire against raw TCP, between two hosts or on loopback
//	duet bench load     N concurrent clients with a prompt-length mix for a duration
//
// Every benchmark prints a progress line on a terminal (stderr), a table (stdout), and optionally writes every
// run as JSON (--out) and a chart as SVG (--svg). Measurements are taken on the client side from the
// streamed responses (time to first token, inter-token gaps) and from the `timings` object duet adds to each
// response (where the prompt was prefilled, KV bytes and transfer time).
//
// The package talks to duet only through its public HTTP API, the KV wire (sdk/kvwire) and the engine plugin
// contract (sdk/engine): it is a client, and the local clusters it starts are ordinary duet processes
// (re-executions of the running binary). The models it generates for them are modelgen's presets
// (plugins/mlx-engine/modelgen), the same the engine's own benchmarks use.
package bench
