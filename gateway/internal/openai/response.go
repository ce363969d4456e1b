package openai

import (
	"strconv"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// FinishReason maps an engine finish reason to OpenAI's.
func FinishReason(f engine.FinishReason) string {
	switch f {
	case engine.FinishLength:
		return "length"
	case engine.FinishToolCalls:
		return "tool_calls"
	}
	return "stop"
}

// ChunkMeta is a stream's Meta with the opening every chunk of one object type repeats (id, object, created,
// model, system_fingerprint) rendered once, so that each token's chunk copies it rather than renders it again.
// A ChunkMeta made without WithChunkHead renders the opening for each chunk.
type ChunkMeta struct {
	apicore.Meta
	head   []byte
	object string
}

// WithChunkHead returns m with the opening of every chunk of a stream of object objects rendered once. Set
// m's fields first.
func WithChunkHead(m apicore.Meta, object string) ChunkMeta {
	return ChunkMeta{Meta: m, head: appendHead(nil, object, m), object: object}
}

func (m ChunkMeta) appendHead(dst []byte, object string) []byte {
	if m.head != nil && object == m.object {
		return append(dst, m.head...)
	}
	return appendHead(dst, object, m.Meta)
}

func appendHead(dst []byte, object string, m apicore.Meta) []byte {
	dst = append(dst, `{"id":`...)
	dst = apicore.AppendString(dst, m.ID)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, m.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = apicore.AppendString(dst, m.Model)
	dst = append(dst, `,"system_fingerprint":`...)
	dst = apicore.AppendNullableString(dst, m.Fingerprint)
	return dst
}

// AppendUsage appends an OpenAI usage object.
func AppendUsage(dst []byte, u engine.Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens+u.CompletionTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	return append(dst, `}}`...)
}

func appendTop(dst []byte, top []engine.TopLogprob) []byte {
	dst = append(dst, '[')
	for i, alt := range top {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"token":`...)
		dst = apicore.AppendString(dst, alt.Token)
		dst = append(dst, `,"logprob":`...)
		dst = apicore.AppendFloat(dst, alt.Logprob)
		dst = append(dst, `,"bytes":`...)
		dst = apicore.AppendBytesArray(dst, alt.Bytes)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendChatLogprobs appends a chat logprobs object: {"content":[...],"refusal":null}.
func appendChatLogprobs(dst []byte, lps []engine.Logprob) []byte {
	dst = append(dst, `{"content":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"token":`...)
		dst = apicore.AppendString(dst, lp.Token)
		dst = append(dst, `,"logprob":`...)
		dst = apicore.AppendFloat(dst, lp.Logprob)
		dst = append(dst, `,"bytes":`...)
		dst = apicore.AppendBytesArray(dst, lp.Bytes)
		dst = append(dst, `,"top_logprobs":`...)
		dst = appendTop(dst, lp.Top)
		dst = append(dst, '}')
	}
	return append(dst, `],"refusal":null}`...)
}

// AppendChatCompletion appends a whole chat.completion object, one choice per result.
func AppendChatCompletion(dst []byte, m apicore.Meta, rs apicore.Results, withLogprobs bool) []byte {
	dst = appendHead(dst, "chat.completion", m)
	dst = append(dst, `,"choices":[`...)
	for i, r := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"message":{"role":"assistant","content":`...)
		text := r.Text.String()
		if text == "" && len(r.Final.ToolCalls) > 0 {
			dst = append(dst, "null"...) // as OpenAI answers a call without text
		} else {
			dst = apicore.AppendString(dst, text)
		}
		if reasoning := r.Reasoning.String(); reasoning != "" {
			dst = append(dst, `,"reasoning_content":`...)
			dst = apicore.AppendString(dst, reasoning)
		}
		if len(r.Final.ToolCalls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for j, c := range r.Final.ToolCalls {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendToolCall(dst, -1, c.ID, c.Name, c.Arguments, true)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"refusal":null},"logprobs":`...)
		if withLogprobs {
			dst = appendChatLogprobs(dst, r.Logprobs)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"finish_reason":"`...)
		dst = append(dst, FinishReason(r.Final.FinishReason)...)
		dst = append(dst, `"}`...)
	}
	dst = append(dst, `],"usage":`...)
	dst = AppendUsage(dst, rs.Usage())
	dst = append(dst, `,"timings":`...)
	dst = apicore.AppendTimings(dst, rs[0].Final.Timings, m.Route)
	return append(dst, '}')
}

// appendToolCall appends a tool call (whole: full) or a streamed piece of one. A piece with an id starts a
// call and names it, as OpenAI's first delta of a call does; the following ones carry arguments only.
func appendToolCall(dst []byte, index int, id, name, args string, full bool) []byte {
	dst = append(dst, '{')
	if index >= 0 {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(index), 10)
		dst = append(dst, ',')
	}
	if full || id != "" {
		dst = append(dst, `"id":`...)
		dst = apicore.AppendString(dst, id)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = apicore.AppendString(dst, name)
		dst = append(dst, `,"arguments":`...)
	} else {
		dst = append(dst, `"function":{"arguments":`...)
	}
	dst = apicore.AppendString(dst, args)
	return append(dst, "}}"...)
}

// ChatChunk is one chat.completion.chunk.
type ChatChunk struct {
	Index     int  // the choice
	Role      bool // the first chunk announces the assistant role
	Content   string
	Reasoning string
	ToolCalls []engine.ToolCallDelta
	Logprobs  []engine.Logprob // nil: "logprobs":null
	Finish    *engine.Final    // set on the last chunk
	// UsageNull adds "usage":null, as OpenAI does on every chunk when include_usage is set.
	UsageNull bool
}

