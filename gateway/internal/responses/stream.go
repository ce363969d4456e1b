package responses

import (
	"strconv"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Stream renders one generation as the Responses API's server-sent events, in the order OpenAI sends them:
//
//	response.created, response.in_progress
//	for each output item, as the engine starts it (reasoning, the message, each function call):
//	  response.output_item.added
//	  response.content_part.added                    (message and reasoning)
//	  response.output_text.delta ...                 (message)
//	  response.reasoning_text.delta ...              (reasoning)
//	  response.reasoning_summary_part.added, .reasoning_summary_text.delta and their .done
//	                                                 (reasoning, when the request asks for a summary)
//	  response.function_call_arguments.delta ...     (function call)
//	  the .done of each of those, then response.output_item.done
//	response.completed, or response.incomplete when max_output_tokens cut it short
//
// Each event is "event: <type>" and "data: <json>" with the type again and a sequence_number that counts the
// events from 0. One item is open at a time: the engine's output moves from reasoning to text to calls, and
// an item ends when another begins. Reasoning streams as reasoning_text, the raw text of open models' thinking
// (not OpenAI's summaries); it is what the npm client's stream helper accumulates into the reasoning item.
//
// A failure mid-stream is an error event, then response.failed. The error event carries the error both at its
// top level (as OpenAI documents it) and nested under "error" (as OpenAI sends it), which is what makes the Go
// and npm clients end the stream with the error instead of passing it by.
//
// A Stream is used by one goroutine.
type Stream struct {
	meta  apicore.Meta
	echo  *Echo
	seq   int
	items []*item
	open  *item       // the item being streamed, nil between items
	calls map[int]int // the engine's call index -> its item's output index
	// reasoningTokens counts the tokens that added to the reasoning.
	reasoningTokens int
}

// NewStream starts rendering a stream for response m.
func NewStream(m apicore.Meta, echo *Echo) *Stream {
	return &Stream{meta: m, echo: echo, calls: map[int]int{}}
}

// Start renders the events before the first token: response.created and response.in_progress.
func (s *Stream) Start(dst []byte) []byte {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		dst = s.head(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = appendResponse(dst, s.meta, s.echo, snapshot{status: statusInProgress})
		dst = end(dst)
	}
	return dst
}

// Token renders what a token adds: reasoning, text and pieces of function calls.
func (s *Stream) Token(dst []byte, t *engine.Token) []byte {
	if t.Reasoning != "" {
		s.reasoningTokens++
	}
	return s.add(dst, t.Reasoning, t.Text, t.ToolCalls)
}

func (s *Stream) add(dst []byte, reasoning, text string, calls []engine.ToolCallDelta) []byte {
	if reasoning != "" {
		dst = s.delta(dst, s.ensure(&dst, kindReasoning), reasoning)
	}
	if text != "" {
		dst = s.delta(dst, s.ensure(&dst, kindMessage), text)
	}
	for _, d := range calls {
		index, ok := s.calls[d.Index]
		if !ok {
			dst = s.openItem(dst, kindCall)
			s.open.callID, s.open.name = callID(d.ID, s.meta, d.Index), d.Name
			index = s.open.index
			s.calls[d.Index] = index
			dst = s.added(dst, s.open)
		}
		if it := s.items[index]; d.Arguments != "" {
			if it != s.open {
				// A piece of a call that has ended: the engine interleaved calls. Its done event was sent;
				// the final response has the call as the engine completed it.
				it.text.WriteString(d.Arguments)
				continue
			}
			dst = s.delta(dst, it, d.Arguments)
		}
	}
	return dst
}

// Final renders the end of the generation: what the engine held back, the calls it did not stream, the open
// item's end, and response.completed or response.incomplete.
func (s *Stream) Final(dst []byte, f *engine.Final) []byte {
	dst = s.add(dst, f.Reasoning, f.Text, nil)
	for i, c := range f.ToolCalls {
		index, ok := s.calls[i]
		if !ok {
			dst = s.add(dst, "", "", []engine.ToolCallDelta{{Index: i, ID: c.ID, Name: c.Name, Arguments: c.Arguments}})
			continue
		}
		// The engine's complete call is the call, also if its pieces said something else.
		it := s.items[index]
		it.name = c.Name
		it.text.Reset()
		it.text.WriteString(c.Arguments)
	}
	if len(s.items) == 0 {
		s.ensure(&dst, kindMessage) // an answer of nothing is an empty message
	}
	status := statusCompleted
	if f.FinishReason == engine.FinishLength {
		status = statusIncomplete
	}
	dst = s.closeOpen(dst, status)
	typ := "response.completed"
	if status == statusIncomplete {
		typ = "response.incomplete"
	}
	dst = s.head(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, s.meta, s.echo, snapshot{status: status, items: s.items, final: f, reasoningTokens: s.reasoningTokens})
	return end(dst)
}

// Fail renders an error that ends the stream: an error event, then response.failed with the output so far.
func (s *Stream) Fail(dst []byte, e *apicore.Error) []byte {
	if s.open != nil {
		s.open.status, s.open = statusIncomplete, nil
	}
	dst = s.head(dst, "error")
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	dst = append(dst, `,"message":`...)
	dst = apicore.AppendString(dst, e.Message)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	env := e.AppendEnvelope(nil) // {"error":{...}}
	dst = append(dst, ',')
	dst = append(dst, env[1:len(env)-1]...)
	dst = end(dst)
	dst = s.head(dst, "response.failed")
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, s.meta, s.echo, snapshot{status: statusFailed, items: s.items, err: e})
	return end(dst)
}

