package toolcall

import (
	"slices"
	"strconv"
	"strings"
)

// CallFormat is how a model family writes tool calls in its output.
type CallFormat uint8

const (
	// CallsNone: the model has no tool-call syntax; everything it writes is content.
	CallsNone CallFormat = iota
	// CallsHermes: Hermes 2/3, Qwen 2.5 and Qwen 3 write each call as
	// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, after optional text.
	CallsHermes
	// CallsQwen3Coder: Qwen3-Coder writes <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
	// </function>\n</tool_call>; the arguments are built from the parameters, typed by the tool's schema.
	CallsQwen3Coder
	// CallsMistral: Mistral writes [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (tokenizers before v11)
	// or [TOOL_CALLS]NAME[ARGS]{...} once per call (v11 and later; also without [ARGS], and with [CALL_ID]ID).
	CallsMistral
	// CallsLlama3: Llama 3.1-3.3 answer with a JSON object {"name": ..., "parameters": {...}} as the whole
	// output (several separated by ";" or newlines), or with <|python_tag|> followed by a JSON call or a
	// built-in tool call such as brave_search.call(query="..."), ended by <|eom_id|> or <|eot_id|>.
	CallsLlama3
	// CallsHarmony: gpt-oss writes OpenAI's harmony format, messages on channels:
	// <|channel|>analysis<|message|>…<|end|> (reasoning), <|start|>assistant<|channel|>final<|message|>…
	// (content), and each call as <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
	// (or with the recipient before the channel: <|start|>assistant to=functions.NAME<|channel|>commentary
	// json<|message|>). Its reasoning format is always ReasoningHarmony.
	CallsHarmony
)

func (c CallFormat) String() string {
	switch c {
	case CallsNone:
		return "none"
	case CallsHermes:
		return "hermes"
	case CallsQwen3Coder:
		return "qwen3_coder"
	case CallsMistral:
		return "mistral"
	case CallsLlama3:
		return "llama3"
	case CallsHarmony:
		return "harmony"
	}
	return "CallFormat(" + strconv.Itoa(int(c)) + ")"
}

// ReasoningFormat is how a model marks its reasoning ("thinking") text.
type ReasoningFormat uint8

const (
	// ReasoningNone: the model does not reason in a marked block.
	ReasoningNone ReasoningFormat = iota
	// ReasoningThink: <think>…</think>, as Qwen 3, QwQ and DeepSeek-R1 write it.
	ReasoningThink
	// ReasoningMistral: [THINK]…[/THINK], as Magistral writes it.
	ReasoningMistral
	// ReasoningHarmony: the harmony format's analysis channel (see CallsHarmony); it has no open and close
	// markers of its own.
	ReasoningHarmony
)

func (r ReasoningFormat) String() string {
	switch r {
	case ReasoningNone:
		return "none"
	case ReasoningThink:
		return "think"
	case ReasoningMistral:
		return "mistral_think"
	case ReasoningHarmony:
		return "harmony"
	}
	return "ReasoningFormat(" + strconv.Itoa(int(r)) + ")"
}

// markers returns the reasoning block's open and close markers.
// Markers are the texts that open and close a reasoning block (empty for ReasoningNone).
func (r ReasoningFormat) Markers() (open, close string) { return r.markers() }

func (r ReasoningFormat) markers() (open, close string) {
	switch r {
	case ReasoningThink:
		return "<think>", "</think>"
	case ReasoningMistral:
		return "[THINK]", "[/THINK]"
	}
	return "", ""
}

// Format is a model's output syntax: its tool calls and its reasoning, which are independent (Qwen 3 has
// both, DeepSeek-R1 only reasoning, Llama 3.1 only tool calls).
type Format struct {
	Calls     CallFormat
	Reasoning ReasoningFormat
}

func (f Format) String() string { return f.Calls.String() + "+" + f.Reasoning.String() }

// The markers that identify a format in a chat template or a vocabulary.
const (
	markToolCall    = "<tool_call>"
	markToolCallEnd = "</tool_call>"
	markFunction    = "<function="
	markFunctionEnd = "</function>"
	markParameter   = "<parameter="
	markParamEnd    = "</parameter>"
	markMistral     = "[TOOL_CALLS]"
	markMistralArgs = "[ARGS]"
	markMistralID   = "[CALL_ID]"
	markPythonTag   = "<|python_tag|>"
	markEOM         = "<|eom_id|>"
	markEOT         = "<|eot_id|>"
	markIPython     = "<|start_header_id|>ipython<|end_header_id|>"
)

