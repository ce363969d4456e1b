// Package server is the gateway's HTTP side: the OpenAI-compatible API, health and admin endpoints on gofiber
// v2, with API keys, request ids, body limits, timeouts, admission control, and the glue from a request to a
// routing decision and an engine generation. Client disconnects cancel generations: a watcher reads the
// connection while a request runs, so even a long prefill learns at once that nobody is waiting.
package server
