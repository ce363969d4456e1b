// Package toolcall splits a model's generated text, as it streams, into the three channels of OpenAI's chat API:
// content (message.content), reasoning (message.reasoning_content) and tool calls (message.tool_calls[], each
// with an id, type "function", and function {name, arguments} where arguments is JSON text).
//
// Models write tool calls and reasoning as plain text with markers, in a syntax their family was trained on;
// Detect reads which from the model's chat template and added tokens, and a Parser follows it:
//
//	f := toolcall.Detect(chatTemplateSource, addedTokens)        // once per model
//	p, err := toolcall.NewParser(f, toolcall.Options{            // once per request
//		Tools:            tools,                                  // toolcall.ParseTools(request.Tools)
//		StartInReasoning: f.OpensReasoning(renderedPrompt),
//	})
//	for each token { deltas := p.Feed(tokenText) ... }            // stream deltas to the client
//	result, deltas, err := p.Finish()                             // the last deltas, the whole message, call errors
//
// # Formats
//
// Detect recognizes (see CallFormat and ReasoningFormat for each syntax):
//
//   - CallsHermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes 2/3, Qwen 2.5, Qwen 3)
//   - CallsQwen3Coder: <tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>
//   - CallsMistral: [TOOL_CALLS][{...}, ...] and [TOOL_CALLS]NAME[ARGS]{...}
//   - CallsLlama3: a JSON object {"name": ..., "parameters": {...}} as the whole output, and
//     <|python_tag|> calls (JSON, NAME.call(key=value, ...) for built-in tools, or code)
//   - ReasoningThink: <think>…</think> (Qwen 3, QwQ, DeepSeek-R1); ReasoningMistral: [THINK]…[/THINK] (Magistral)
//   - CallsHarmony + ReasoningHarmony: OpenAI's harmony format (gpt-oss), below
//
// A <tool_call> block may hold either body, JSON or <function=…>, whichever of the two formats was detected.
// Reasoning is independent of the call format. When a template's generation prompt opens the reasoning block
// itself (DeepSeek-R1, Qwen3 thinking models), the output starts inside it: Format.OpensReasoning tells from
// the rendered prompt, and Options.StartInReasoning passes it on.
//
// # Harmony
//
// gpt-oss writes every answer as messages on channels: a header, <|message|>, a body, and an end. The prompt
// ends with <|start|>assistant, so the output starts inside the first header. A header holds the channel
// (<|channel|>analysis, final or commentary), optionally a recipient (to=functions.NAME, before or after the
// channel) and a content type (<|constrain|>json, or json). Bodies go to:
//
//   - analysis: reasoning (several analysis messages are concatenated, each trimmed of whitespace);
//   - a recipient: a tool call named by the recipient less "functions."; the body is the arguments (one JSON
//     value, streamed compact when it is an object). A recipient outside functions (browser.search, python:
//     the built-in tools) is ErrUnknownTool. Without tools the body is content;
//   - final, commentary without a recipient (a preamble), no channel: content, byte for byte.
//
// A body ends at <|end|> (then <|start|> opens the next header), <|call|>, <|return|>, or the end of the
// output (the engine stops at <|call|> and <|return|> without feeding them); a new <|start|> or <|channel|>
// without an end also ends it. Text that cannot be a header (the model wrote plain text, a header never
// reached <|message|> within a bound, or a message end came first) is content, less its markers: no marker
// ever reaches content or reasoning, and no text is lost.
//
// # What the engine feeds
//
// The markers are special tokens of the vocabulary: the engine must decode them as text (the tokenizer's
// NewStream(false), not skipping special tokens) when a format is in use, and stop at the end-of-turn token
// without feeding it (<|im_end|>, <|eot_id|>, </s>). Feed takes text in any pieces: a marker may arrive split
// over many tokens, and a piece may end inside a multi-byte character (the deltas then split it the same way).
//
// # Streaming
//
// Text that could be the start of a marker is held back until it is a marker or cannot be one, as
// sdk/stopstring holds back stop strings, so no part of a marker ever reaches content or reasoning, however the
// text is split; everything else is released at once. Concatenated, the deltas of Feed and Finish are the
// Result, and a text gives the same Result whatever its pieces (the tests feed every output split at every
// byte).
//
// Whitespace next to markers is the template's layout, not the model's answer: reasoning loses the whitespace
// at its start and end; content loses the whitespace right before a tool call, and the whitespace after a
// reasoning block or a call until text follows (whitespace between earlier content and later text is kept).
// Output without markers is passed through byte for byte.
//
// Each call's CallStart delta (index, id, name) comes as soon as the name is known and is one of the request's
// tools; its arguments follow as CallArguments fragments, which concatenated are Call.Arguments:
//
//   - JSON bodies stream as they arrive, as compact JSON (whitespace outside strings removed, everything else
//     byte for byte, members in the model's order): what json.Compact gives of the model's object. Arguments
//     written before the name wait for it. Arguments written as a JSON string of the object (some models do)
//     are decoded, compacted and emitted when the string ends; null is {}.
//   - Qwen3-Coder parameters are emitted one at a time as each one closes: `{"city":"Paris"`, `,"unit":...`,
//     then `}`. A value loses one newline at each end (the template writes values on lines of their own) and
//     is typed by the parameter's schema: one whose type admits a string stays a string ("02134" for a zip
//     code); one whose type does not is read as JSON (True, False and None also as Python writes them) when
//     that gives an allowed type, and is otherwise kept as a string for the schema check to report; a
//     parameter the schema does not declare is a string. "null" is null where the type admits null. A missing
//     </parameter> before the next <parameter= or </function> is forgiven, as vLLM forgives it, and so are a
//     missing </function> or </parameter> right before </tool_call>; a parameter given twice is malformed.
//   - Llama 3 <|python_tag|> built-in calls and code are emitted whole, at <|eom_id|>, <|eot_id|> or the end.
//   - A Llama 3 JSON object at the start of the output is held back until its first member shows it is a call
//     ("name", "parameters", "arguments", or "type": "function"); otherwise it is content.
//
// Calls get indices 0, 1, 2, ... in the order the model writes them, and ids from Options.NewID (default:
// random "call_" and 24 letters and digits; 9 letters and digits for Mistral, whose templates reject any other
// id when the call comes back in the conversation; NewIDs gives a seeded generator for tests).
//
// # Errors
//
// A call that cannot be used is reported as a *CallError carrying its index, name and the model's text, with
// Kind (and errors.Is) one of:
//
//   - ErrMalformed: not the format's syntax (bad JSON, no name, an unexpected tag); parsing resumes after
//     the </tool_call> of a block, or at the next [TOOL_CALLS] or <|python_tag|>, so later calls still count.
//   - ErrUnknownTool: a name the request did not offer; the call emits no delta at all.
//   - ErrInvalidArguments: JSON that the tool's parameters schema rejects. The schema check is a subset of JSON
//     Schema written here (no validator is a dependency): type, properties, required, enum, const,
//     additionalProperties (false or a schema) and items; other keywords are not checked.
//   - ErrTruncated: the output ended inside the call (max_tokens, a stop string).
//
// Arguments are checked when the call ends, so a call with invalid or malformed arguments has streamed its
// deltas by then; Parser.Err reports errors as soon as they are found, for an engine that stops generating
// early. Finish returns all of them (one *CallError, or several joined). The engine decides what the client
// sees; the intent is an error for the first three kinds (the model's output is not a valid answer to the
// request) and, for ErrTruncated, finish_reason "length" with the call as streamed (it stays in Result.Calls
// with the arguments that arrived; a call cut before its name emitted nothing). A Llama 3 object cut before its
// first member is content, as it would be if it were not a call.
//
// Without tools (Options.Tools empty, as for tool_choice "none"), tool-call markers are ordinary content, as
// vLLM returns them: the model was offered no tool, so what it wrote is its answer. Reasoning is still parsed.
package toolcall
