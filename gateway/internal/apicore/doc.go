// Package apicore is the core every client API shares: the API error and its envelope (Error, BadRequest,
// FromEngine, ...), the validation of what the APIs have in common (Sampling, Tools, ToolChoice,
// JSONSchemaFormat, ReasoningEffort, Decode), the accumulated results of a generation (Results, FinalError),
// what every response of one request repeats and where it ran (Meta, Route, AppendTimings), and the JSON
// writer the renderers' hot paths use (AppendString, ...). It is pure conversion, with no I/O.
//
// Its users are the API dialects, packages openai, responses, anthropic and ollama, each of which parses its
// own request bodies and renders its own responses with these parts, and package server, which runs a
// request: the server's handler reads an authenticated body and hands it to a dialect's parser, which
// validates it here into an engine.GenerateRequest; that goes on to the router (where it runs) and the
// engine plugin (the generation), whose events are gathered here (Results) or streamed, and rendered back
// by the dialect. Errors are rendered in OpenAI's envelope (AppendEnvelope) unless a dialect has its own.
package apicore