// AppendChatChunk appends one chunk as JSON.
func AppendChatChunk(dst []byte, m ChunkMeta, c ChatChunk) []byte {
	dst = m.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(c.Index), 10)
	dst = append(dst, `,"delta":{`...)
	sep := false
	if c.Role {
		dst = append(dst, `"role":"assistant"`...)
		sep = true
	}
	if c.Content != "" || (c.Role && c.Finish == nil && c.Reasoning == "" && len(c.ToolCalls) == 0) {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"content":`...)
		dst = apicore.AppendString(dst, c.Content)
		sep = true
	}
	if c.Reasoning != "" {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"reasoning_content":`...)
		dst = apicore.AppendString(dst, c.Reasoning)
		sep = true
	}
	if len(c.ToolCalls) > 0 {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"tool_calls":[`...)
		for i, d := range c.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendToolCall(dst, d.Index, d.ID, d.Name, d.Arguments, false)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":`...)
	if c.Logprobs != nil {
		dst = appendChatLogprobs(dst, c.Logprobs)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"finish_reason":`...)
	if c.Finish != nil {
		dst = append(dst, '"')
		dst = append(dst, FinishReason(c.Finish.FinishReason)...)
		dst = append(dst, `"}]`...)
		dst = append(dst, `,"timings":`...)
		dst = apicore.AppendTimings(dst, c.Finish.Timings, m.Route)
	} else {
		dst = append(dst, `null}]`...)
	}
	if c.UsageNull {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, '}')
}

// AppendUsageChunk appends the extra last chunk of a stream with include_usage: no choices, only usage.
func AppendUsageChunk(dst []byte, object string, m ChunkMeta, u engine.Usage) []byte {
	dst = m.appendHead(dst, object)
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = AppendUsage(dst, u)
	return append(dst, '}')
}

// appendLegacyLogprobs appends a completions logprobs object for the given tokens, with text offsets starting
// at offset.
func appendLegacyLogprobs(dst []byte, lps []engine.Logprob, offset int) []byte {
	dst = append(dst, `{"tokens":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = apicore.AppendString(dst, lp.Token)
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = apicore.AppendFloat(dst, lp.Logprob)
	}
	dst = append(dst, `],"top_logprobs":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		for j, alt := range lp.Top {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = apicore.AppendString(dst, alt.Token)
			dst = append(dst, ':')
			dst = apicore.AppendFloat(dst, alt.Logprob)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"text_offset":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(offset), 10)
		offset += len(lp.Token)
	}
	return append(dst, `]}`...)
}

// AppendCompletion appends a whole text_completion object.
func AppendCompletion(dst []byte, m apicore.Meta, rs apicore.Results, withLogprobs bool) []byte {
	r := rs[0]
	dst = appendHead(dst, "text_completion", m)
	dst = append(dst, `,"choices":[{"text":`...)
	dst = apicore.AppendString(dst, r.Text.String())
	dst = append(dst, `,"index":0,"logprobs":`...)
	if withLogprobs {
		dst = appendLegacyLogprobs(dst, r.Logprobs, 0)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"finish_reason":"`...)
	dst = append(dst, FinishReason(r.Final.FinishReason)...)
	dst = append(dst, `"}],"usage":`...)
	dst = AppendUsage(dst, r.Final.Usage)
	dst = append(dst, `,"timings":`...)
	dst = apicore.AppendTimings(dst, r.Final.Timings, m.Route)
	return append(dst, '}')
}

// CompletionChunk is one streamed text_completion object.
type CompletionChunk struct {
	Text       string
	Logprobs   []engine.Logprob
	TextOffset int
	Finish     *engine.Final
	UsageNull  bool
}

// AppendCompletionChunk appends one streamed completion object.
func AppendCompletionChunk(dst []byte, m ChunkMeta, c CompletionChunk) []byte {
	dst = m.appendHead(dst, "text_completion")
	dst = append(dst, `,"choices":[{"text":`...)
	dst = apicore.AppendString(dst, c.Text)
	dst = append(dst, `,"index":0,"logprobs":`...)
	if c.Logprobs != nil {
		dst = appendLegacyLogprobs(dst, c.Logprobs, c.TextOffset)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"finish_reason":`...)
	if c.Finish != nil {
		dst = append(dst, '"')
		dst = append(dst, FinishReason(c.Finish.FinishReason)...)
		dst = append(dst, `"}],"timings":`...)
		dst = apicore.AppendTimings(dst, c.Finish.Timings, m.Route)
	} else {
		dst = append(dst, `null}]`...)
	}
	if c.UsageNull {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, '}')
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string
	Created int64
	OwnedBy string
}

// AppendModel appends a model object.
func AppendModel(dst []byte, m Model) []byte {
	dst = append(dst, `{"id":`...)
	dst = apicore.AppendString(dst, m.ID)
	dst = append(dst, `,"object":"model","created":`...)
	dst = strconv.AppendInt(dst, m.Created, 10)
	dst = append(dst, `,"owned_by":`...)
	dst = apicore.AppendString(dst, m.OwnedBy)
	return append(dst, '}')
}

// AppendModelList appends the list object of GET /v1/models.
func AppendModelList(dst []byte, models []Model) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, m := range models {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendModel(dst, m)
	}
	return append(dst, `]}`...)
}
