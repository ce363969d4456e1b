package anthropic

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

// render streams a generation's events as the gateway's stream writer does.
func render(m apicore.Meta, evs []engine.Event) []byte {
	s := NewStream(m)
	var out []byte
	for _, ev := range evs {
		if ev.Final != nil {
			out = s.Final(out, ev.Final)
			continue
		}
		out = s.Event(out, ev)
	}
	return out
}

// sse is one server-sent event.
type sse struct {
	name string
	data map[string]any
}

// decodeSSE splits a stream into events (apitest.SSE checks the framing Anthropic's SDKs rely on) and decodes
// each one's data, which must be a JSON object whose type is the event's name.
func decodeSSE(t *testing.T, stream []byte) []sse {
	t.Helper()
	var out []sse
	for _, e := range apitest.SSE(t, stream) {
		ev := sse{name: e.Name}
		if err := json.Unmarshal(e.Data, &ev.data); err != nil {
			t.Fatalf("event %s %s: %v", e.Name, e.Data, err)
		}
		if ev.data["type"] != ev.name {
			t.Fatalf("event %s carries data of type %v", ev.name, ev.data["type"])
		}
		out = append(out, ev)
	}
	return out
}

// accumulate checks the order of a stream's events (message_start first, blocks opened in index order and
// closed before the next opens, deltas only to the open block, message_delta and message_stop last) and
// builds the message they describe, as Anthropic's SDKs do.
func accumulate(t *testing.T, evs []sse) map[string]any {
	t.Helper()
	if len(evs) == 0 || evs[0].name != "message_start" {
		t.Fatalf("the stream does not start with message_start")
	}
	msg := evs[0].data["message"].(map[string]any)
	var content []any
	open := -1
	partial := ""
	for i, ev := range evs[1:] {
		index := -1
		if v, ok := ev.data["index"].(float64); ok {
			index = int(v)
		}
		switch ev.name {
		case "ping":
		case "content_block_start":
			if open != -1 || index != len(content) {
				t.Fatalf("event %d: block %d starts while block %d is open (%d blocks so far)", i+1, index, open, len(content))
			}
			open = index
			content = append(content, ev.data["content_block"])
			partial = ""
		case "content_block_delta":
			if index != open {
				t.Fatalf("event %d: a delta of block %d while block %d is open", i+1, index, open)
			}
			block := content[index].(map[string]any)
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				block["text"] = block["text"].(string) + d["text"].(string)
			case "thinking_delta":
				block["thinking"] = block["thinking"].(string) + d["thinking"].(string)
			case "signature_delta":
				block["signature"] = d["signature"]
			case "input_json_delta":
				partial += d["partial_json"].(string)
			default:
				t.Fatalf("event %d: delta of type %v", i+1, d["type"])
			}
		case "content_block_stop":
			if index != open {
				t.Fatalf("event %d: block %d stops while block %d is open", i+1, index, open)
			}
			if block := content[index].(map[string]any); block["type"] == "tool_use" && partial != "" {
				var input any
				if err := json.Unmarshal([]byte(partial), &input); err != nil {
					t.Fatalf("block %d: input %q: %v", index, partial, err)
				}
				block["input"] = input
			}
			open = -1
		case "message_delta":
			if open != -1 {
				t.Fatalf("message_delta while block %d is open", open)
			}
			d := ev.data["delta"].(map[string]any)
			msg["stop_reason"], msg["stop_sequence"] = d["stop_reason"], d["stop_sequence"]
			msg["usage"] = ev.data["usage"]
			msg["timings"] = ev.data["timings"]
		case "message_stop":
			if i+1 != len(evs)-1 {
				t.Fatalf("message_stop is not the last event")
			}
		default:
			t.Fatalf("event %d: unexpected %s", i+1, ev.name)
		}
	}
	if evs[len(evs)-1].name != "message_stop" {
		t.Fatalf("the stream does not end with message_stop")
	}
	if content == nil {
		content = []any{}
	}
	msg["content"] = content
	return msg
}

