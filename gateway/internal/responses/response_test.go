package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3/packages/ssestream"
	sdkresponses "github.com/openai/openai-go/v3/responses"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

func init() {
	now = func() time.Time { return time.Unix(1700000009, 0) } // completed_at, in every golden file
	sealRand = zeros{}                                         // one nonce: sealed text in golden files
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// testSealer seals with a fixed key.
var testSealer = func() *Sealer {
	s, err := NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	return s
}()

var meta = apitest.Meta("resp_abc", "")

// echoOf parses a request body for its echo.
func echoOf(t *testing.T, body string) *Echo {
	t.Helper()
	r, err := Parse([]byte(body), Options{Sealer: testSealer})
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r.Echo
}

const plainBody = `{"model":"m","input":"hi"}`

// fullBody sets every parameter a response echoes.
const fullBody = `{"model":"m","input":"hi","instructions":"be <brief>","max_output_tokens":64,"max_tool_calls":2,"metadata":{"b":"2","a":"1"},
	"parallel_tool_calls":false,"reasoning":{"effort":"low","summary":"auto"},"temperature":0.5,"top_p":0.9,"truncation":"auto","user":"u1",
	"text":{"format":{"type":"json_schema","name":"out","description":"the answer","schema":{"type":"object", "properties":{"a":{"type":"string"}}},"strict":true},"verbosity":"low"},
	"tools":[` + weatherTool + `,{"type":"function","name":"noargs","strict":false}],"tool_choice":{"type":"function","name":"get_weather"}}`

// usage is what every test generation used.
var usage = engine.Usage{PromptTokens: 5, CompletionTokens: 4, CachedTokens: 2}

// A script is what an engine says for one generation, ending with its final event.
type script struct {
	name   string
	meta   apicore.Meta
	body   string
	events []engine.Event
}

// codexBody has what Codex sends: tools in a namespace, a custom tool with a lark grammar in another (as an
// additional_tools item), a custom tool of free text, a hosted tool; sealed reasoning with a summary.
const codexBody = `{"model":"m","stream":true,"store":false,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"high","summary":"auto"},
	"prompt_cache_key":"k1","client_metadata":{"turn_id":"t"},
	"tools":[{"type":"namespace","name":"shell","description":"Shell tools.","tools":[{"type":"function","name":"list","strict":false,"parameters":{"type":"object","properties":{"dir":{"type":"string"}}}}]},
		{"type":"custom","name":"apply","description":"Apply a patch."},{"type":"web_search","external_web_access":false}],
	"input":[{"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"functions","description":"","tools":[
		{"type":"custom","name":"exec","description":"Run JavaScript.","format":{"type":"grammar","syntax":"lark","definition":"start: /[\\s\\S]+/"}}]}]},
		{"type":"message","role":"developer","content":[{"type":"input_text","text":"Be brief."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"ls"}]}]}`

var codexCalls = func() *engine.Final {
	f := apitest.Final(engine.FinishToolCalls, usage)
	f.ToolCalls = []engine.ToolCall{
		{ID: "call_1", Name: "shell__list", Arguments: `{"dir":"."}`},
		{ID: "call_2", Name: "functions__exec", Arguments: `{"input":"text(\"a\")"}`},
		{ID: "call_3", Name: "apply", Arguments: `{"input":"*** patch"}`},
	}
	return f
}()

func scripts() []script {
	calls := apitest.Final(engine.FinishToolCalls, usage)
	calls.ToolCalls = []engine.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
		{ID: "call_2", Name: "get_weather", Arguments: `{"city":"Lima"}`},
		{ID: "", Name: "noargs", Arguments: `{}`}, // not streamed, and the engine gave it no id
	}
	held := apitest.Final(engine.FinishStop, usage)
	held.Text = "!" // held back until the end, as a possible stop string is
	return []script{
		{name: "text", meta: meta, body: plainBody, events: []engine.Event{
			{Progress: &engine.Progress{Done: 5, Total: 5}}, apitest.Text("Hel"), apitest.Text(""), apitest.Text("lo \"you\"\n"), {Final: held}}},
		{name: "reasoning", meta: apitest.Routed(meta), body: plainBody, events: []engine.Event{
			apitest.Reasoning("Think"), apitest.Reasoning(" more."), apitest.Text("Answer."), {Final: apitest.Final(engine.FinishStop, usage)}}},
		{name: "tools", meta: meta, body: fullBody, events: []engine.Event{
			apitest.Reasoning("Weather."), apitest.Text("Let me check."),
			apitest.Calls(engine.ToolCallDelta{Index: 0, ID: "call_1", Name: "get_weather"}), apitest.Calls(engine.ToolCallDelta{Index: 0, Arguments: `{"city":`}),
			apitest.Calls(engine.ToolCallDelta{Index: 0, Arguments: `"Oslo"}`}, engine.ToolCallDelta{Index: 1, ID: "call_2", Name: "get_weather", Arguments: `{"city":"Lima"}`}),
			{Final: calls}}},
		{name: "incomplete", meta: meta, body: plainBody, events: []engine.Event{
			apitest.Text("one"), apitest.Text(" two"), {Final: apitest.Final(engine.FinishLength, usage)}}},
		{name: "incomplete_reasoning", meta: meta, body: plainBody, events: []engine.Event{
			apitest.Reasoning("hmm"), {Final: apitest.Final(engine.FinishLength, usage)}}},
		{name: "empty", meta: meta, body: plainBody, events: []engine.Event{{Final: apitest.Final(engine.FinishStop, usage)}}},
		{name: "codex", meta: meta, body: codexBody, events: []engine.Event{
			apitest.Reasoning("List "), apitest.Reasoning("the files."),
			apitest.Calls(engine.ToolCallDelta{Index: 0, ID: "call_1", Name: "shell__list"}, engine.ToolCallDelta{Index: 0, Arguments: `{"dir":`}),
			apitest.Calls(engine.ToolCallDelta{Index: 0, Arguments: `"."}`}),
			apitest.Calls(engine.ToolCallDelta{Index: 1, ID: "call_2", Name: "functions__exec"}, engine.ToolCallDelta{Index: 1, Arguments: `{"input":"text(\"a`}),
			apitest.Calls(engine.ToolCallDelta{Index: 1, Arguments: `\")"}`}),
			apitest.Calls(engine.ToolCallDelta{Index: 2, ID: "call_3", Name: "apply"}, engine.ToolCallDelta{Index: 2, Arguments: `{"input":"*** patch"}`}),
			{Final: codexCalls}}},
	}
}

