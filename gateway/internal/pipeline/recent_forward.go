package pipeline

import (
	"bytes"
	"encoding/json"
)

// What the gateway learns of a request it forwarded from the owner's answer: the owner's timings and usage,
// read from a whole answer or from the end of a stream.

// ownerFigures are the timings object and usage of an owner's answer.
type ownerFigures struct {
	timings json.RawMessage
	usage   *ownerUsage
}

type ownerUsage struct {
	PromptTokens, CompletionTokens, CachedTokens int
}

// ownerFiguresOf finds the last timings and usage objects in an owner's answer.
func ownerFiguresOf(b []byte) ownerFigures {
	var f ownerFigures
	if raw := lastObject(b, `"timings":`); raw != nil && len(raw) <= maxRecentTimings {
		f.timings = raw
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
			f.usage = &ownerUsage{PromptTokens: max(u.PromptTokens, u.InputTokens),
				CompletionTokens: max(u.CompletionTokens, u.OutputTokens), CachedTokens: u.Details.CachedTokens}
		}
	}
	return f
}

// ownerError is the message of an owner's error envelope ("" when there is none to read).
func ownerError(body []byte) string {
	var env struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if len(body) < 64<<10 && json.Unmarshal(body, &env) == nil {
		return env.Error.Message
	}
	return ""
}

// keepTail keeps the end of a forwarded stream, where the owner's timings and usage are: at most recentTail
// bytes of tail followed by chunk.
func keepTail(tail, chunk []byte) []byte {
	if len(chunk) >= recentTail {
		return append(tail[:0], chunk[len(chunk)-recentTail:]...)
	}
	if over := len(tail) + len(chunk) - recentTail; over > 0 {
		tail = append(tail[:0], tail[over:]...)
	}
	return append(tail, chunk...)
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
