// Package openai converts between the OpenAI HTTP API and the engine contract: it parses and validates request
// bodies into engine.GenerateRequest values, and renders engine events as OpenAI responses, stream chunks and
// error envelopes. It is pure conversion, with no I/O, so every rule is a table test on JSON bodies.
package openai