// whole renders a script as a whole answer.
func whole(t *testing.T, s script) []byte {
	t.Helper()
	rs := apicore.NewResults(1)
	for _, ev := range s.events {
		rs.Add(ev)
	}
	return AppendResponse(nil, s.meta, echoOf(t, s.body), rs[0])
}

// streamed renders a script as a stream, and fail (when set) after the events instead of a final one.
func streamed(t *testing.T, s script, fail *apicore.Error) []byte {
	t.Helper()
	st := NewStream(s.meta, echoOf(t, s.body))
	dst := st.Start(nil)
	for _, ev := range s.events {
		switch {
		case ev.Token != nil:
			dst = st.Token(dst, ev.Token)
		case ev.Final != nil && fail == nil:
			dst = st.Final(dst, ev.Final)
		}
	}
	if fail != nil {
		dst = st.Fail(dst, fail)
	}
	return dst
}

// TestGolden renders each response shape, whole and streamed, and compares them with testdata/<name>.json
// and testdata/<name>.sse. Run with -update to rewrite them after an intended change.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, s := range scripts() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			got := whole(t, s)
			apitest.GoldenJSON(t, "response_"+s.name+".json", got)
			apitest.Golden(t, "stream_"+s.name+".sse", streamed(t, s, nil))
		})
	}
	failed := scripts()[0]
	failed.events = failed.events[:4]
	apitest.Golden(t, "stream_failed.sse", streamed(t, failed, apicore.FromEngine(&engine.Error{Code: engine.CodeInternal, Message: "the engine failed mid-stream"})))
	// A hop whose owner died: the entry gateway has only the error to say, on a stream of its own.
	apitest.Golden(t, "stream_failed_hop.sse", NewStream(meta, nil).Fail(nil, apicore.Unavailable("node n2 stopped during the request (request id abc)")))
	apitest.Golden(t, "error_not_stored.json", append(NotStored("resp_123").AppendEnvelope(nil), '\n'))
}

