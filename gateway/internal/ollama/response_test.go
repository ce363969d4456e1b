package ollama

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

var epoch = time.Date(2026, 3, 14, 15, 9, 26, 535897000, time.UTC)

// clock ticks a millisecond per object, so golden streams show each object's own created_at.
func clock() func() time.Time {
	t := epoch
	return func() time.Time { t = t.Add(time.Millisecond); return t }
}

func final(reason engine.FinishReason) *engine.Final {
	return &engine.Final{
		FinishReason: reason,
		Usage:        engine.Usage{PromptTokens: 26, CompletionTokens: 3},
		Timings: engine.Timings{Queue: 150 * time.Microsecond, Prefill: 2 * time.Millisecond, FirstToken: 2500 * time.Microsecond,
			Decode: 4 * time.Millisecond, Total: 6500 * time.Microsecond, PrefillSource: engine.PrefillLocal},
	}
}

// calls are the final's calls of a choice that called two tools.
var calls = []engine.ToolCall{
	{ID: "call_a", Name: "get_weather", Arguments: `{"city": "Oslo"}`},
	{ID: "call_b", Name: "get_weather", Arguments: "{\n  \"city\": \"Lima\"\n}"},
}

// routed is the route of a request that entered at n1, was forwarded to n2 and prefilled on n3.
func routed() *apicore.Route {
	return &apicore.Route{EntryNode: "n1", DecodeNode: "n2", DecodeInstance: "n2-0", PrefillInstance: "n3-0", PrefillNode: "n3",
		PrefillAddress: "10.0.0.3:7000", Forwarded: true,
		Reason: "auto: remote 14.9 s (first token 2.16 s) vs local 32.7 s", Time: 300 * time.Microsecond, Admission: 40 * time.Microsecond}
}

func TestAnswers(t *testing.T) {
	t.Parallel()
	withCalls := final(engine.FinishToolCalls)
	withCalls.ToolCalls = calls
	cut := final(engine.FinishLength)
	cut.ToolCalls = []engine.ToolCall{{ID: "call_c", Name: "get_weather", Arguments: `{"city": "Ber`}}
	cases := []struct {
		name  string
		reply Reply
		res   *apicore.Result
	}{
		{"chat", Reply{Kind: Chat, Model: "echo:latest"},
			apitest.Result(apitest.Text("Hello"), apitest.Text(" <world> & \"you\"\n"), engine.Event{Final: final(engine.FinishStop)})},
		{"chat_length", Reply{Kind: Chat, Model: "echo"},
			apitest.Result(apitest.Text("Hel"), engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength, Text: "lo", Usage: engine.Usage{PromptTokens: 1, CompletionTokens: 2}}})},
		{"chat_thinking", Reply{Kind: Chat, Model: "qwen3:8b"},
			apitest.Result(engine.Event{Token: &engine.Token{Reasoning: "about: "}}, engine.Event{Token: &engine.Token{Reasoning: "hi"}}, apitest.Text("hi"),
				engine.Event{Final: final(engine.FinishStop)})},
		{"chat_tool_calls", Reply{Kind: Chat, Model: "echo:latest"},
			apitest.Result(engine.Event{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather"}}}},
				engine.Event{Final: withCalls})},
		{"chat_cut_tool_call", Reply{Kind: Chat, Model: "echo:latest"}, apitest.Result(engine.Event{Final: cut})},
		{"chat_logprobs", Reply{Kind: Chat, Model: "echo:latest", Logprobs: true},
			apitest.Result(engine.Event{Token: &engine.Token{Text: "Hé", Logprob: apitest.Logprob("Hé", -0.5, -2.5)}}, engine.Event{Token: &engine.Token{Text: "!", Logprob: apitest.Logprob("!", -0.25, -2.5)}},
				engine.Event{Final: final(engine.FinishStop)})},
		{"chat_routed", Reply{Kind: Chat, Model: "echo:latest", Route: routed()},
			apitest.Result(apitest.Text("hi"), engine.Event{Final: func() *engine.Final {
				f := final(engine.FinishStop)
				f.Timings.PrefillSource = engine.PrefillRemote
				f.Timings.Remote = &engine.RemotePrefill{Endpoint: "10.0.0.3:7000", InstanceID: "n3-0", Tokens: 25, Bytes: 1 << 20,
					Wait: time.Millisecond, Transfer: 2 * time.Millisecond, Attempts: 1}
				return f
			}()})},
		{"generate", Reply{Kind: Generate, Model: "echo:latest"},
			apitest.Result(apitest.Text("The sky"), apitest.Text(" is blue."), engine.Event{Final: final(engine.FinishStop)})},
		{"generate_thinking", Reply{Kind: Generate, Model: "echo:latest"},
			apitest.Result(engine.Event{Token: &engine.Token{Reasoning: "about: sky"}}, apitest.Text("blue"), engine.Event{Final: final(engine.FinishStop)})},
		{"generate_logprobs", Reply{Kind: Generate, Model: "echo:latest", Logprobs: true},
			apitest.Result(engine.Event{Token: &engine.Token{Text: "a", Logprob: apitest.Logprob("a", -1, -2.5)}}, engine.Event{Final: final(engine.FinishLength)})},
		{"generate_ignores_tool_calls", Reply{Kind: Generate, Model: "echo:latest"}, apitest.Result(engine.Event{Final: withCalls})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := c.reply.AppendAnswer(nil, epoch, c.res)
			checkObject(t, got)
			apitest.Golden(t, "answer_"+c.name+".json", append(got, '\n'))
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, reason string
		kind         Kind
	}{{"chat_load", "load", Chat}, {"chat_unload", "unload", Chat}, {"generate_load", "load", Generate}, {"generate_unload", "unload", Generate}} {
		got := Reply{Kind: c.kind, Model: "echo:latest"}.AppendLoad(nil, epoch, c.reason)
		checkObject(t, got)
		apitest.Golden(t, "answer_"+c.name+".json", append(got, '\n'))
	}
}

