// Package anthropic is Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens) over the
// gateway's pipeline: its routes (routes.go) parse request bodies into engine messages, tools and sampling,
// and its Dialect renders engine events as a message object, the server-sent events of a stream
// (message_start, content_block_start/delta/stop, message_delta, message_stop, ping) and errors in
// Anthropic's envelope (for every path under /v1/messages, also those refused before a handler runs).
//
// A request comes here from the server's middleware (package server), once it is authenticated and its body
// read; a generation goes to the pipeline (apicore.Pipeline) as an apicore.Call, a token count as an
// apicore.TokenCount, which the pipeline counts on an instance of the model here or on another node. The
// conversion is pure, with no I/O, as package openai's is for OpenAI's API, and it shares package apicore's
// validation (sampling bounds, tool definitions, tool choice, JSON schemas) and canonical API error, so a
// bound or a default is the same whichever API a client speaks; only the field names and the envelope
// differ. Everything between parsing and rendering (routing, forwarding, admission, streaming) is the
// pipeline's, shared by every API.
//
// Where the engine contract cannot say what Anthropic's API does, this package chooses, and says so here:
//
//   - stop_reason "stop_sequence" is never sent. A Final says only that the output stopped (end of sequence
//     or a stop string) and the stop string itself is not in the output, so nothing tells which stop
//     sequence matched, or whether one did; the answer says "end_turn" with stop_sequence null rather than
//     guess.
//   - A thinking block's signature is not a proof: it is a hash of the thinking text, so clients that
//     require the field have one and send it back; the gateway never checks it (the thinking of an
//     assistant turn goes to the engine as Message.Reasoning whatever its signature).
//   - usage.input_tokens counts the prompt tokens the engine computed and cache_read_input_tokens those it
//     took from its prefix cache, as Anthropic splits them; cache_creation_input_tokens is always 0 (the
//     prefix cache is automatic, cache_control is ignored).
//   - A tool_result with is_error true reaches the model as its text prefixed "Error: ": the engine
//     contract's tool message has no error flag, and the model must not take a failure for a result.
//   - thinking.budget_tokens is checked as Anthropic checks it but not enforced: engines have no thinking
//     budget; max_tokens bounds thinking and answer together.
//   - A request without thinking turns thinking off (template variable enable_thinking false), as Claude
//     does not think unless asked. thinking "adaptive" (Claude Code's) turns it on unless output_config.effort
//     is "low": the template's switch is the only knob an engine has.
//   - A system message inside messages (Claude Code sends its environment as one) stays where it is, for the
//     chat template to place; the top-level system comes first.
//   - A tool with defer_loading is left out of what the model sees: it waits for a tool search, which this
//     server does not run.
//   - context_management: clear_thinking_20251015 is applied (the thinking of older assistant turns is
//     dropped, keep as sent); clear_tool_uses_20250919 is accepted and not applied (its threshold, 100k input
//     tokens by default, is past the context of the models duet serves).
//   - Images and documents, in any message or tool result, are refused: the engine contract carries text only.
package anthropic
