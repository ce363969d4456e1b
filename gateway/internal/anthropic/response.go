package anthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// StopReason maps an engine finish reason to Anthropic's stop_reason. A stop string and the end of
// sequence both finish "stop", so both say end_turn (see the package documentation).
func StopReason(f engine.FinishReason) string {
	switch f {
	case engine.FinishLength:
		return "max_tokens"
	case engine.FinishToolCalls:
		return "tool_use"
	}
	return "end_turn"
}

// AppendMessage appends a whole message object: its thinking, text and tool_use blocks in that order (the
// order a model writes them), the stop reason and the usage, and duet's timings as an extension field.
func AppendMessage(dst []byte, m apicore.Meta, r *apicore.Result) []byte {
	dst = append(dst, `{"id":`...)
	dst = apicore.AppendString(dst, m.ID)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = apicore.AppendString(dst, m.Model)
	dst = append(dst, `,"content":[`...)
	sep := false
	next := func() {
		if sep {
			dst = append(dst, ',')
		}
		sep = true
	}
	if thinking := r.Reasoning.String(); thinking != "" {
		next()
		dst = append(dst, `{"type":"thinking","thinking":`...)
		dst = apicore.AppendString(dst, thinking)
		dst = append(dst, `,"signature":`...)
		h := newSignature()
		h.Write([]byte(thinking))
		dst = appendSignature(dst, h)
		dst = append(dst, '}')
	}
	if text := r.Text.String(); text != "" {
		next()
		dst = append(dst, `{"type":"text","text":`...)
		dst = apicore.AppendString(dst, text)
		dst = append(dst, '}')
	}
	for i, c := range r.Final.ToolCalls {
		next()
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = apicore.AppendString(dst, toolUseID(m, i, c.ID))
		dst = append(dst, `,"name":`...)
		dst = apicore.AppendString(dst, c.Name)
		dst = append(dst, `,"input":`...)
		dst = appendInput(dst, c.Arguments)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, StopReason(r.Final.FinishReason)...)
	dst = append(dst, `","stop_sequence":null,"usage":`...)
	dst = appendUsage(dst, r.Final.Usage)
	dst = append(dst, `,"timings":`...)
	dst = apicore.AppendTimings(dst, r.Final.Timings, m.Route)
	return append(dst, '}')
}

// AppendTokenCount appends the answer of count_tokens.
func AppendTokenCount(dst []byte, n int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '}')
}

// appendUsage appends a usage object. Anthropic's input_tokens are the prompt tokens not read from a cache,
// cache_read_input_tokens those that were.
func appendUsage(dst []byte, u engine.Usage) []byte {
	cached := min(max(u.CachedTokens, 0), u.PromptTokens)
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens-cached), 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	return append(dst, '}')
}

// appendInput appends a tool call's arguments as the input object. Engines end a choice whose call is not
// a JSON object with an error, so the fallback (an empty object, which every SDK can decode) is for an
// engine that breaks its contract.
func appendInput(dst []byte, args string) []byte {
	var b bytes.Buffer
	if len(args) > 0 && args[0] == '{' && json.Compact(&b, []byte(args)) == nil {
		return append(dst, b.Bytes()...)
	}
	return append(dst, "{}"...)
}

// toolUseID is a call's id: the engine's, or one made from the message id and the call's index when the
// engine gave none, the same in a stream and in a whole message.
func toolUseID(m apicore.Meta, index int, id string) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("toolu_%s_%d", m.ID, index)
}

// newSignature starts the signature of a thinking block: a hash of its text (not a proof; see the package
// documentation), made as the text streams.
func newSignature() hash.Hash { return sha256.New() }

func appendSignature(dst []byte, h hash.Hash) []byte {
	var sum [sha256.Size]byte
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, h.Sum(sum[:0]))
	return append(dst, '"')
}