func TestStreams(t *testing.T) {
	t.Parallel()
	withCalls := final(engine.FinishToolCalls)
	withCalls.ToolCalls = calls
	held := final(engine.FinishStop)
	held.Text, held.Reasoning = " END?", ""
	cases := []struct {
		name   string
		reply  Reply
		events []engine.Event
		fail   *apicore.Error // ends the stream instead of a final
	}{
		{"chat", Reply{Kind: Chat, Model: "echo:latest"}, []engine.Event{
			{Progress: &engine.Progress{Done: 26, Total: 26}}, apitest.Text("Hello"), apitest.Text(""), apitest.Text(" world"), {Final: held},
		}, nil},
		{"chat_thinking", Reply{Kind: Chat, Model: "echo:latest"}, []engine.Event{
			{Token: &engine.Token{Reasoning: "about: "}}, {Token: &engine.Token{Reasoning: "hi", Text: ""}}, apitest.Text("hi"), {Final: final(engine.FinishStop)},
		}, nil},
		// Two calls stream in pieces: the first is written whole when the second starts, the second at the end,
		// from the final event's calls.
		{"chat_tool_calls", Reply{Kind: Chat, Model: "echo:latest"}, []engine.Event{
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather"}}}},
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"city": `}}}},
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Oslo"}`}}}},
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 1, ID: "call_b", Name: "get_weather"}, {Index: 1, Arguments: `{"city"`}}}},
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 1, Arguments: `: "Lima"}`}}}},
			{Final: withCalls},
		}, nil},
		{"chat_logprobs", Reply{Kind: Chat, Model: "echo:latest", Logprobs: true}, []engine.Event{
			{Token: &engine.Token{Text: "Hé", Logprob: apitest.Logprob("Hé", -0.5, -2.5)}}, {Token: &engine.Token{Logprob: apitest.Logprob("\xe2", -0.1, -2.5)}}, {Final: final(engine.FinishLength)},
		}, nil},
		{"chat_fail", Reply{Kind: Chat, Model: "echo:latest"}, []engine.Event{apitest.Text("Hel")},
			apicore.Unavailable("node n2 stopped during the request (request id r1)")},
		{"generate", Reply{Kind: Generate, Model: "echo:latest", Route: routed()}, []engine.Event{
			apitest.Text("The sky"), {Token: &engine.Token{Reasoning: "hmm"}}, apitest.Text(" is blue."), {Final: held},
		}, nil},
		{"generate_tool_calls_ignored", Reply{Kind: Generate, Model: "echo:latest"}, []engine.Event{
			{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather"}}}}, {Final: withCalls},
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.reply.NewStream(clock())
			var out []byte
			for _, ev := range c.events {
				if ev.Final != nil {
					out = s.Final(out, ev.Final)
				} else {
					out = s.Event(out, ev)
				}
			}
			if c.fail != nil {
				out = s.Fail(out, c.fail)
			}
			lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
			for _, l := range lines {
				checkObject(t, l)
			}
			apitest.Golden(t, "stream_"+c.name+".ndjson", out)
		})
	}
}

