// Package apicore is the core every client API shares: the API error and its envelope (Error, BadRequest,
// FromEngine, ...), the validation of what the APIs have in common (Sampling, Tools, ToolChoice,
// JSONSchemaFormat, ReasoningEffort, Decode), the accumulated results of a generation (Results, FinalError),
// what every response of one request repeats and where it ran (Meta, Route, AppendTimings), any error as a
// client sees it (ErrorOf), the JSON writer the renderers' hot paths use (AppendString, ...), and the
// contract between an API and the request pipeline (pipeline.go: Dialect, Encoder, Call, TokenCount,
// Pipeline). Besides that contract's and ErrorOf's mention of fiber, it is pure conversion, with no I/O.
//
// Its users are the client APIs, packages openai, responses, anthropic and ollama, each of which registers
// its own routes, parses its own request bodies and renders its own responses with these parts; package
// pipeline, which runs a request; and package server, which authenticates a request, reads its body and
// renders every error it meets (ErrorOf). The API's handler validates a request here into an
// engine.GenerateRequest and hands it to the pipeline as a Call, with its Dialect; that goes on to the router (where it runs) and the engine plugin (the generation), whose events
// are gathered here (Results) or streamed, and rendered back by the Dialect. Errors are rendered in OpenAI's
// envelope (AppendEnvelope) unless a dialect has its own.
package apicore