// Markers are the texts the parser reads in the format's output. An engine that decodes with special tokens
// skipped must keep the special tokens whose text is one of these (e.g. <|python_tag|>, [TOOL_CALLS]), and
// only those: any other special token is not output.
func (f Format) Markers() []string {
	var m []string
	switch f.Calls {
	case CallsHermes:
		m = append(m, markToolCall, markToolCallEnd)
	case CallsQwen3Coder:
		m = append(m, markToolCall, markToolCallEnd, markFunction, markFunctionEnd, markParameter, markParamEnd)
	case CallsMistral:
		m = append(m, markMistral, markMistralArgs, markMistralID)
	case CallsLlama3:
		m = append(m, markPythonTag, markEOM)
	case CallsHarmony:
		m = append(m, harmonyMarks...)
	}
	if open, closing := f.Reasoning.markers(); open != "" {
		m = append(m, open, closing)
	}
	return m
}

// Detect picks the output format of a model from its chat template source (the chat_template of
// tokenizer_config.json, or chat_template.jinja) and the contents of its added tokens (added_tokens_decoder,
// or the "added_tokens" of tokenizer.json). It looks at what the template makes the model read and write
// (its text less {# comments #}), never at the model's name:
//
//   - Qwen3-Coder: the template writes <function= and <parameter= (checked first: it also writes <tool_call>).
//   - Hermes / Qwen: the template writes <tool_call>.
//   - Mistral: the template writes [TOOL_CALLS].
//   - Llama 3.x: the template writes <|python_tag|> or an ipython header (Llama 3.1, 3.2, 3.3).
//   - Harmony (gpt-oss): the template writes <|channel|> and <|message|>; checked first, and its reasoning is
//     ReasoningHarmony whatever else the template holds. The format holds without tools too: it is how the
//     model writes every answer.
//
// A format whose marker is only in the vocabulary is taken when the template renders tools at all (it mentions
// "tools"), as for a fine-tune that kept the base model's tokens but trimmed the template; a template that never
// shows the model its tools gives CallsNone whatever the vocabulary (Qwen 2.5 base models have <tool_call> in
// their vocabulary and no tool-calling template). Reasoning is read from the template only: <think> or </think>
// gives ReasoningThink, [THINK] or [/THINK] ReasoningMistral. The vocabulary is no evidence of reasoning:
// Qwen3-Coder shares Qwen 3's <think> token and never thinks.
func Detect(chatTemplate string, addedTokens []string) Format {
	chatTemplate = stripComments(chatTemplate)
	has := func(s string) bool { return strings.Contains(chatTemplate, s) }
	inVocab := func(s string) bool { return slices.Contains(addedTokens, s) }
	rendersTools := has("tools")
	var f Format
	if has(markChannel) && has(markMessage) {
		return Format{Calls: CallsHarmony, Reasoning: ReasoningHarmony}
	}
	switch {
	case has(markFunction) && has(markParameter):
		f.Calls = CallsQwen3Coder
	case has(markToolCall) || rendersTools && inVocab(markToolCall):
		f.Calls = CallsHermes
	case has(markMistral) || rendersTools && inVocab(markMistral):
		f.Calls = CallsMistral
	case has(markPythonTag) || has(markIPython) || rendersTools && inVocab(markPythonTag):
		f.Calls = CallsLlama3
	}
	switch {
	case has("<think>") || has("</think>"):
		f.Reasoning = ReasoningThink
	case has("[THINK]") || has("[/THINK]"):
		f.Reasoning = ReasoningMistral
	}
	return f
}

// stripComments removes the template's {# comments #}, which the model never sees.
func stripComments(tmpl string) string {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "{#")
		if i < 0 {
			break
		}
		j := strings.Index(tmpl[i+2:], "#}")
		if j < 0 {
			break
		}
		b.WriteString(tmpl[:i])
		tmpl = tmpl[i+2+j+2:]
	}
	b.WriteString(tmpl)
	return b.String()
}

// OpensReasoning reports whether a rendered prompt leaves the model inside a reasoning block: it ends, but for
// whitespace, with the open marker. Qwen3 thinking models and DeepSeek-R1 put "<think>\n" in the generation
// prompt, so their output starts with reasoning text and has only the close marker; pass the answer as
// Options.StartInReasoning. Qwen 3 with enable_thinking=false ends its prompt with "<think>\n\n</think>\n\n",
// which is a closed block, so it reports false.
func (f Format) OpensReasoning(prompt string) bool {
	open, _ := f.Reasoning.markers()
	return open != "" && strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), open)
}