// ensure makes the open item one of kind, ending the one open before.
func (s *Stream) ensure(dst *[]byte, kind itemKind) *item {
	if s.open == nil || s.open.kind != kind {
		*dst = s.openItem(*dst, kind)
		*dst = s.added(*dst, s.open)
	}
	return s.open
}

// openItem ends the open item and opens a new one, not yet announced.
func (s *Stream) openItem(dst []byte, kind itemKind) []byte {
	dst = s.closeOpen(dst, statusCompleted)
	s.open = &item{kind: kind, id: itemID(kind, s.meta, len(s.items)), index: len(s.items), status: statusInProgress}
	s.items = append(s.items, s.open)
	return dst
}

// added announces the open item: output_item.added, and content_part.added for an item with text.
func (s *Stream) added(dst []byte, it *item) []byte {
	dst = s.head(dst, "response.output_item.added")
	dst = where(dst, it, refItem)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, it, true, s.echo)
	dst = end(dst)
	if it.kind != kindCall {
		dst = s.head(dst, "response.content_part.added")
		dst = where(dst, it, refPart)
		dst = append(dst, `,"part":`...)
		dst = appendPart(dst, it.kind, "")
		dst = end(dst)
	}
	return dst
}

// delta renders text added to the open item. A custom tool's input is rendered whole when its call ends: the
// engine streams the JSON arguments of its function, whose string the input is.
func (s *Stream) delta(dst []byte, it *item, text string) []byte {
	it.text.WriteString(text)
	if it.kind == kindCall && s.echo.tool(it.name).custom {
		return dst
	}
	typ := [...]string{kindReasoning: "response.reasoning_text.delta", kindMessage: "response.output_text.delta",
		kindCall: "response.function_call_arguments.delta"}[it.kind]
	dst = s.head(dst, typ)
	r := refPart
	if it.kind == kindCall {
		r = refID
	}
	dst = where(dst, it, r)
	dst = append(dst, `,"delta":`...)
	dst = apicore.AppendString(dst, text)
	if it.kind == kindMessage {
		dst = append(dst, `,"logprobs":[]`...)
	}
	return end(dst)
}

