package server

import (
	"strings"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// A dialect renders generations and errors in one client API's shapes: OpenAI chat completions and
// completions, OpenAI Responses, Anthropic Messages, Ollama. Each API parses its requests into the engine
// contract; everything between parsing and rendering (routing, forwarding, admission, the engine, the
// mechanics of streaming) is shared, so every API gets the same routing, P/D and limits.
type dialect interface {
	// answer renders a whole non-streamed answer.
	answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte
	// encoder starts rendering a stream of a generation of n choices.
	encoder(m apicore.Meta, n int) encoder
	// streamType is the Content-Type of a stream.
	streamType() string
	// errorBody renders an error in the API's envelope, with the status to send it with.
	errorBody(dst []byte, e *apicore.Error) (status int, body []byte)
}

// An encoder renders one stream, event by event. It is used by one goroutine.
type encoder interface {
	// start is what the stream says before its first event (nothing, for OpenAI chat).
	start(dst []byte) []byte
	// event renders a token (or progress, which most APIs do not show).
	event(dst []byte, ev engine.Event) []byte
	// final renders the end of a choice, which ended without an error; over says the stream is complete.
	final(dst []byte, choice int, f *engine.Final) (out []byte, over bool)
	// fail renders an error that ends the stream.
	fail(dst []byte, e *apicore.Error) []byte
	// heartbeat keeps an idle stream open through proxies.
	heartbeat(dst []byte) []byte
}

// dialectForPath picks the dialect of errors raised before a handler knows its request, e.g. by
// authentication: the API the path belongs to. OpenAI's Responses API shares chat's error envelope.
func dialectForPath(path string) dialect {
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		if d := anthropicErrors(); d != nil {
			return d
		}
	case strings.HasPrefix(path, "/api/"):
		if d := ollamaErrors(); d != nil {
			return d
		}
	}
	return openaiChat{}
}

// openaiChat is /v1/chat/completions.
type openaiChat struct {
	usage    bool // stream_options.include_usage
	logprobs bool
}

func (d openaiChat) answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return openai.AppendChatCompletion(dst, m, rs, d.logprobs)
}

func (openaiChat) streamType() string { return "text/event-stream" }

func (openaiChat) errorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d openaiChat) encoder(m apicore.Meta, n int) encoder {
	return &openaiEncoder{meta: openai.WithChunkHead(m, "chat.completion.chunk"), usage: d.usage, logprobs: d.logprobs, choices: make([]openaiChoice, max(n, 1)), object: "chat.completion.chunk"}
}

// openaiCompletions is /v1/completions.
type openaiCompletions struct {
	usage    bool
	logprobs bool
}

func (d openaiCompletions) answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return openai.AppendCompletion(dst, m, rs, d.logprobs)
}

func (openaiCompletions) streamType() string { return "text/event-stream" }

func (openaiCompletions) errorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d openaiCompletions) encoder(m apicore.Meta, n int) encoder {
	return &openaiEncoder{meta: openai.WithChunkHead(m, "text_completion"), usage: d.usage, logprobs: d.logprobs, choices: make([]openaiChoice, max(n, 1)), object: "text_completion", legacy: true}
}

// openaiEncoder streams chat.completion.chunk or text_completion objects as server-sent events, ending with
// a usage chunk (include_usage) and [DONE].
type openaiEncoder struct {
	meta     openai.ChunkMeta
	usage    bool
	logprobs bool
	legacy   bool
	object   string
	choices  []openaiChoice
	finals   int
}

type openaiChoice struct {
	textOffset int
	sentRole   bool
	final      *engine.Final
}

func (e *openaiEncoder) start(dst []byte) []byte     { return dst }
func (e *openaiEncoder) heartbeat(dst []byte) []byte { return append(dst, ": keep-alive\n\n"...) }

func (e *openaiEncoder) fail(dst []byte, err *apicore.Error) []byte {
	dst = append(dst, "data: "...)
	dst = err.AppendEnvelope(dst)
	return append(dst, "\n\n"...)
}

func (e *openaiEncoder) choice(i int) *openaiChoice {
	if i < 0 || i >= len(e.choices) {
		return &e.choices[0]
	}
	return &e.choices[i]
}

func (e *openaiEncoder) event(dst []byte, ev engine.Event) []byte {
	c := e.choice(ev.Choice)
	role := !e.legacy && !c.sentRole
	tok := ev.Token
	if tok == nil && !role {
		return dst // progress events have no OpenAI form
	}
	c.sentRole = true
	var text, reasoning string
	var calls []engine.ToolCallDelta
	var lps []engine.Logprob
	if tok != nil {
		text, reasoning, calls = tok.Text, tok.Reasoning, tok.ToolCalls
		if e.logprobs && tok.Logprob != nil {
			lps = []engine.Logprob{*tok.Logprob}
		}
		if text == "" && reasoning == "" && len(calls) == 0 && lps == nil && !role {
			return dst // held-back bytes: nothing to say yet
		}
	}
	dst = append(dst, "data: "...)
	if e.legacy {
		dst = openai.AppendCompletionChunk(dst, e.meta, openai.CompletionChunk{Text: text, Logprobs: lps, TextOffset: c.textOffset, UsageNull: e.usage})
	} else {
		dst = openai.AppendChatChunk(dst, e.meta, openai.ChatChunk{Index: ev.Choice, Role: role, Content: text,
			Reasoning: reasoning, ToolCalls: calls, Logprobs: lps, UsageNull: e.usage})
	}
	c.textOffset += len(text)
	return append(dst, "\n\n"...)
}

func (e *openaiEncoder) final(dst []byte, choice int, f *engine.Final) ([]byte, bool) {
	c := e.choice(choice)
	if c.final == nil {
		c.final = f
		e.finals++
	}
	if f.Text != "" || f.Reasoning != "" {
		dst = e.event(dst, engine.Event{Choice: choice, Token: &engine.Token{Text: f.Text, Reasoning: f.Reasoning}})
	}
	dst = append(dst, "data: "...)
	if e.legacy {
		dst = openai.AppendCompletionChunk(dst, e.meta, openai.CompletionChunk{Finish: f, UsageNull: e.usage})
	} else {
		dst = openai.AppendChatChunk(dst, e.meta, openai.ChatChunk{Index: choice, Finish: f, UsageNull: e.usage})
	}
	dst = append(dst, "\n\n"...)
	if e.finals < len(e.choices) {
		return dst, false
	}
	if e.usage {
		rs := make(apicore.Results, len(e.choices))
		for i := range e.choices {
			rs[i] = &apicore.Result{Final: e.choices[i].final}
		}
		dst = append(dst, "data: "...)
		dst = openai.AppendUsageChunk(dst, e.object, e.meta, rs.Usage())
		dst = append(dst, "\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...), true
}
