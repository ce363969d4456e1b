package mlxengine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
	"github.com/duet-ai/duet/sdk/engine"
)

// realChatModel loads a tiny generated model of family fam (modelgen.TinyFamily) that speaks a real model's chat
// format: its vocabulary is as large as the real tokenizer's, and the real tokenizer and a chat template in the model's format
// (testnode.Tokenizer: the package's own, or duet's harmony template for gpt-oss) replace the generated ones.
// The weights are random, so the output is noise except where a grammar constrains it; the chat format around
// it is the real one. eos lists the end-of-sequence tokens config.json and generation_config.json name;
// tokenizer_config.json's eos_token becomes the first of them.
func realChatModel(t *testing.T, name string, fam model.Family, eos ...string) (*mlxengine.Engine, engine.Description, *tokenizer.Tokenizer) {
	t.Helper()
	return realChatModelOf(t, name, modelgen.TinyFamily(fam), eos...)
}

// realChatModelOf is realChatModel with the model's architecture from o (its vocabulary the tokenizer's).
func realChatModelOf(t *testing.T, name string, o modelgen.Options, eos ...string) (*mlxengine.Engine, engine.Description, *tokenizer.Tokenizer) {
	t.Helper()
	src := testnode.Tokenizer(t, name)
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	o.VocabSize, o.KeepVocabSize, o.DType = tok.VocabSize(), true, dtype.BFloat16
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int32
	for _, s := range eos {
		id, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("%s has no token %s", name, s)
		}
		ids = append(ids, id)
	}
	for _, f := range []string{"config.json", "generation_config.json", "tokenizer_config.json"} {
		path := filepath.Join(dir, f)
		var cfg map[string]any
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		if f == "tokenizer_config.json" {
			cfg["eos_token"] = eos[0]
		} else {
			delete(cfg, "bos_token_id")
			cfg["eos_token_id"] = ids
		}
		if b, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	return e, d, tok
}

// generated is what one choice of a generation streamed and how it ended.
type generated struct {
	content, reasoning string
	calls              []engine.ToolCall // as streamed
	final              *engine.Final
}

func generateChat(t *testing.T, e *mlxengine.Engine, req engine.GenerateRequest) generated {
	t.Helper()
	var g generated
	var content, reasoning strings.Builder
	err := e.Generate(context.Background(), req, func(ev engine.Event) error {
		if tok := ev.Token; tok != nil {
			content.WriteString(tok.Text)
			reasoning.WriteString(tok.Reasoning)
			for _, dl := range tok.ToolCalls {
				if dl.Index == len(g.calls) {
					g.calls = append(g.calls, engine.ToolCall{ID: dl.ID, Name: dl.Name})
				}
				g.calls[dl.Index].Arguments += dl.Arguments
			}
		}
		if ev.Final != nil {
			g.final = ev.Final
			content.WriteString(ev.Final.Text)
			reasoning.WriteString(ev.Final.Reasoning)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g.content, g.reasoning = content.String(), reasoning.String()
	return g
}

// TestHarmonyChat: with gpt-oss's files the engine speaks harmony: reasoning_effort and earlier reasoning
// reach the template, forced calls and response formats are constrained in harmony syntax and come back as
// tool calls and content (never markup), and <|call|> ends generation even where the files name only
// <|return|>.
func TestHarmonyChat(t *testing.T) {
	e, d, tok := realChatModel(t, "gptoss", model.Llama, "<|return|>")
	if c := d.Capabilities; !c.Tools || !c.Reasoning {
		t.Fatalf("capabilities %+v: gpt-oss calls tools and reasons", c)
	}
	weather := engine.Tool{Name: "get_weather", Description: "The weather in a city",
		Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}`)}
	clock := engine.Tool{Name: "get_time", Parameters: []byte(`{"type":"object","properties":{},"additionalProperties":false}`)}

	t.Run("prompt", func(t *testing.T) {
		res, err := e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, AddGenerationPrompt: true,
			Messages: []engine.Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "Weather in Paris?"},
				{Role: "assistant", Reasoning: "Use the tool.", ToolCalls: []engine.ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
				{Role: "tool", ToolCallID: "c1", Content: "18C"},
			},
			Tools: []engine.Tool{weather}, TemplateVars: map[string]any{"reasoning_effort": "high"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{
			"Reasoning: high\n\n",
			"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// The weather in a city\ntype get_weather = (_: {\ncity: string,\n}) => any;",
			"<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>",
			`<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}<|call|>`,
			`<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>18C<|end|>`,
		} {
			if !strings.Contains(res.Text, w) {
				t.Errorf("the prompt lacks %q:\n%s", w, res.Text)
			}
		}
		if !strings.HasSuffix(res.Text, "<|start|>assistant") {
			t.Errorf("the prompt does not end with the generation prompt:\n%s", res.Text)
		}
	})

	user := []engine.Message{{Role: "user", Content: "Weather in Oslo?"}}
	for _, choice := range []engine.ToolChoice{{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, {Mode: engine.ToolChoiceRequired}} {
		t.Run("forced call/"+string(choice.Mode), func(t *testing.T) {
			for seed := range int64(3) {
				s := seed
				g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
					Tools: []engine.Tool{weather, clock}, ToolChoice: choice, ParallelToolCalls: true,
					Sampling: engine.Sampling{MaxTokens: 120, Temperature: 1, Seed: &s}})
				f := g.final
				if f.FinishReason != engine.FinishToolCalls || len(f.ToolCalls) != 1 {
					t.Fatalf("seed %d: finish %s (%v), calls %+v, content %q, reasoning %q", seed, f.FinishReason, f.Error, f.ToolCalls, g.content, g.reasoning)
				}
				c := f.ToolCalls[0]
				if len(g.calls) != 1 || g.calls[0] != c {
					t.Errorf("seed %d: streamed %+v, final %+v", seed, g.calls, c)
				}
				if g.content != "" || strings.Contains(g.reasoning, "<|") {
					t.Errorf("seed %d: content %q, reasoning %q beside a forced call", seed, g.content, g.reasoning)
				}
				if choice.Mode == engine.ToolChoiceFunction && c.Name != "get_weather" {
					t.Errorf("seed %d: forced get_weather, got %s", seed, c.Name)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
					t.Errorf("seed %d: arguments %s: %v", seed, c.Arguments, err)
				}
				if _, ok := args["city"].(string); c.Name == "get_weather" && !ok {
					t.Errorf("seed %d: arguments %s lack the city", seed, c.Arguments)
				}
			}
		})
	}

	t.Run("response format", func(t *testing.T) {
		for seed := range int64(3) {
			s := seed
			g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Strict: true,
					Schema: []byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`)},
				Sampling: engine.Sampling{MaxTokens: 120, Temperature: 1, Seed: &s}})
			var v struct{ OK *bool }
			if err := json.Unmarshal([]byte(g.content), &v); err != nil || v.OK == nil || g.final.FinishReason != engine.FinishStop {
				t.Errorf("seed %d: content %q (%v), finish %s (%v)", seed, g.content, err, g.final.FinishReason, g.final.Error)
			}
			if strings.Contains(g.reasoning, "<|") {
				t.Errorf("seed %d: markup in the reasoning %q", seed, g.reasoning)
			}
		}
	})

	t.Run("<|call|> ends generation", func(t *testing.T) {
		call, _ := tok.TokenID("<|call|>")
		g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
			Sampling: engine.Sampling{MaxTokens: 8, LogitBias: map[int32]float64{call: 100}}})
		if g.final.FinishReason != engine.FinishStop || g.final.Usage.CompletionTokens != 0 || g.content+g.reasoning != "" {
			t.Errorf("finish %s after %d tokens, content %q, reasoning %q", g.final.FinishReason, g.final.Usage.CompletionTokens, g.content, g.reasoning)
		}
	})
}