// closeOpen ends the open item with status: the .done events of its text, its part and itself.
func (s *Stream) closeOpen(dst []byte, status string) []byte {
	it := s.open
	if it == nil {
		return dst
	}
	it.status = status
	text := it.text.String()
	switch {
	case it.kind == kindCall && s.echo.tool(it.name).custom:
		input := customInput(text)
		dst = s.head(dst, "response.custom_tool_call_input.delta")
		dst = where(dst, it, refID)
		dst = append(dst, `,"delta":`...)
		dst = apicore.AppendString(dst, input)
		dst = end(dst)
		dst = s.head(dst, "response.custom_tool_call_input.done")
		dst = where(dst, it, refID)
		dst = append(dst, `,"input":`...)
		dst = apicore.AppendString(dst, input)
		dst = end(dst)
	case it.kind == kindCall:
		dst = s.head(dst, "response.function_call_arguments.done")
		dst = where(dst, it, refID)
		dst = append(dst, `,"name":`...)
		dst = apicore.AppendString(dst, s.echo.tool(it.name).name)
		dst = append(dst, `,"arguments":`...)
		dst = apicore.AppendString(dst, text)
		dst = end(dst)
	default:
		typ := "response.output_text.done"
		if it.kind == kindReasoning {
			typ = "response.reasoning_text.done"
		}
		dst = s.head(dst, typ)
		dst = where(dst, it, refPart)
		dst = append(dst, `,"text":`...)
		dst = apicore.AppendString(dst, text)
		if it.kind == kindMessage {
			dst = append(dst, `,"logprobs":[]`...)
		}
		dst = end(dst)
		dst = s.head(dst, "response.content_part.done")
		dst = where(dst, it, refPart)
		dst = append(dst, `,"part":`...)
		dst = appendPart(dst, it.kind, text)
		dst = end(dst)
		if it.kind == kindReasoning && s.echo != nil && s.echo.summary {
			dst = s.summary(dst, it, text)
		}
	}
	dst = s.head(dst, "response.output_item.done")
	dst = where(dst, it, refItem)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, it, false, s.echo)
	s.open = nil
	return end(dst)
}

// head starts an event of type typ: its SSE lines up to the sequence number.
func (s *Stream) head(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(s.seq), 10)
	s.seq++
	return dst
}

// Where an event of an item says it belongs.
type ref uint8

const (
	refItem ref = iota // output_index (output_item.added and .done, which carry the item)
	refID              // and item_id (function call arguments)
	refPart            // and content_index (the parts of messages and reasoning, which have one each)
)

// where appends where an event of item it belongs.
func where(dst []byte, it *item, r ref) []byte {
	if r >= refID {
		dst = append(dst, `,"item_id":`...)
		dst = apicore.AppendString(dst, it.id)
	}
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(it.index), 10)
	if r == refPart {
		dst = append(dst, `,"content_index":0`...)
	}
	return dst
}

func end(dst []byte) []byte { return append(dst, "}\n\n"...) }

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return apicore.AppendString(dst, s)
}

// summary renders the events of a reasoning item's one summary part, which is its whole text: it is known when
// the reasoning ends.
func (s *Stream) summary(dst []byte, it *item, text string) []byte {
	for _, ev := range []struct{ typ, field, value string }{
		{"response.reasoning_summary_part.added", "part", ""},
		{"response.reasoning_summary_text.delta", "delta", text},
		{"response.reasoning_summary_text.done", "text", text},
		{"response.reasoning_summary_part.done", "part", text},
	} {
		dst = s.head(dst, ev.typ)
		dst = where(dst, it, refID)
		dst = append(dst, `,"summary_index":0,"`...)
		dst = append(dst, ev.field...)
		dst = append(dst, `":`...)
		if ev.field == "part" {
			dst = appendSummary(dst, ev.value)
		} else {
			dst = apicore.AppendString(dst, ev.value)
		}
		dst = end(dst)
	}
	return dst
}
