package openai_test

import (
	"reflect"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/openai"
)

// Bodies whose messages take ParseChat's fast path, and those next to it that must not.
var fastPathBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","max_tokens":16,"temperature":0.7,"stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"what is the capital of France?"}]}`,
	`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null},{"role":"developer","content":"dev"}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":"ok"},{"role":"user","content":"again"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"tab\tand \"quotes\" and \u00e9 and \n"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"été, 夏, 🌞"}]}`,
	`{"model":"m","messages":[{"role":"user","content":  "spaces around"  }]}`,
	`{"model":"m","messages":[{"role":"user","content":""}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x","name":"ann"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x","tool_call_id":"c"}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":"x","reasoning_content":"r"}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":"x","function_call":{"name":"f"}}]}`,
	`{"model":"m","messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
	`{"model":"m","messages":[{"role":"tool","content":"42","tool_call_id":"c1"}]}`,
	`{"model":"m","messages":[{"role":"tool","content":"42"}]}`,
	`{"model":"m","messages":[{"role":"function","content":"42","name":"f"}]}`,
	`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`,
	`{"model":"m","messages":[{"content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user"}]}`,
	`{"model":"m","messages":[{"role":"user","content":null}]}`,
	`{"model":"m","messages":[{"role":"user","content":7}]}`,
	`{"model":"m","messages":[{"role":"user","content":{"a":1}}]}`,
	`{"model":"m","messages":[{"role":"User","content":"x"}]}`,
	`{"model":"m","messages":[{"Role":"user","CONTENT":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"user","content":"\ud800"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"bad","content":"y"}]}`,
	`{"model":"m","messages":[]}`,
	`{"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"n":0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}`,
	`[]`,
	`{}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"stream_options":{"include_usage":false}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"Include_Usage":true}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":null}`,
	`  {"model":"m","messages":[{"role":"user","content":"x"}]}  `,
	"\u00a0{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}\u00a0",
	`{"model":"m","messages":[{"role":"user","content":"x"}]} x`,
	`{"model":"m","model":"n","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","Model":"n","messages":[{"role":"user","content":"x"}]}`,
	`{"mod\u0065l":"m","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m\u0065","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1e2}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":01}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":0,"n":2,"top_k":-1}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e400}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":-0.5e-3,"top_p":1E+0,"min_p":0.05}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":2.5}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":.5}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":3,"frequency_penalty":-3,"repetition_penalty":0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":tru}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"ignore_eos":true,"logprobs":false,"user":"u"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":null}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":1}`,
	`{"model":"m","messages":[{"role":"user","content":"x"},]}`,
	`{"model":"m","messages":[{"role":"user","content":"x",}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],}`,
	`{"model":"m","messages":[{},{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","role":"user","content":"x"}]}`,
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\tb\"}]}",
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
	"{\r\n\t\"model\" : \"m\" ,\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"x\" } ] \n}",
}

// The fast path for common messages gives ParseChat's results exactly, errors included.
func TestParseChatFastPath(t *testing.T) {
	t.Parallel()
	for _, body := range fastPathBodies {
		checkFastPath(t, []byte(body))
	}
}

// The common bodies take the fast decoder (else it would be tested but never used).
func TestParseChatFastPathTaken(t *testing.T) {
	t.Parallel()
	for _, body := range append(fastPathBodies[:2:2], benchChatBodies[1].body) {
		if !openai.DecodesPlain([]byte(body)) {
			t.Errorf("the fast decoder does not take %s", body)
		}
	}
}

func checkFastPath(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := openai.ParseChat(body)
	want, wantErr := openai.ParseChatSlow(body)
	if !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("%s: error %+v, the full parser's %+v", body, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", body, got, want)
	}
}

func FuzzParseChatFastPath(f *testing.F) {
	for _, body := range fastPathBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(checkFastPath)
}

// BenchmarkParseChat: a typical short chat body, and one with a longer conversation, with the fast paths
// (fast) and without them (full), for their ratio in one run.
//
//	go test ./gateway/internal/openai -run '^$' -bench ParseChat -benchmem
func BenchmarkParseChat(b *testing.B) {
	for _, c := range benchChatBodies {
		body := []byte(c.body)
		for _, p := range []struct {
			name  string
			parse func([]byte) (openai.ChatRequest, *apicore.Error)
		}{{"fast", openai.ParseChat}, {"full", openai.ParseChatSlow}} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := p.parse(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

var benchChatBodies = []struct{ name, body string }{
	{"short", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
	{"conversation", `{"model":"qwen3-8b","max_tokens":256,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"system","content":"You are a helpful assistant. Answer briefly."},` +
		`{"role":"user","content":"What is the capital of France?"},` +
		`{"role":"assistant","content":"Paris."},` +
		`{"role":"user","content":"And of Italy? Say it in one word, please."}]}`},
}