// TestStreamIsTheResponse: every stream's events are numbered from 0 and name their type twice; the response
// of its last event is the whole answer's, byte for byte; its deltas add up to its text.
func TestStreamIsTheResponse(t *testing.T) {
	t.Parallel()
	for _, s := range scripts() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			evs := apitest.SSE(t, streamed(t, s, nil))
			deltas := map[string]*strings.Builder{}
			for i, ev := range evs {
				var head struct {
					Type     string          `json:"type"`
					Seq      *int            `json:"sequence_number"`
					ItemID   string          `json:"item_id"`
					Delta    string          `json:"delta"`
					Response json.RawMessage `json:"response"`
				}
				if err := json.Unmarshal(ev.Data, &head); err != nil {
					t.Fatalf("event %d: %v: %s", i, err, ev.Data)
				}
				if head.Type != ev.Name || head.Seq == nil || *head.Seq != i {
					t.Errorf("event %d: type %q (line says %q), sequence_number %v", i, head.Type, ev.Name, head.Seq)
				}
				if strings.HasSuffix(head.Type, ".delta") {
					key := head.ItemID
					if head.Type == "response.reasoning_summary_text.delta" {
						key += "#summary" // a reasoning item's summary adds up apart from its text
					}
					if deltas[key] == nil {
						deltas[key] = &strings.Builder{}
					}
					deltas[key].WriteString(head.Delta)
				}
				if i == len(evs)-1 {
					if want := whole(t, s); !bytes.Equal(head.Response, want) {
						t.Errorf("the stream's response differs from the whole answer:\n got %s\nwant %s", head.Response, want)
					}
				}
			}
			var resp sdkresponses.Response
			if err := json.Unmarshal(whole(t, s), &resp); err != nil {
				t.Fatal(err)
			}
			for _, it := range resp.Output {
				var want string
				switch it.Type {
				case "message":
					want = it.Content[0].Text
				case "reasoning":
					want = it.Content[0].Text
				case "function_call":
					want = it.Arguments.OfString
				case "custom_tool_call":
					want = it.Input
				}
				got := ""
				if d := deltas[it.ID]; d != nil {
					got = d.String()
				}
				if got != want {
					t.Errorf("%s %s: deltas add up to %q, the item says %q", it.Type, it.ID, got, want)
				}
				if it.Type == "reasoning" {
					got, want := "", ""
					if d := deltas[it.ID+"#summary"]; d != nil {
						got = d.String()
					}
					if len(it.Summary) > 0 {
						want = it.Summary[0].Text
					}
					if got != want {
						t.Errorf("reasoning %s: summary deltas add up to %q, the item's summary says %q", it.ID, got, want)
					}
				}
			}
		})
	}
}

