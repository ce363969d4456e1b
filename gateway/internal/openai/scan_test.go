package openai

import (
	"strings"
	"testing"
)

func TestScanPrompt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		want PromptScan
		ok   bool
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":null},{"role":"user","content":"wörld"}]}`,
			PromptScan{Model: "m", PromptBytes: 11}, true},
		{"parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"ab"},{"type":"text","text":"cd"}]}],"model":"org/m"}`,
			PromptScan{Model: "org/m", PromptBytes: 4}, true},
		{"escapes", `{"model":"m","messages":[{"content":"a\nb\u00e9\ud83d\ude00\ud800\"\\"}]}`,
			PromptScan{Model: "m", PromptBytes: 1 + 1 + 1 + 2 + 4 + 3 + 1 + 1}, true},
		{"other fields skipped", `{"tools":[{"a":{"b":[1,2,{"c":"content"}]}}],"model":"m","stop":["x"],"temperature":0.5,"stream":true,"x":null}`,
			PromptScan{Model: "m"}, true},
		{"completion string", `{"model":"m","prompt":"once upon"}`, PromptScan{Model: "m", PromptBytes: 9}, true},
		{"completion list", `{"model":"m","prompt":["once"]}`, PromptScan{Model: "m", PromptBytes: 4}, true},
		{"completion tokens", `{"model":"m","prompt":[1,2,3]}`, PromptScan{Model: "m", PromptTokens: 3}, true},
		{"completion nested tokens", `{"model":"m","prompt":[[1,2]]}`, PromptScan{Model: "m", PromptTokens: 2}, true},
		{"empty object", `{}`, PromptScan{}, true},
		{"whitespace", " {\n \"model\" : \"m\" ,\t\"messages\" : [ ] } ", PromptScan{Model: "m"}, true},
		{"escaped key", `{"mod\u0065l":"m"}`, PromptScan{}, false},
		{"not an object", `[1]`, PromptScan{}, false},
		{"truncated", `{"model":"m","messages":[{"content":"abc`, PromptScan{}, false},
		{"bad escape", `{"model":"m","messages":[{"content":"\x"}]}`, PromptScan{}, false},
		{"control character", "{\"model\":\"m\",\"messages\":[{\"content\":\"a\x01\"}]}", PromptScan{}, false},
		{"too deep", `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, PromptScan{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ScanPrompt([]byte(c.body))
			if ok != c.ok || ok && got != c.want {
				t.Errorf("ScanPrompt = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// The scanner never allocates for the prompt itself: a body of megabytes costs its model name.
func TestScanPromptAllocations(t *testing.T) {
	body := []byte(`{"model":"embedded","messages":[{"role":"user","content":"` + strings.Repeat("word ", 200000) + `"}]}`)
	allocs := testing.AllocsPerRun(10, func() { ScanPrompt(body) })
	if allocs > 1 {
		t.Errorf("%v allocations per scan, want at most 1 (the model's name)", allocs)
	}
}

// FuzzScanPrompt checks the scanner against the parser: whenever both read a body, they agree on the model and
// on the prompt's decoded length.
func FuzzScanPrompt(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00\ud800x"}],"stop":["a"]}`,
		`{"model":"m","prompt":"x\ny"}`,
		`{"model":"m","prompt":[1,2]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		scan, ok := ScanPrompt(body)
		if !ok {
			return
		}
		if chat, err := ParseChat(body); err == nil {
			n := 0
			for _, m := range chat.Messages {
				n += len(m.Content)
			}
			if scan.Model != chat.Model && len(chat.Model) <= 256 && !strings.Contains(string(body), `\`) {
				t.Fatalf("model %q, parser says %q", scan.Model, chat.Model)
			}
			if n != scan.PromptBytes {
				t.Fatalf("prompt bytes %d, parser says %d: %q", scan.PromptBytes, n, body)
			}
		}
		if comp, err := ParseCompletion(body); err == nil && len(comp.PromptTokens) == 0 {
			if len(comp.Prompt) != scan.PromptBytes {
				t.Fatalf("prompt bytes %d, parser says %d: %q", scan.PromptBytes, len(comp.Prompt), body)
			}
		}
	})
}

func BenchmarkScanPrompt(b *testing.B) {
	for _, c := range []struct{ name, text string }{
		{"ascii", strings.Repeat("the sea is wide and the night is long ", 1<<16)},
		{"mixed", strings.Repeat("la mer est très large\\n et la nuit est longue ", 1<<16)},
	} {
		body := []byte(`{"model":"embedded","messages":[{"role":"user","content":"` + c.text + `"}]}`)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				ScanPrompt(body)
			}
		})
	}
}
