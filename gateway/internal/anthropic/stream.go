package anthropic

import (
	"hash"
	"strconv"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Stream renders one generation as Anthropic's server-sent events, in the order Anthropic sends them:
//
//	message_start
//	content_block_start, ping (once, after the first block starts), content_block_delta..., content_block_stop
//	... one block per run of thinking, text or one tool call ...
//	message_delta (stop_reason, usage), message_stop
//
// The engine's tokens say what they add to the thinking, the text and the tool calls; a block stays open while
// tokens add to the same thing and closes when they turn to another. A thinking block ends with its
// signature_delta. Every event has an event: line, which Anthropic's SDKs dispatch on. A Stream is used by
// one goroutine; it has one choice (Messages has no n).
type Stream struct {
	meta    apicore.Meta
	started bool // message_start is out
	pinged  bool
	prompt  int // prompt tokens, when progress told them before message_start

	open  blockKind
	index int       // of the open block, or of the next one when none is open
	call  int       // the engine's index of the open tool_use block's call
	calls int       // tool calls opened so far
	sig   hash.Hash // of the open thinking block
}

type blockKind int

const (
	noBlock blockKind = iota
	thinkingBlock
	textBlock
	toolUseBlock
)

// NewStream starts rendering a stream of the message m describes.
func NewStream(m apicore.Meta) *Stream { return &Stream{meta: m} }

// Event renders an engine event: a token's thinking, text and tool-call pieces as deltas (progress only
// starts the message, with its prompt's size).
func (s *Stream) Event(dst []byte, ev engine.Event) []byte {
	if p := ev.Progress; p != nil && !s.started {
		s.prompt = p.Total
	}
	dst = s.start(dst)
	tok := ev.Token
	if tok == nil {
		return dst
	}
	if tok.Reasoning != "" {
		dst = s.ensure(dst, thinkingBlock, "", "")
		s.sig.Write([]byte(tok.Reasoning))
		dst = s.delta(dst, `{"type":"thinking_delta","thinking":`, tok.Reasoning)
	}
	if tok.Text != "" {
		dst = s.ensure(dst, textBlock, "", "")
		dst = s.delta(dst, `{"type":"text_delta","text":`, tok.Text)
	}
	for _, d := range tok.ToolCalls {
		if s.open != toolUseBlock || d.Index != s.call {
			dst = s.close(dst)
			s.call = d.Index
			dst = s.ensure(dst, toolUseBlock, toolUseID(s.meta, d.Index, d.ID), d.Name)
			s.calls = max(s.calls, d.Index+1)
		}
		if d.Arguments != "" {
			dst = s.delta(dst, `{"type":"input_json_delta","partial_json":`, d.Arguments)
		}
	}
	return dst
}

// Final renders the end of the message: what the engine held back, any tool call it did not stream, the
// stop reason and the usage. The stream is over after it.
func (s *Stream) Final(dst []byte, f *engine.Final) []byte {
	if f.Text != "" || f.Reasoning != "" {
		dst = s.Event(dst, engine.Event{Token: &engine.Token{Text: f.Text, Reasoning: f.Reasoning}})
	}
	dst = s.start(dst)
	for i := s.calls; i < len(f.ToolCalls); i++ {
		c := f.ToolCalls[i]
		dst = s.Event(dst, engine.Event{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{
			{Index: i, ID: toolUseID(s.meta, i, c.ID), Name: c.Name, Arguments: string(appendInput(nil, c.Arguments))}}}})
	}
	dst = s.close(dst)
	dst = append(dst, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
	dst = append(dst, StopReason(f.FinishReason)...)
	dst = append(dst, `","stop_sequence":null},"usage":`...)
	dst = appendUsage(dst, f.Usage)
	dst = append(dst, `,"timings":`...)
	dst = apicore.AppendTimings(dst, f.Timings, s.meta.Route)
	dst = append(dst, "}\n\n"...)
	return append(dst, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// Fail renders an error that ends the stream, as Anthropic sends one after the response has started.
func (s *Stream) Fail(dst []byte, e *apicore.Error) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = AppendError(dst, e)
	return append(dst, "\n\n"...)
}

// Ping keeps an idle stream open, with the event Anthropic sends for it.
func Ping(dst []byte) []byte {
	return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

// start sends message_start, once, before anything else.
func (s *Stream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	dst = append(dst, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	dst = apicore.AppendString(dst, s.meta.ID)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = apicore.AppendString(dst, s.meta.Model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	dst = appendUsage(dst, engine.Usage{PromptTokens: s.prompt})
	return append(dst, "}}\n\n"...)
}

// ensure opens a block of kind k unless one is open; a tool_use block always opens anew (the caller closed
// the one before).
func (s *Stream) ensure(dst []byte, k blockKind, id, name string) []byte {
	if s.open == k && k != toolUseBlock {
		return dst
	}
	dst = s.close(dst)
	s.open = k
	dst = append(dst, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"content_block":`...)
	switch k {
	case thinkingBlock:
		s.sig = newSignature()
		dst = append(dst, `{"type":"thinking","thinking":"","signature":""}`...)
	case textBlock:
		dst = append(dst, `{"type":"text","text":""}`...)
	case toolUseBlock:
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = apicore.AppendString(dst, id)
		dst = append(dst, `,"name":`...)
		dst = apicore.AppendString(dst, name)
		dst = append(dst, `,"input":{}}`...)
	}
	dst = append(dst, "}\n\n"...)
	if !s.pinged {
		s.pinged = true
		dst = Ping(dst)
	}
	return dst
}

// delta appends a content_block_delta of the open block: head is the delta object up to its string field.
func (s *Stream) delta(dst []byte, head, text string) []byte {
	dst = append(dst, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, `,"delta":`...)
	dst = append(dst, head...)
	dst = apicore.AppendString(dst, text)
	return append(dst, "}}\n\n"...)
}

// close ends the open block, a thinking block with its signature first.
func (s *Stream) close(dst []byte) []byte {
	if s.open == noBlock {
		return dst
	}
	if s.open == thinkingBlock {
		dst = append(dst, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
		dst = strconv.AppendInt(dst, int64(s.index), 10)
		dst = append(dst, `,"delta":{"type":"signature_delta","signature":`...)
		dst = appendSignature(dst, s.sig)
		dst = append(dst, "}}\n\n"...)
		s.sig = nil
	}
	dst = append(dst, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(s.index), 10)
	dst = append(dst, "}\n\n"...)
	s.open = noBlock
	s.index++
	return dst
}