// TestHarmonyChatGptOSS: a gpt_oss model (sinks, windows of 8, mxfp4 experts as openai ships them) with
// gpt-oss's real tokenizer and duet's harmony template, served by the engine: its analysis message comes back as
// reasoning, and forced calls and a json_schema response format are constrained in harmony syntax after it.
// A random model rarely ends an analysis message by itself (one token of 201088), so <|end|> is favoured by a
// logit bias, which the grammar lets act only where the message may end.
func TestHarmonyChatGptOSS(t *testing.T) {
	o := modelgen.TinyFamily(model.GptOSS)
	o.ExpertsMXFP4 = true
	e, d, tok := realChatModelOf(t, "gptoss", o, "<|return|>")
	if d.Architecture != string(model.GptOSS) {
		t.Fatalf("architecture %q, want %s", d.Architecture, model.GptOSS)
	}
	end, ok := tok.TokenID("<|end|>")
	if !ok {
		t.Fatal("no <|end|> token")
	}
	bias := map[int32]float64{end: harmonyEndBias}
	weather := engine.Tool{Name: "get_weather", Description: "The weather in a city",
		Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}`)}
	clock := engine.Tool{Name: "get_time", Parameters: []byte(`{"type":"object","properties":{},"additionalProperties":false}`)}
	user := []engine.Message{{Role: "user", Content: "Weather in Oslo?"}}
	noMarkup := func(t *testing.T, seed int64, g generated) {
		t.Helper()
		if strings.Contains(g.reasoning, "<|") || strings.Contains(g.content, "<|") {
			t.Errorf("seed %d: markup in reasoning %q or content %q", seed, g.reasoning, g.content)
		}
	}

	t.Run("response format after analysis", func(t *testing.T) {
		reasoned := 0
		for seed := range int64(4) {
			s := seed
			g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Strict: true,
					Schema: []byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`)},
				Sampling: engine.Sampling{MaxTokens: 200, Temperature: 1, Seed: &s, LogitBias: bias}})
			t.Logf("seed %d: reasoning %q, content %q", seed, g.reasoning, g.content)
			var v struct{ OK *bool }
			if err := json.Unmarshal([]byte(g.content), &v); err != nil || v.OK == nil || g.final.FinishReason != engine.FinishStop {
				t.Errorf("seed %d: content %q (%v), finish %s (%v)", seed, g.content, err, g.final.FinishReason, g.final.Error)
			}
			noMarkup(t, seed, g)
			if g.reasoning != "" {
				reasoned++
			}
		}
		if reasoned == 0 {
			t.Error("no answer had an analysis message: reasoning_content untested")
		}
	})

	for _, choice := range []engine.ToolChoice{{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, {Mode: engine.ToolChoiceRequired}} {
		t.Run("forced call/"+string(choice.Mode), func(t *testing.T) {
			for seed := range int64(3) {
				s := seed
				g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
					Tools: []engine.Tool{weather, clock}, ToolChoice: choice,
					Sampling: engine.Sampling{MaxTokens: 200, Temperature: 1, Seed: &s, LogitBias: bias}})
				t.Logf("seed %d: reasoning %q, calls %+v", seed, g.reasoning, g.final.ToolCalls)
				f := g.final
				if f.FinishReason != engine.FinishToolCalls || len(f.ToolCalls) != 1 {
					t.Fatalf("seed %d: finish %s (%v), calls %+v, content %q, reasoning %q", seed, f.FinishReason, f.Error, f.ToolCalls, g.content, g.reasoning)
				}
				c := f.ToolCalls[0]
				if len(g.calls) != 1 || g.calls[0] != c || g.content != "" {
					t.Errorf("seed %d: streamed %+v, final %+v, content %q", seed, g.calls, c, g.content)
				}
				noMarkup(t, seed, g)
				if choice.Mode == engine.ToolChoiceFunction && c.Name != "get_weather" {
					t.Errorf("seed %d: forced get_weather, got %s", seed, c.Name)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
					t.Errorf("seed %d: arguments %s: %v", seed, c.Arguments, err)
				}
				if _, ok := args["city"].(string); c.Name == "get_weather" && !ok {
					t.Errorf("seed %d: arguments %s lack the city", seed, c.Arguments)
				}
			}
		})
	}
}