// TestStreamGolden renders each generation as a stream (testdata/stream_<name>.sse), checks the order of its
// events, and checks that accumulating them gives the message the whole answer is.
func TestStreamGolden(t *testing.T) {
	t.Parallel()
	for name, evs := range events {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream := render(meta, evs)
			apitest.Golden(t, "stream_"+name+".sse", stream)
			got := accumulate(t, decodeSSE(t, stream))
			var want map[string]any
			if err := json.Unmarshal(AppendMessage(nil, meta, apitest.Result(events[name]...)), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("the stream accumulates to\n%s\nthe message is\n%s", g, w)
			}
		})
	}
}

func TestStreamPing(t *testing.T) {
	t.Parallel()
	apitest.Golden(t, "stream_ping.sse", Ping(nil))
	decodeSSE(t, Ping(nil))
}

// TestStreamFail: an error after the stream started is an error event, after what was sent; an encoder
// made only to report a broken hop sends the error alone (the owner sent message_start).
func TestStreamFail(t *testing.T) {
	t.Parallel()
	s := NewStream(meta)
	out := s.Event(nil, engine.Event{Token: &engine.Token{Text: "Hel"}})
	out = s.Fail(out, apicore.Unavailable("node n2 stopped during the request (request id r1)"))
	apitest.Golden(t, "stream_error.sse", out)
	evs := decodeSSE(t, out)
	if last := evs[len(evs)-1]; last.name != "error" || last.data["error"].(map[string]any)["type"] != TypeOverloaded {
		t.Errorf("last event %+v", last)
	}
	alone := NewStream(meta).Fail(nil, apicore.Internal("x"))
	if evs := decodeSSE(t, alone); len(evs) != 1 || evs[0].name != "error" {
		t.Errorf("a fresh stream's failure is %s", alone)
	}
}

// TestStreamSplits: however the engine cuts the text, thinking and arguments into tokens, the stream
// accumulates to the same message.
func TestStreamSplits(t *testing.T) {
	t.Parallel()
	const thinking, text, args = "Let me think about é.", "Hello \"there\".", `{"city":"Zürich","days":[1,2]}`
	for n := 1; n <= 7; n++ {
		var evs []engine.Event
		for _, piece := range pieces(thinking, n) {
			evs = append(evs, engine.Event{Token: &engine.Token{Reasoning: piece}})
		}
		for _, piece := range pieces(text, n) {
			evs = append(evs, engine.Event{Token: &engine.Token{Text: piece}})
		}
		evs = append(evs, engine.Event{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{ID: "c1", Name: "f"}}}})
		for _, piece := range pieces(args, n) {
			evs = append(evs, engine.Event{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Arguments: piece}}}})
		}
		evs = append(evs, engine.Event{Final: withCalls(apitest.Final(engine.FinishToolCalls, usage), engine.ToolCall{ID: "c1", Name: "f", Arguments: args})})
		got := accumulate(t, decodeSSE(t, render(meta, evs)))
		r := &apicore.Result{}
		for _, ev := range evs {
			r.Add(ev)
		}
		var want map[string]any
		_ = json.Unmarshal(AppendMessage(nil, meta, r), &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pieces of %d bytes: %v\nwant %v", n, got, want)
		}
	}
}

// pieces cuts s into pieces of about n bytes, never inside a UTF-8 character.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		cut := min(n, len(s))
		for cut < len(s) && s[cut]&0xc0 == 0x80 {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}

// TestStreamMessageStartUsage: message_start says the prompt's tokens when progress told them first.
func TestStreamMessageStartUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		first engine.Event
		want  float64
	}{
		{engine.Event{Progress: &engine.Progress{Done: 3, Total: 9}}, 9},
		{engine.Event{Token: &engine.Token{Text: "x"}}, 0},
	} {
		evs := decodeSSE(t, NewStream(meta).Event(nil, c.first))
		usage := evs[0].data["message"].(map[string]any)["usage"].(map[string]any)
		if usage["input_tokens"] != c.want {
			t.Errorf("first event %+v: usage %v", c.first, usage)
		}
	}
	if bytes.Count(render(meta, events["text"]), []byte("event: message_start")) != 1 {
		t.Error("more than one message_start")
	}
}
