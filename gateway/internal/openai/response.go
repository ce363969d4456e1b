package openai

import (
	"strconv"
	"strings"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

// Meta is what every response object of one request repeats.
type Meta struct {
	ID          string // e.g. "chatcmpl-<request id>"
	Created     int64  // unix seconds
	Model       string
	Fingerprint string // system_fingerprint
	// Route says where the request ran, for timings.route; nil leaves it out.
	Route *Route

	// head is the opening of every chunk of a stream of headObject objects, rendered once (WithChunkHead).
	head       []byte
	headObject string
}

// WithChunkHead returns m with the fields every chunk of a stream of object objects opens with rendered once,
// so that each token's chunk copies them rather than renders them again. Set m's other fields first.
func (m Meta) WithChunkHead(object string) Meta {
	m.head, m.headObject = nil, ""
	m.head, m.headObject = appendHead(nil, object, m), object
	return m
}

// Route is where a request ran: the gateway that took it, the node and instance that decoded it, the
// prefill endpoint the router offered first, whether it was forwarded, the router's reason, what routing took
// (on the gateway the client called) and the wait for an admission slot (on the gateway that ran it).
type Route struct {
	EntryNode       string
	DecodeNode      string
	DecodeInstance  string
	PrefillInstance string
	PrefillNode     string
	PrefillAddress  string
	Forwarded       bool
	// Reason is the router's account of its choice ("auto: remote 14.9 s (first token 2.16 s) vs local
	// 32.7 s"); a forwarded request's comes with the hop.
	Reason    string
	Time      time.Duration
	Admission time.Duration
}

// Result accumulates one choice of a generation for a non-streamed response.
type Result struct {
	Text      strings.Builder
	Reasoning strings.Builder
	Logprobs  []engine.Logprob
	Final     *engine.Final
	Tokens    int
	// ReasoningTokens are the tokens that added to the reasoning (the Responses API reports them).
	ReasoningTokens int
}

// Add folds one event into the result.
func (r *Result) Add(ev engine.Event) {
	switch {
	case ev.Token != nil:
		r.Tokens++
		if ev.Token.Reasoning != "" {
			r.ReasoningTokens++
		}
		r.Text.WriteString(ev.Token.Text)
		r.Reasoning.WriteString(ev.Token.Reasoning)
		if ev.Token.Logprob != nil {
			r.Logprobs = append(r.Logprobs, *ev.Token.Logprob)
		}
	case ev.Final != nil:
		r.Final = ev.Final
		r.Text.WriteString(ev.Final.Text)
		r.Reasoning.WriteString(ev.Final.Reasoning)
	}
}

// Results accumulates every choice of a generation.
type Results []*Result

// NewResults makes n choices.
func NewResults(n int) Results {
	out := make(Results, max(n, 1))
	for i := range out {
		out[i] = &Result{}
	}
	return out
}

// Add folds an event into its choice's result (events of an unknown choice are dropped).
func (rs Results) Add(ev engine.Event) {
	if ev.Choice >= 0 && ev.Choice < len(rs) {
		rs[ev.Choice].Add(ev)
	}
}

// Done reports whether every choice has its final event; Failed returns the first that ended in an error.
func (rs Results) Done() bool {
	for _, r := range rs {
		if r.Final == nil {
			return false
		}
	}
	return true
}

// Usage adds the choices' completions to the prompt they share.
func (rs Results) Usage() engine.Usage {
	var u engine.Usage
	for i, r := range rs {
		if r.Final == nil {
			continue
		}
		if i == 0 || u.PromptTokens == 0 {
			u.PromptTokens, u.CachedTokens = r.Final.Usage.PromptTokens, r.Final.Usage.CachedTokens
		}
		u.CompletionTokens += r.Final.Usage.CompletionTokens
	}
	return u
}

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

// FinalError returns the API error of a final event that ended in an error or a cancellation not asked for
// by the client (an instance unloaded under the request), and nil otherwise.
func FinalError(f *engine.Final) *Error {
	switch f.FinishReason {
	case engine.FinishError:
		code := f.ErrorCode
		if code == "" {
			code = engine.CodeInternal
		}
		return FromEngine(&engine.Error{Code: code, Message: f.Error})
	case engine.FinishCancelled:
		return Unavailable("the generation was cancelled by the engine (the model instance was unloaded or restarted)")
	}
	return nil
}

func appendHead(dst []byte, object string, m Meta) []byte {
	if m.head != nil && object == m.headObject {
		return append(dst, m.head...)
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, m.ID)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, m.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, m.Model)
	dst = append(dst, `,"system_fingerprint":`...)
	dst = appendNullableString(dst, m.Fingerprint)
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

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// AppendTimings appends duet's per-phase timings (milliseconds) and, when route is set, where the request ran:
// an extension field clients ignore.
func AppendTimings(dst []byte, t engine.Timings, route *Route) []byte {
	field := func(dst []byte, name string, d time.Duration) []byte {
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		return appendFloat(dst, ms(d))
	}
	dst = append(dst, `{"prefill_source":`...)
	dst = appendNullableString(dst, t.PrefillSource)
	dst = field(dst, "queue_ms", t.Queue)
	dst = field(dst, "prefill_ms", t.Prefill)
	dst = field(dst, "first_token_ms", t.FirstToken)
	dst = field(dst, "decode_ms", t.Decode)
	dst = field(dst, "total_ms", t.Total)
	if r := t.Remote; r != nil {
		dst = append(dst, `,"remote_prefill":{"endpoint":`...)
		dst = appendString(dst, r.Endpoint)
		dst = append(dst, `,"instance_id":`...)
		dst = appendString(dst, r.InstanceID)
		dst = append(dst, `,"tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.Tokens), 10)
		dst = append(dst, `,"bytes":`...)
		dst = strconv.AppendInt(dst, r.Bytes, 10)
		dst = field(dst, "wait_ms", r.Wait)
		dst = field(dst, "transfer_ms", r.Transfer)
		dst = field(dst, "ingest_ms", r.Ingest)
		dst = append(dst, `,"attempts":`...)
		dst = strconv.AppendInt(dst, int64(r.Attempts), 10)
		dst = append(dst, `,"fallback_reason":`...)
		dst = appendNullableString(dst, r.FallbackReason)
		dst = append(dst, `,"exact":`...)
		dst = strconv.AppendBool(dst, !r.Approximate)
		dst = append(dst, '}')
	}
	if route != nil {
		dst = append(dst, `,"route":{"entry_node":`...)
		dst = appendString(dst, route.EntryNode)
		dst = append(dst, `,"decode_node":`...)
		dst = appendString(dst, route.DecodeNode)
		dst = append(dst, `,"decode_instance":`...)
		dst = appendString(dst, route.DecodeInstance)
		dst = append(dst, `,"prefill_instance":`...)
		dst = appendNullableString(dst, route.PrefillInstance)
		dst = append(dst, `,"prefill_node":`...)
		dst = appendNullableString(dst, route.PrefillNode)
		dst = append(dst, `,"prefill_address":`...)
		dst = appendNullableString(dst, route.PrefillAddress)
		dst = append(dst, `,"forwarded":`...)
		dst = strconv.AppendBool(dst, route.Forwarded)
		dst = append(dst, `,"reason":`...)
		dst = appendNullableString(dst, route.Reason)
		dst = field(dst, "routing_ms", route.Time)
		dst = field(dst, "admission_ms", route.Admission)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func appendTop(dst []byte, top []engine.TopLogprob) []byte {
	dst = append(dst, '[')
	for i, alt := range top {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"token":`...)
		dst = appendString(dst, alt.Token)
		dst = append(dst, `,"logprob":`...)
		dst = appendFloat(dst, alt.Logprob)
		dst = append(dst, `,"bytes":`...)
		dst = appendBytesArray(dst, alt.Bytes)
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
		dst = appendString(dst, lp.Token)
		dst = append(dst, `,"logprob":`...)
		dst = appendFloat(dst, lp.Logprob)
		dst = append(dst, `,"bytes":`...)
		dst = appendBytesArray(dst, lp.Bytes)
		dst = append(dst, `,"top_logprobs":`...)
		dst = appendTop(dst, lp.Top)
		dst = append(dst, '}')
	}
	return append(dst, `],"refusal":null}`...)
}

// AppendChatCompletion appends a whole chat.completion object, one choice per result.
func AppendChatCompletion(dst []byte, m Meta, rs Results, withLogprobs bool) []byte {
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
			dst = appendString(dst, text)
		}
		if reasoning := r.Reasoning.String(); reasoning != "" {
			dst = append(dst, `,"reasoning_content":`...)
			dst = appendString(dst, reasoning)
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
	dst = AppendTimings(dst, rs[0].Final.Timings, m.Route)
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
		dst = appendString(dst, id)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendString(dst, name)
		dst = append(dst, `,"arguments":`...)
	} else {
		dst = append(dst, `"function":{"arguments":`...)
	}
	dst = appendString(dst, args)
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
func AppendChatChunk(dst []byte, m Meta, c ChatChunk) []byte {
	dst = appendHead(dst, "chat.completion.chunk", m)
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
		dst = appendString(dst, c.Content)
		sep = true
	}
	if c.Reasoning != "" {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"reasoning_content":`...)
		dst = appendString(dst, c.Reasoning)
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
		dst = AppendTimings(dst, c.Finish.Timings, m.Route)
	} else {
		dst = append(dst, `null}]`...)
	}
	if c.UsageNull {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, '}')
}

// AppendUsageChunk appends the extra last chunk of a stream with include_usage: no choices, only usage.
func AppendUsageChunk(dst []byte, object string, m Meta, u engine.Usage) []byte {
	dst = appendHead(dst, object, m)
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
		dst = appendString(dst, lp.Token)
	}
	dst = append(dst, `],"token_logprobs":[`...)
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFloat(dst, lp.Logprob)
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
			dst = appendString(dst, alt.Token)
			dst = append(dst, ':')
			dst = appendFloat(dst, alt.Logprob)
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
func AppendCompletion(dst []byte, m Meta, rs Results, withLogprobs bool) []byte {
	r := rs[0]
	dst = appendHead(dst, "text_completion", m)
	dst = append(dst, `,"choices":[{"text":`...)
	dst = appendString(dst, r.Text.String())
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
	dst = AppendTimings(dst, r.Final.Timings, m.Route)
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
func AppendCompletionChunk(dst []byte, m Meta, c CompletionChunk) []byte {
	dst = appendHead(dst, "text_completion", m)
	dst = append(dst, `,"choices":[{"text":`...)
	dst = appendString(dst, c.Text)
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
		dst = AppendTimings(dst, c.Finish.Timings, m.Route)
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
	dst = appendString(dst, m.ID)
	dst = append(dst, `,"object":"model","created":`...)
	dst = strconv.AppendInt(dst, m.Created, 10)
	dst = append(dst, `,"owned_by":`...)
	dst = appendString(dst, m.OwnedBy)
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