// harmonyEndBias is TestHarmonyChatGptOSS's logit bias on <|end|>.
const harmonyEndBias = 11

// TestGemmaChat: with Gemma 3's files the system message joins the first user turn, a conversation whose
// roles do not alternate is the client's error with the template's message, the model offers no tools, and
// <end_of_turn> ends generation even where the files name only <eos>, as a base model's do.
func TestGemmaChat(t *testing.T) {
	e, d, tok := realChatModel(t, "gemma3", model.Gemma3, "<eos>")
	if d.Architecture != string(model.Gemma3) {
		t.Errorf("architecture %q, want gemma3", d.Architecture)
	}
	if d.Capabilities.Tools || d.Capabilities.Reasoning {
		t.Errorf("capabilities %+v: Gemma 3's template has no tool or reasoning syntax", d.Capabilities)
	}
	res, err := e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, AddGenerationPrompt: true,
		Messages: []engine.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"},
			{Role: "assistant", Content: "Hello."}, {Role: "user", Content: "Bye"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n" +
		"<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
	if res.Text != want {
		t.Errorf("prompt\n%q\nwant\n%q", res.Text, want)
	}
	if bos, _ := tok.TokenID("<bos>"); len(res.Tokens) == 0 || res.Tokens[0] != bos || strings.Count(res.Text, "<bos>") != 1 {
		t.Errorf("tokens %v: one <bos>, first", res.Tokens[:min(4, len(res.Tokens))])
	}

	_, err = e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, AddGenerationPrompt: true,
		Messages: []engine.Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}})
	var ee *engine.Error
	if !errors.As(err, &ee) || ee.Code != engine.CodeInvalidArgument || !strings.Contains(ee.Message, "Conversation roles must alternate user/assistant/user/assistant/...") {
		t.Errorf("roles that do not alternate: %v, want the template's message as an invalid argument", err)
	}

	eot, _ := tok.TokenID("<end_of_turn>")
	g := generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: []engine.Message{{Role: "user", Content: "Hi"}},
		Sampling: engine.Sampling{MaxTokens: 8, LogitBias: map[int32]float64{eot: 100}}})
	if g.final.FinishReason != engine.FinishStop || g.final.Usage.CompletionTokens != 0 || g.content != "" {
		t.Errorf("finish %s after %d tokens, content %q", g.final.FinishReason, g.final.Usage.CompletionTokens, g.content)
	}

	// The model answers through the chat API: 40 tokens of (random) text after the prompt, past several of its
	// windows of 8.
	g = generateChat(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: []engine.Message{{Role: "user", Content: "Hi"}},
		Sampling: engine.Sampling{MaxTokens: 40, IgnoreEOS: true, LogitBias: map[int32]float64{eot: -100}}})
	if g.final.FinishReason != engine.FinishLength || g.final.Usage.CompletionTokens != 40 || g.content == "" {
		t.Errorf("finish %s after %d tokens, content %q", g.final.FinishReason, g.final.Usage.CompletionTokens, g.content)
	}
}
