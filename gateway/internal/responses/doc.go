// Package responses speaks OpenAI's Responses API (POST /v1/responses): its routes (routes.go) parse a request
// into the engine contract and render the answer as a response object, or as the stream of typed events
// OpenAI sends.
//
// A request comes here from the server's middleware (package server), once it is authenticated and its body
// read; the parsed request goes to the pipeline (apicore.Pipeline) as an apicore.Call, whose Dialect renders
// what the engine generates. Routing, forwarding, admission and the engine call are the pipeline's, the same
// as for chat completions. The conversion is pure, with no I/O; it uses package apicore's validators
// (sampling, tools, tool choice, JSON schema formats, reasoning effort) and shares OpenAI's error envelope,
// so a bound or a default is the same whichever API a client speaks.
//
// The request: instructions become a system message first; input is a string or a list of items. Messages
// (user, assistant, system, developer) carry text; function_call and custom_tool_call items join the assistant
// message of their turn as tool calls, their outputs become tool messages, and reasoning items become the
// reasoning of the assistant message that follows them. Images, files and audio are 400s: duet serves text
// models. tools (and the tools of additional_tools input items, where Codex puts them for some models) are
// functions (strict unless the client says otherwise, as OpenAI's default is), namespaces of functions,
// custom tools of free-form input, or OpenAI's hosted tools, which duet cannot run and leaves out (tools.go
// says how each becomes what the model sees). text.format is text, json_object or json_schema;
// reasoning.effort turns thinking on or off. prompt_cache_key is a routing hint: the server keeps the turns
// of one key on the instance that holds their prefix.
//
// The answer: output items (reasoning, the message, function calls, custom tool calls) with ids made from the
// response's (rs_, msg_, fc_), usage with cached and reasoning tokens, and duet's timings as an extension
// field. A stream renders the items event by event as the model writes them; when it writes them in that
// order, as models do, its last event holds the response object of the whole answer, byte for byte. When the
// request asks for a reasoning summary, the reasoning is its own summary; when it includes
// reasoning.encrypted_content, the reasoning is also sealed into it (seal.go), so that a client that keeps
// no state with the server (as Codex does) gives the model its reasoning back on the next turn.
//
// duet keeps no state between requests: a client sends the whole conversation as input (store false), and
// what would need a stored response (previous_response_id, store true, conversation, background,
// GET /v1/responses/{id}) is refused with an error saying so.
package responses
