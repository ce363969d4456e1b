// Package pipeline is the gateway's request path: it takes a generation that a client API parsed, decides
// where it runs, runs it on this node's engine plugin or forwards it to the gateway of the node that runs it,
// and renders the answer in the client's dialect, whole or streamed.
//
// # Where a request comes from
//
// A request reaches a client API's handler (packages openai, responses, anthropic, ollama) after the server's
// middleware (package server) has given it an id, authenticated it (a key, or a hop's proof from another
// gateway) and read its body within the body budget. The handler parses the body in its API's terms and hands
// the pipeline an apicore.Call, with the apicore.Dialect its answer is rendered in, through the
// apicore.Pipeline interface that *Pipeline satisfies. What the middleware left on the request (its id, a
// hop's pinned route and keep-alive interval, the release of its body) the pipeline reads through package
// locals; it knows nothing else of the server.
//
// # The stages
//
// One request value (pipeline.go) goes through the stages in order; each fills in its part:
//
//	parse    stage_parse.go   Serve takes the API's Call; RefuseOverlong refuses a prompt that cannot fit
//	                          any instance's context before the API parses it
//	place    stage_place.go   where it runs: the router's decision on the node's snapshot of the cluster,
//	                          or the decision a hop carries pinned from the gateway it entered
//	forward  stage_forward.go to the gateway of the node that runs it (package forward), passed through as
//	                          it comes; an owner that fails before answering is retried once on the
//	                          router's next candidate
//	run      stage_run.go     on this node's engine plugin (through package node) under admission control
//	                          (limiter.go), streamed through the run queue (run.go)
//	render   stage_render.go  the engine's events in the call's dialect: one answer, or a stream whose
//	                          writer takes the request over once the response is committed
//
// A client that leaves cancels its generation: the disconnect watch (watch.go) reads the connection while
// the request runs, so even a long prefill learns at once that nobody is waiting. Anthropic's count_tokens
// goes the same way in small (tokens.go): counted by a local instance of the model, or by another node's
// gateway.
//
// # Observers
//
// What watches a request is an observer, told of its lifecycle (decided, first token, every token, a
// choice's final, finished; observe.go); none of them owns the request. They are the recent ring the
// dashboard lists (recent.go, recent_forward.go for what a forwarded answer says of the owner's timings),
// the metrics and the trace (observe.go), and the speed book that routers deciding by time read
// (observe_speed.go).
//
// # Where it goes next
//
// A request placed on this node goes to the engine plugin through the node's engine provider
// (node.EngineProvider), which speaks the plugin protocol (sdk/engine). A request placed on another node goes
// to that node's gateway as a hop (forward.Client), with the decision pinned, where it enters that gateway's
// pipeline and is run there; a hop is never forwarded again.
//
// The server builds the pipeline once (New, with Config and Deps), hands it to every client API's routes, and
// reads what the dashboard and the admin status show of it: the recent ring (Recent) and admission (Limiter).
// The stage tests build a Pipeline from fakes and run without the binary.
package pipeline
