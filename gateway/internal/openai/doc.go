// Package openai is OpenAI's chat completions and completions APIs (POST /v1/chat/completions,
// /v1/completions) over the gateway's pipeline: its routes (routes.go), the conversion of request bodies into
// engine.GenerateRequest values, and the dialects (dialect.go) that render engine events as OpenAI responses
// and stream chunks. The conversion is pure, with no I/O, so every rule is a table test on JSON bodies.
//
// A request comes here from the server's middleware (package server), once it is authenticated and its body
// read. A prompt that cannot fit any instance's context is refused before the body is parsed (ScanPrompt,
// RefuseOverlong: Anthropic's and Ollama's handlers use them too); what the handler parses goes to the
// pipeline (apicore.Pipeline) as an apicore.Call, on to the router (where it runs) and the engine plugin (the
// generation), and the events that come back are rendered by the call's dialect, streamed or whole.
// ChatDialect also renders the errors of every path that belongs to no other API. What every API shares (the
// error envelope, the validation of sampling and tools, results, route metadata, the JSON writer, the
// contract with the pipeline) is package apicore's.
package openai