// TestOpenAIGoReads: the official Go client decodes every event and response, and reads what a client reads:
// output_text, the calls, the usage, the status; an error mid-stream ends its stream with the error.
func TestOpenAIGoReads(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		text, status  string
		calls, custom int
		reasoning     string
	}{
		"text":                 {text: "Hello \"you\"\n!", status: "completed"},
		"reasoning":            {text: "Answer.", status: "completed", reasoning: "Think more."},
		"tools":                {text: "Let me check.", status: "completed", calls: 3, reasoning: "Weather."},
		"incomplete":           {text: "one two", status: "incomplete"},
		"incomplete_reasoning": {text: "", status: "incomplete", reasoning: "hmm"},
		"empty":                {text: "", status: "completed"},
		"codex":                {text: "", status: "completed", calls: 1, custom: 2, reasoning: "List the files."},
	}
	for _, s := range scripts() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			w := want[s.name]
			stream := sdkStream(streamed(t, s, nil))
			var last sdkresponses.ResponseStreamEventUnion
			n := 0
			for stream.Next() {
				last = stream.Current()
				if last.SequenceNumber != int64(n) {
					t.Errorf("event %d has sequence_number %d", n, last.SequenceNumber)
				}
				n++
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			var resp sdkresponses.Response
			if err := json.Unmarshal(whole(t, s), &resp); err != nil {
				t.Fatal(err)
			}
			for _, r := range []sdkresponses.Response{resp, last.Response} {
				calls, custom, reasoningText := 0, 0, ""
				for _, it := range r.Output {
					switch v := it.AsAny().(type) {
					case sdkresponses.ResponseFunctionToolCall:
						calls++
						if v.CallID == "" || v.Name == "" || !json.Valid([]byte(v.Arguments)) || v.Status != "completed" {
							t.Errorf("call %+v", v)
						}
					case sdkresponses.ResponseCustomToolCall:
						custom++
						if v.CallID == "" || v.Name == "" || v.Input == "" {
							t.Errorf("custom call %+v", v)
						}
					case sdkresponses.ResponseReasoningItem:
						reasoningText += v.Content[0].Text
					}
				}
				if r.OutputText() != w.text || string(r.Status) != w.status || calls != w.calls || custom != w.custom || reasoningText != w.reasoning {
					t.Errorf("output_text %q status %q calls %d custom calls %d reasoning %q; want %+v", r.OutputText(), r.Status, calls, custom, reasoningText, w)
				}
				if r.Usage.InputTokens != 5 || r.Usage.OutputTokens != 4 || r.Usage.TotalTokens != 9 || r.Usage.InputTokensDetails.CachedTokens != 2 {
					t.Errorf("usage %+v", r.Usage)
				}
				if w.status == "incomplete" && r.IncompleteDetails.Reason != "max_output_tokens" {
					t.Errorf("incomplete_details %+v", r.IncompleteDetails)
				}
			}
		})
	}
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		s := scripts()[0]
		stream := sdkStream(streamed(t, s, apicore.FromEngine(&engine.Error{Code: engine.CodeInternal, Message: "the engine failed mid-stream"})))
		n := 0
		for stream.Next() {
			n++
		}
		var se *sdk.StreamError
		if err := stream.Err(); !errors.As(err, &se) || !strings.Contains(err.Error(), "the engine failed mid-stream") {
			t.Errorf("after %d events the stream ended with %v, want the engine's error", n, err)
		}
	})
}

func sdkStream(b []byte) *sdk.Stream[sdkresponses.ResponseStreamEventUnion] {
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(b))}
	return sdk.NewStream[sdkresponses.ResponseStreamEventUnion](sdk.NewDecoder(resp), nil)
}

// TestFailedStream: after an error the last event is response.failed with the error and the output so far.
func TestFailedStream(t *testing.T) {
	t.Parallel()
	s := scripts()[0]
	evs := apitest.SSE(t, streamed(t, s, apicore.TooManyRequests("the engine is at capacity")))
	if n := len(evs); n < 2 || evs[n-2].Name != "error" || evs[n-1].Name != "response.failed" {
		t.Fatalf("events end %v", evs)
	}
	var errEv sdkresponses.ResponseErrorEvent
	if err := json.Unmarshal(evs[len(evs)-2].Data, &errEv); err != nil || errEv.Code != "rate_limit_exceeded" || errEv.Message != "the engine is at capacity" {
		t.Errorf("error event %+v (%v)", errEv, err)
	}
	var failed sdkresponses.ResponseFailedEvent
	if err := json.Unmarshal(evs[len(evs)-1].Data, &failed); err != nil {
		t.Fatal(err)
	}
	r := failed.Response
	if r.Status != "failed" || r.Error.Code != "rate_limit_exceeded" || len(r.Output) != 1 || r.Output[0].Status != "incomplete" || r.OutputText() != "Hello \"you\"\n" {
		t.Errorf("failed response %s", r.RawJSON())
	}
}

func TestRename(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{{"messages", "input"}, {"max_tokens", "max_output_tokens"}, {"response_format", "text.format"}, {"tools", "tools"}, {"", ""}} {
		e := apicore.BadRequest(c.in, "x")
		if got := Rename(e); got.Param != c.want || e.Param != c.in {
			t.Errorf("%q: renamed %q (the original now %q), want %q", c.in, got.Param, e.Param, c.want)
		}
	}
}

// BenchmarkStreamToken is the hot path: one text token of a stream.
func BenchmarkStreamToken(b *testing.B) {
	st := NewStream(meta, nil)
	buf := st.Start(nil)
	tok := &engine.Token{Text: " word"}
	b.ReportAllocs()
	for b.Loop() {
		buf = st.Token(buf[:0], tok)
	}
}
