package server

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/openai"
)

// What the recent ring records of a request this gateway forwarded: where it went, and the owner's timings and
// usage read from its answer or the end of its stream.

// forwarded notes where a forwarded request went and, for a whole answer, the owner's timings and usage (or
// its error).
func (r *recentRequests) forwarded(c *fiber.Ctx, d *decision, body []byte) {
	e := recentOf(c)
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setForwarded(d)
	if c.Response().StatusCode() < 400 {
		e.ownerFigures(body)
		return
	}
	var env struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if len(body) < 64<<10 && json.Unmarshal(body, &env) == nil {
		e.rec.Error = cut(env.Error.Message, maxRecentError)
	}
}

// forwardedStream starts watching a forwarded stream: its writer passes each chunk to observe and calls
// streamEnded.
func (r *recentRequests) forwardedStream(c *fiber.Ctx, d *decision) *recentEntry {
	e := recentOf(c)
	if e == nil {
		return nil
	}
	e.streaming.Store(true)
	e.mu.Lock()
	e.setForwarded(d)
	e.mu.Unlock()
	return e
}

// setForwarded notes the decision of a forwarded request. Call with mu held.
func (e *recentEntry) setForwarded(d *decision) {
	f := &recentRoute{EntryNode: e.rec.Node, DecodeNode: d.DecodeNode, DecodeInstance: d.DecodeInstance, Forwarded: true}
	if len(d.PrefillEndpoints) > 0 {
		pe := d.PrefillEndpoints[0]
		f.PrefillNode, f.PrefillInstance, f.PrefillAddress = pe.Node, pe.InstanceID, pe.Address
	}
	e.forwarded = f
	e.reason = cut(d.Reason, maxRecentError)
}

// observe keeps the end of a forwarded stream, where the owner's timings and usage are.
func (e *recentEntry) observe(chunk []byte) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.firstByte == 0 {
		e.firstByte = time.Since(e.rec.Start)
	}
	if len(chunk) >= recentTail {
		e.tail = append(e.tail[:0], chunk[len(chunk)-recentTail:]...)
		return
	}
	if over := len(e.tail) + len(chunk) - recentTail; over > 0 {
		e.tail = append(e.tail[:0], e.tail[over:]...)
	}
	e.tail = append(e.tail, chunk...)
}

// failed notes that a forwarded stream broke.
func (e *recentEntry) failed(err *openai.Error) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.failure == nil {
		e.failure = err
	}
	e.mu.Unlock()
}

// fromTail reads the owner's figures from the end of its stream: a stream that carries no timings ended
// before its last event. Call with mu held.
func (e *recentEntry) fromTail() {
	e.ownerFigures(e.tail)
	e.tail = nil
	if e.rec.Timings == nil {
		e.rec.Status, e.rec.Error = 499, "the stream ended before the answer did (the client left, or the owner's stream was cut)"
		return
	}
	e.rec.Status = fiber.StatusOK
}

// ownerFigures finds the last timings and usage objects in an owner's answer. Call with mu held.
func (e *recentEntry) ownerFigures(b []byte) {
	if raw := lastObject(b, `"timings":`); raw != nil && len(raw) <= maxRecentTimings {
		e.rec.Timings = raw
	}
	if raw := lastObject(b, `"usage":`); raw != nil {
		var u struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			InputTokens      int `json:"input_tokens"`  // Anthropic, Responses
			OutputTokens     int `json:"output_tokens"` // Anthropic, Responses
			Details          struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
		if json.Unmarshal(raw, &u) == nil {
			e.rec.Usage = &recentUsage{PromptTokens: max(u.PromptTokens, u.InputTokens),
				CompletionTokens: max(u.CompletionTokens, u.OutputTokens), CachedTokens: u.Details.CachedTokens}
		}
	}
}

// lastObject returns the JSON object that follows the last occurrence of key (a quoted name and its colon) in
// b, or nil. A key inside a string value cannot match: its quotes would be escaped.
func lastObject(b []byte, key string) json.RawMessage {
	for end := len(b); end > 0; {
		i := bytes.LastIndex(b[:end], []byte(key))
		if i < 0 {
			return nil
		}
		end = i
		rest := bytes.TrimLeft(b[i+len(key):], " ")
		if len(rest) == 0 || rest[0] != '{' {
			continue // null, or not an object
		}
		var raw json.RawMessage
		if json.NewDecoder(bytes.NewReader(rest)).Decode(&raw) == nil {
			return raw
		}
	}
	return nil
}
