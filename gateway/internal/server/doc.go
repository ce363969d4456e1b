// Package server is the gateway's HTTP side: the OpenAI-compatible API, health and admin endpoints on gofiber
// v2, with API keys, request ids, body limits, timeouts, admission control, and the glue from a request to a
// routing decision and an engine generation.
//
// A request comes from a client (or from another gateway, as a hop proved with the cluster secret) through
// the middleware of server.go (request id, access log, authentication, the body budget). The request path is
// a pipeline of stages over one request value (pipeline.go): parse, in its dialect (stage_parse.go and the
// api_*.go adapters for responses, anthropic and ollama); place, by the router with the node's snapshot of the
// cluster (stage_place.go); then forward to the owner's gateway (stage_forward.go, package forward) or run on
// the local engine plugin (stage_run.go, run.go); and render the events in the client's dialect, streamed or
// whole (stage_render.go). The dashboard's recent list, the metrics, the traces and the speed book watch each
// request as observers of its lifecycle (observe.go). What the server runs on besides its own parts (the
// instances, the cluster, the engine, the router, the hop client) it gets from the gateway's node (package
// node) through the Node interface.
//
// Client disconnects cancel generations: a watcher reads the connection while a request runs, so even a long
// prefill learns at once that nobody is waiting.
package server
