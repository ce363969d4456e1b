// Package ollama is Ollama's wire protocol (/api/chat, /api/generate, /api/tags, /api/show, /api/ps,
// /api/version) in the engine contract's terms: its routes (routes.go), and pure conversion functions from
// request bodies to engine requests, and from engine events and model descriptions to Ollama's bodies. Apps that speak Ollama
// (Open WebUI, Continue, Raycast, the ollama npm and Python clients) then run on duet's engines, routing
// and P/D unchanged.
//
// What Ollama and OpenAI share is validated once, in package apicore (sampling bounds, tool definitions,
// JSON schema formats), with errors naming Ollama's own fields ("options.num_predict"). Errors render as
// Ollama renders them: {"error": "message"} with the status, and as a last NDJSON line when a stream fails
// after it started.
//
// Ollama differs from OpenAI in ways clients depend on: streaming is the default (NDJSON, one object a
// line, the last with "done": true and the timings in nanoseconds); a tool call arrives whole, its
// arguments an object, never in fragments; a model is named "name:tag", so "echo" is listed as
// "echo:latest" and both names reach it.
//
// A request comes here from the server's middleware on /api (package server), once it is authenticated and
// its body read; a generation goes the way of every API's, to the pipeline (apicore.Pipeline) as an
// apicore.Call, on to the router and the engine plugin, and the events that come back are rendered by its
// Dialect, which also renders the errors of every path under /api. The model endpoints read the whole
// cluster's models from the gateway through Options.
package ollama
