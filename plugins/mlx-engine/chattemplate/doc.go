// Package chattemplate renders a model's chat template: the Jinja program in tokenizer_config.json (or
// chat_template.jinja) that turns a list of messages into the exact prompt text the model was trained on,
// with its special tokens, system prompt layout and assistant header.
//
// Why it matters: a prompt that differs from the training format by one newline degrades answers silently, so
// the tests render a set of conversations (system prompts, multi-turn, tool calls, thinking, unicode, errors)
// with the Llama 2, Llama 3, Qwen 3 and Gemma 3 templates and duet's harmony template and compare byte for byte
// with @huggingface/jinja, the engine transformers.js uses; the harmony template's output is also checked, text
// and token ids, against OpenAI's harmony renderer (npm openai-harmony).
//
// The Jinja engine is github.com/ardanlabs/jinja (v1.8.0, pure Go). It renders these templates identically
// except for tojson with indent (Llama 3.1 renders tools with tojson(indent=4)), where it sorts keys and
// escapes HTML. Its filters cannot be replaced, so Parse renames tojson in the template source and Render
// supplies our own, which writes JSON like Python's json.dumps(ensure_ascii=False): keys in the order the
// client sent them, which is why messages' extra fields and tools are passed as raw JSON.
//
// Templates see the variables transformers passes: messages, add_generation_prompt, tools (none unless given),
// documents (none), bos_token and eos_token, the functions raise_exception and strftime_now, and any extra
// variables of Input.Vars (enable_thinking, date_string, ...). A template that calls raise_exception fails
// with a *RaiseError carrying its message, one that does not compile with a *ParseError.
//
// One known difference from @huggingface/jinja is kept on purpose: the length of a string counts characters,
// as Python does, not UTF-16 units as JavaScript does.
package chattemplate