// TestStreamMatchesAnswer: what a client assembles from a stream (contents, thinking, calls) is what the
// answer of the same events says.
func TestStreamMatchesAnswer(t *testing.T) {
	t.Parallel()
	withCalls := final(engine.FinishToolCalls)
	withCalls.ToolCalls = calls
	withCalls.Text = "!"
	events := []engine.Event{
		{Token: &engine.Token{Reasoning: "plan"}}, apitest.Text("a"), apitest.Text("b"),
		{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}}},
		{Token: &engine.Token{ToolCalls: []engine.ToolCallDelta{{Index: 1, ID: "call_b", Name: "get_weather"}}}},
		{Final: withCalls},
	}
	r := Reply{Kind: Chat, Model: "m"}
	s := r.NewStream(clock())
	var stream []byte
	for _, ev := range events {
		if ev.Final != nil {
			stream = s.Final(stream, ev.Final)
		} else {
			stream = s.Event(stream, ev)
		}
	}
	var streamed chatObject
	for _, l := range bytes.Split(bytes.TrimSpace(stream), []byte("\n")) {
		var o chatObject
		if err := json.Unmarshal(l, &o); err != nil {
			t.Fatal(err)
		}
		streamed.Message.Role = o.Message.Role
		streamed.Message.Content += o.Message.Content
		streamed.Message.Thinking += o.Message.Thinking
		streamed.Message.ToolCalls = append(streamed.Message.ToolCalls, o.Message.ToolCalls...)
	}
	var whole chatObject
	if err := json.Unmarshal(r.AppendAnswer(nil, epoch, apitest.Result(events...)), &whole); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(streamed.Message)
	b, _ := json.Marshal(whole.Message)
	if !bytes.Equal(a, b) {
		t.Errorf("streamed %s\n  answer %s", a, b)
	}
}

// chatObject is the part of Ollama's ChatResponse these tests read.
type chatObject struct {
	Model     string    `json:"model"`
	CreatedAt time.Time `json:"created_at"`
	Message   struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Thinking  string `json:"thinking,omitempty"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Index     int            `json:"index"`
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls,omitempty"`
	} `json:"message"`
	Done bool `json:"done"`
}

// checkObject: one line of valid JSON, which decodes as Ollama's clients decode it (created_at a time,
// arguments objects).
func checkObject(t *testing.T, b []byte) {
	t.Helper()
	if bytes.ContainsRune(b, '\n') || !json.Valid(b) {
		t.Fatalf("not one line of JSON: %s", b)
	}
	var o chatObject
	if err := json.Unmarshal(b, &o); err != nil {
		t.Errorf("%s: %v", b, err)
	}
}
