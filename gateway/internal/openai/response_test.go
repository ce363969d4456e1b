package openai

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `quote " backslash \ slash /`, "ctl \x00\x01\x1f\t\n\r", "utf8 é 漢字 🙂", "bad \xff\xfe utf8", "line sep \u2028 \u2029", "<html>&"} {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: not valid JSON: %s (%v)", s, got, err)
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if back != want {
			t.Errorf("%q: round trip gave %q", s, back)
		}
	}
}

func meta() Meta {
	return Meta{ID: "chatcmpl-abc", Created: 1700000000, Model: "m", Fingerprint: "fp_0123"}
}

// routed is meta with the route of a request forwarded from n3 to n2 and prefilled on n1.
func routed() Meta {
	m := meta()
	m.Route = &Route{EntryNode: "n3", DecodeNode: "n2", DecodeInstance: "n2-0", PrefillInstance: "n1-0", PrefillNode: "n1",
		PrefillAddress: "127.0.0.1:7000", Forwarded: true,
		Reason: "auto: remote 14.9 s (first token 2.16 s) vs local 32.7 s", Time: 250 * time.Microsecond, Admission: 40 * time.Microsecond}
	return m
}

func final() *engine.Final {
	return &engine.Final{
		FinishReason: engine.FinishLength,
		Usage:        engine.Usage{PromptTokens: 5, CompletionTokens: 2, CachedTokens: 1},
		Timings: engine.Timings{
			Queue: time.Millisecond, Prefill: 2 * time.Millisecond, FirstToken: 3 * time.Millisecond, Decode: 4 * time.Millisecond,
			Total: 7 * time.Millisecond, PrefillSource: engine.PrefillRemote,
			Remote: &engine.RemotePrefill{Endpoint: "10.0.0.2:7000", InstanceID: "p0", Tokens: 4, Bytes: 4096, Transfer: time.Millisecond, Attempts: 1},
		},
	}
}

