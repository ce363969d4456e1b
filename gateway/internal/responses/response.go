package responses

import (
	"strconv"
	"strings"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// now is the clock of completed_at; tests fix it.
var now = time.Now

// Response statuses and item statuses.
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusIncomplete = "incomplete"
	statusFailed     = "failed"
)

type itemKind uint8

const (
	kindReasoning itemKind = iota
	kindMessage
	kindCall
)

// item is one output item: a reasoning item, an assistant message or a function call.
type item struct {
	kind   itemKind
	id     string
	index  int             // in the output
	text   strings.Builder // the message's or the reasoning's text, the call's arguments
	callID string
	name   string // the function the engine called
	status string
	sealed string // a reasoning item's encrypted_content, once rendered
}

// itemID names the index'th output item of response m: ids that are the same in a stream and in the whole
// answer of a request, and that say which response they came from.
func itemID(kind itemKind, m apicore.Meta, index int) string {
	prefix := [...]string{kindReasoning: "rs_", kindMessage: "msg_", kindCall: "fc_"}[kind]
	return prefix + strings.TrimPrefix(m.ID, "resp_") + "_" + strconv.Itoa(index)
}

// callID is a function call's call_id: the engine's, or one made from the response's when the engine gave none.
func callID(engineID string, m apicore.Meta, index int) string {
	if engineID != "" {
		return engineID
	}
	return "call_" + strings.TrimPrefix(m.ID, "resp_") + "_" + strconv.Itoa(index)
}

// outputItems are the output of a whole answer: reasoning, then the message, then the function calls. A message
// comes when there is text, or when there would be no output at all (so output_text reads "").
func outputItems(m apicore.Meta, r *apicore.Result) []*item {
	var items []*item
	add := func(kind itemKind) *item {
		it := &item{kind: kind, id: itemID(kind, m, len(items)), index: len(items), status: statusCompleted}
		items = append(items, it)
		return it
	}
	if s := r.Reasoning.String(); s != "" {
		add(kindReasoning).text.WriteString(s)
	}
	calls := r.Final.ToolCalls
	if text := r.Text.String(); text != "" || len(items) == 0 && len(calls) == 0 {
		add(kindMessage).text.WriteString(text)
	}
	for i, c := range calls {
		it := add(kindCall)
		it.callID, it.name = callID(c.ID, m, i), c.Name
		it.text.WriteString(c.Arguments)
	}
	if r.Final.FinishReason == engine.FinishLength {
		items[len(items)-1].status = statusIncomplete
	}
	return items
}

// AppendResponse appends the response object of a whole answer: r is the generation's one choice.
func AppendResponse(dst []byte, m apicore.Meta, echo *Echo, r *apicore.Result) []byte {
	status := statusCompleted
	if r.Final.FinishReason == engine.FinishLength {
		status = statusIncomplete
	}
	return appendResponse(dst, m, echo, snapshot{
		status: status, items: outputItems(m, r), final: r.Final, reasoningTokens: r.ReasoningTokens,
	})
}

// snapshot is the state of a response for its object: in progress, done, or failed.
type snapshot struct {
	status          string
	items           []*item
	final           *engine.Final // nil until done: no usage yet
	reasoningTokens int
	err             *apicore.Error // of a failed response
}

