// Package openai converts between OpenAI's chat completions and completions APIs and the engine contract: it
// parses and validates request bodies into engine.GenerateRequest values, and renders engine events as OpenAI
// responses and stream chunks. It is pure conversion, with no I/O, so every rule is a table test on JSON bodies.
//
// A request comes here from the server's handler (package server), once it is authenticated and its body
// read; what it parses goes on to the router (where it runs) and the engine plugin (the generation), and the
// events that come back are rendered here, streamed or whole. What every API shares (the error envelope, the
// validation of sampling and tools, results, route metadata, the JSON writer) is package apicore's.
package openai