// toolResult is a choice that thought, then called a tool without text.
func toolResult() *Result {
	r := &Result{}
	r.Add(engine.Event{Token: &engine.Token{ID: 1, Reasoning: "The user wants the weather."}})
	r.Add(engine.Event{Token: &engine.Token{ID: 2, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_abc", Name: "get_weather"}}}})
	f := final()
	f.FinishReason = engine.FinishToolCalls
	f.ToolCalls = []engine.ToolCall{{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}
	r.Add(engine.Event{Final: f})
	return r
}

func result() *Result {
	r := &Result{}
	lp := func(tok string, v float64) *engine.Logprob {
		return &engine.Logprob{Token: tok, Bytes: []byte(tok), Logprob: v, Top: []engine.TopLogprob{{ID: 1, Token: tok, Bytes: []byte(tok), Logprob: v}, {ID: 2, Token: "x", Bytes: []byte("x"), Logprob: -3}}}
	}
	r.Add(engine.Event{Progress: &engine.Progress{Done: 5, Total: 5}})
	r.Add(engine.Event{Token: &engine.Token{ID: 1, Text: "Hé", Logprob: lp("Hé", -0.5)}})
	r.Add(engine.Event{Token: &engine.Token{ID: 2, Text: "llo\n", Logprob: lp("llo\n", -0.25)}})
	r.Add(engine.Event{Final: final()})
	return r
}

// TestGolden renders each response shape and compares it with testdata/<name>.json, which also must be
// valid JSON. Run with -update to rewrite them after an intended change.
func TestGolden(t *testing.T) {
	t.Parallel()
	cases := map[string][]byte{
		"chat_completion":        AppendChatCompletion(nil, meta(), Results{result()}, true),
		"chat_completion_plain":  AppendChatCompletion(nil, meta(), Results{result()}, false),
		"chat_completion_routed": AppendChatCompletion(nil, routed(), Results{result()}, false),
		"chat_completion_tools":  AppendChatCompletion(nil, meta(), Results{toolResult()}, false),
		"chat_completion_n2":     AppendChatCompletion(nil, meta(), Results{result(), toolResult()}, false),
		"chat_chunk_call_start": AppendChatChunk(nil, meta(), ChatChunk{Index: 1, ToolCalls: []engine.ToolCallDelta{
			{Index: 0, ID: "call_abc", Name: "get_weather", Arguments: ""}}}),
		"chat_chunk_call_args":   AppendChatChunk(nil, meta(), ChatChunk{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"city":`}}}),
		"chat_chunk_reasoning":   AppendChatChunk(nil, meta(), ChatChunk{Role: true, Reasoning: "Let me think."}),
		"chat_chunk_role":        AppendChatChunk(nil, meta(), ChatChunk{Role: true, UsageNull: true}),
		"chat_chunk_content":     AppendChatChunk(nil, meta(), ChatChunk{Content: "hi \"there\"", Logprobs: result().Logprobs[:1]}),
		"chat_chunk_final":       AppendChatChunk(nil, meta(), ChatChunk{Finish: final(), UsageNull: true}),
		"usage_chunk":            AppendUsageChunk(nil, "chat.completion.chunk", meta(), final().Usage),
		"completion":             AppendCompletion(nil, meta(), Results{result()}, true),
		"completion_chunk":       AppendCompletionChunk(nil, meta(), CompletionChunk{Text: "llo", Logprobs: result().Logprobs[1:], TextOffset: 3}),
		"completion_chunk_final": AppendCompletionChunk(nil, meta(), CompletionChunk{Finish: final()}),
		"models":                 AppendModelList(nil, []Model{{ID: "a/b", Created: 1, OwnedBy: "duet"}, {ID: "c", Created: 2, OwnedBy: "duet"}}),
		"error_model_not_found":  ModelNotFound("gpt-9").AppendEnvelope(nil),
		"error_bad_request":      BadRequest("messages[0].role", "bad role").AppendEnvelope(nil),
	}
	for name, got := range cases {
		t.Run(name, func(t *testing.T) {
			if !json.Valid(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
			var pretty bytes.Buffer
			_ = json.Indent(&pretty, got, "", "  ")
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("%s differs from %s:\n%s", name, path, pretty.Bytes())
			}
		})
	}
}

func TestFromEngine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code   engine.Code
		status int
	}{
		{engine.CodeInvalidArgument, 400}, {engine.CodeContextLength, 400}, {engine.CodeNotFound, 404},
		{engine.CodeResourceExhausted, 429}, {engine.CodeUnavailable, 503}, {engine.CodeInternal, 500}, {"weird", 500},
	}
	for _, c := range cases {
		got := FromEngine(&engine.Error{Code: c.code, Message: "m", Param: "p"})
		if got.Status != c.status {
			t.Errorf("%s: status %d, want %d", c.code, got.Status, c.status)
		}
	}
}

// A stream's chunks read the same with their opening rendered once (WithChunkHead) as rendered each time, and
// a head for one object is not used for another.
func TestChunkHead(t *testing.T) {
	t.Parallel()
	m := Meta{ID: "chatcmpl-a\"b", Created: 1700000000, Model: "org/model\u2028x", Fingerprint: "fp_1"}
	final := &engine.Final{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 2}}
	cases := []struct {
		name   string
		object string
		render func(m Meta) []byte
	}{
		{"chat chunk", "chat.completion.chunk", func(m Meta) []byte {
			return AppendChatChunk(nil, m, ChatChunk{Role: true, Content: "hi", UsageNull: true})
		}},
		{"chat final chunk", "chat.completion.chunk", func(m Meta) []byte { return AppendChatChunk(nil, m, ChatChunk{Finish: final}) }},
		{"completion chunk", "text_completion", func(m Meta) []byte {
			return AppendCompletionChunk(nil, m, CompletionChunk{Text: "hi", UsageNull: true})
		}},
		{"usage chunk", "chat.completion.chunk", func(m Meta) []byte {
			return AppendUsageChunk(nil, "chat.completion.chunk", m, final.Usage)
		}},
		{"another object's head is not used", "text_completion", func(m Meta) []byte {
			return AppendChatChunk(nil, m, ChatChunk{Content: "hi"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := c.render(m)
			if got := c.render(m.WithChunkHead(c.object)); !bytes.Equal(got, want) {
				t.Errorf("with the head rendered once:\n%s\nwant:\n%s", got, want)
			}
			if !json.Valid(want) {
				t.Errorf("not JSON: %s", want)
			}
		})
	}
}