// appendResponse appends a response object.
func appendResponse(dst []byte, m apicore.Meta, echo *Echo, s snapshot) []byte {
	dst = append(dst, `{"id":`...)
	dst = apicore.AppendString(dst, m.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, m.Created, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, s.status...)
	dst = append(dst, `","completed_at":`...)
	if s.status == statusCompleted {
		dst = strconv.AppendInt(dst, now().Unix(), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"error":`...)
	if s.err != nil {
		dst = appendResponseError(dst, s.err)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if s.status == statusIncomplete {
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"model":`...)
	dst = apicore.AppendString(dst, m.Model)
	if echo != nil && len(echo.members) > 0 {
		dst = append(dst, ',')
		dst = append(dst, echo.members...)
	}
	dst = append(dst, `,"output":[`...)
	for i, it := range s.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, it, false, echo)
	}
	dst = append(dst, `],"usage":`...)
	if f := s.final; f != nil {
		dst = appendUsage(dst, f.Usage, s.reasoningTokens)
		dst = append(dst, `,"timings":`...)
		dst = apicore.AppendTimings(dst, f.Timings, m.Route)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

// appendResponseError appends a failed response's error: {"code", "message"}.
func appendResponseError(dst []byte, e *apicore.Error) []byte {
	code := e.Code
	if code == "" {
		code = "server_error"
	}
	dst = append(dst, `{"code":`...)
	dst = apicore.AppendString(dst, code)
	dst = append(dst, `,"message":`...)
	dst = apicore.AppendString(dst, e.Message)
	return append(dst, '}')
}

func appendUsage(dst []byte, u engine.Usage, reasoning int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendInt(dst, int64(reasoning), 10)
	dst = append(dst, `},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens+u.CompletionTokens), 10)
	return append(dst, '}')
}

// appendItem appends an output item; added renders it as output_item.added announces it: in progress, with
// no text yet. A call of a function that stands for a tool in a namespace names both; a call of a custom
// tool's function is a custom_tool_call, its input the function's one argument.
func appendItem(dst []byte, it *item, added bool, e *Echo) []byte {
	status := it.status
	if added {
		status = statusInProgress
	}
	dst = append(dst, `{"id":`...)
	dst = apicore.AppendString(dst, it.id)
	switch it.kind {
	case kindReasoning:
		dst = append(dst, `,"type":"reasoning","summary":[`...)
		if !added && e != nil && e.summary {
			dst = appendSummary(dst, it.text.String())
		}
		dst = append(dst, `],"content":[`...)
		if !added {
			dst = appendPart(dst, kindReasoning, it.text.String())
		}
		dst = append(dst, `],"encrypted_content":`...)
		if !added && it.sealed == "" {
			it.sealed = e.seal(it.text.String()) // once: a stream's events and its last response agree
		}
		if added || it.sealed == "" {
			dst = append(dst, "null"...)
		} else {
			dst = apicore.AppendString(dst, it.sealed)
		}
	case kindMessage:
		dst = append(dst, `,"type":"message","role":"assistant","content":[`...)
		if !added {
			dst = appendPart(dst, kindMessage, it.text.String())
		}
		dst = append(dst, ']')
	case kindCall:
		tn := e.tool(it.name)
		if tn.custom {
			dst = append(dst, `,"type":"custom_tool_call","call_id":`...)
		} else {
			dst = append(dst, `,"type":"function_call","call_id":`...)
		}
		dst = apicore.AppendString(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = apicore.AppendString(dst, tn.name)
		if tn.namespace != "" {
			dst = append(dst, `,"namespace":`...)
			dst = apicore.AppendString(dst, tn.namespace)
		}
		switch {
		case tn.custom && added:
			dst = append(dst, `,"input":""`...)
		case tn.custom:
			dst = append(dst, `,"input":`...)
			dst = apicore.AppendString(dst, customInput(it.text.String()))
		case added:
			dst = append(dst, `,"arguments":""`...)
		default:
			dst = append(dst, `,"arguments":`...)
			dst = apicore.AppendString(dst, it.text.String())
		}
	}
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	return append(dst, `"}`...)
}

// appendPart appends a content part: a message's output_text, a reasoning item's reasoning_text.
func appendPart(dst []byte, kind itemKind, text string) []byte {
	if kind == kindReasoning {
		dst = append(dst, `{"type":"reasoning_text","text":`...)
		dst = apicore.AppendString(dst, text)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = apicore.AppendString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// appendSummary appends a reasoning summary part.
func appendSummary(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"summary_text","text":`...)
	dst = apicore.AppendString(dst, text)
	return append(dst, '}')
}
