// Package openai converts between the OpenAI HTTP API and the engine contract: it parses and validates request
// bodies into engine.GenerateRequest values, and renders engine events as OpenAI responses, stream chunks and
// error envelopes. It is pure conversion, with no I/O, so every rule is a table test on JSON bodies.
//
// A request comes here from the server's handler (package server), once it is authenticated and its body
// read; what it parses goes on to the router (where it runs) and the engine plugin (the generation), and the
// events that come back are rendered here, streamed or whole. The other APIs (responses, anthropic, ollama)
// share its validators and its error envelope.
package openai
