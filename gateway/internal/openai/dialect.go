package openai

import (
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// ChatDialect renders /v1/chat/completions: a chat.completion, or a stream of chat.completion.chunk objects.
// Its errors are OpenAI's envelope, as are those of every path that belongs to no other API.
type ChatDialect struct {
	Usage    bool // stream_options.include_usage
	Logprobs bool
}

var (
	_ apicore.Dialect = ChatDialect{}
	_ apicore.Dialect = CompletionsDialect{}
	_ apicore.Encoder = (*streamEncoder)(nil)
)

func (d ChatDialect) Answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return AppendChatCompletion(dst, m, rs, d.Logprobs)
}

func (ChatDialect) StreamType() string { return "text/event-stream" }

func (ChatDialect) ErrorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d ChatDialect) Encoder(m apicore.Meta, n int) apicore.Encoder {
	return &streamEncoder{meta: WithChunkHead(m, "chat.completion.chunk"), usage: d.Usage, logprobs: d.Logprobs, choices: make([]streamChoice, max(n, 1)), object: "chat.completion.chunk"}
}

// CompletionsDialect renders /v1/completions: a text_completion, or a stream of them.
type CompletionsDialect struct {
	Usage    bool // stream_options.include_usage
	Logprobs bool
}

func (d CompletionsDialect) Answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return AppendCompletion(dst, m, rs, d.Logprobs)
}

func (CompletionsDialect) StreamType() string { return "text/event-stream" }

func (CompletionsDialect) ErrorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d CompletionsDialect) Encoder(m apicore.Meta, n int) apicore.Encoder {
	return &streamEncoder{meta: WithChunkHead(m, "text_completion"), usage: d.Usage, logprobs: d.Logprobs, choices: make([]streamChoice, max(n, 1)), object: "text_completion", legacy: true}
}

// streamEncoder streams chat.completion.chunk or text_completion objects as server-sent events, ending with
// a usage chunk (include_usage) and [DONE].
type streamEncoder struct {
	meta     ChunkMeta
	usage    bool
	logprobs bool
	legacy   bool
	object   string
	choices  []streamChoice
	finals   int
}

type streamChoice struct {
	textOffset int
	sentRole   bool
	final      *engine.Final
}

func (e *streamEncoder) Start(dst []byte) []byte     { return dst }
func (e *streamEncoder) Heartbeat(dst []byte) []byte { return append(dst, ": keep-alive\n\n"...) }

func (e *streamEncoder) Fail(dst []byte, err *apicore.Error) []byte {
	dst = append(dst, "data: "...)
	dst = err.AppendEnvelope(dst)
	return append(dst, "\n\n"...)
}

func (e *streamEncoder) choice(i int) *streamChoice {
	if i < 0 || i >= len(e.choices) {
		return &e.choices[0]
	}
	return &e.choices[i]
}

func (e *streamEncoder) Event(dst []byte, ev engine.Event) []byte {
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
		dst = AppendCompletionChunk(dst, e.meta, CompletionChunk{Text: text, Logprobs: lps, TextOffset: c.textOffset, UsageNull: e.usage})
	} else {
		dst = AppendChatChunk(dst, e.meta, ChatChunk{Index: ev.Choice, Role: role, Content: text,
			Reasoning: reasoning, ToolCalls: calls, Logprobs: lps, UsageNull: e.usage})
	}
	c.textOffset += len(text)
	return append(dst, "\n\n"...)
}

func (e *streamEncoder) Final(dst []byte, choice int, f *engine.Final) ([]byte, bool) {
	c := e.choice(choice)
	if c.final == nil {
		c.final = f
		e.finals++
	}
	if f.Text != "" || f.Reasoning != "" {
		dst = e.Event(dst, engine.Event{Choice: choice, Token: &engine.Token{Text: f.Text, Reasoning: f.Reasoning}})
	}
	dst = append(dst, "data: "...)
	if e.legacy {
		dst = AppendCompletionChunk(dst, e.meta, CompletionChunk{Finish: f, UsageNull: e.usage})
	} else {
		dst = AppendChatChunk(dst, e.meta, ChatChunk{Index: choice, Finish: f, UsageNull: e.usage})
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
		dst = AppendUsageChunk(dst, e.object, e.meta, rs.Usage())
		dst = append(dst, "\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...), true
}
