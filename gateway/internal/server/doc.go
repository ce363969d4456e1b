// Package server is the gateway's HTTP side: the OpenAI-compatible API, health and admin endpoints on gofiber
// v2, with API keys, request ids, body limits, timeouts, admission control, and the glue from a request to a
// routing decision and an engine generation.
//
// A request comes from a client (or from another gateway, as a hop proved with the cluster secret) through
// the middleware of server.go (request id, access log, authentication, the body budget). Its handler parses
// it in its dialect (openai, responses, anthropic, ollama), asks the router where it runs (route.go, with the
// node's snapshot of the cluster), and then either forwards it to the owner's gateway (proxy.go, package
// forward) or runs it on the local engine plugin (generate.go, run.go); the events that come back are
// rendered in the client's dialect, streamed or whole. What the server runs on besides its own parts (the
// instances, the cluster, the engine, the router, the hop client) it gets from the gateway's node (package
// node) through the Node interface.
//
// Client disconnects cancel generations: a watcher reads the connection while a request runs, so even a long
// prefill learns at once that nobody is waiting.
package server
