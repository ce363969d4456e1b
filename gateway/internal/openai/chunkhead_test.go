package openai

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// A stream's chunks read the same with their opening rendered once (WithChunkHead) as rendered each time, and
// a head for one object is not used for another.
func TestChunkHead(t *testing.T) {
	t.Parallel()
	m := apicore.Meta{ID: "chatcmpl-a\"b", Created: 1700000000, Model: "org/model\u2028x", Fingerprint: "fp_1"}
	final := &engine.Final{FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 2}}
	cases := []struct {
		name   string
		object string
		render func(m ChunkMeta) []byte
	}{
		{"chat chunk", "chat.completion.chunk", func(m ChunkMeta) []byte {
			return AppendChatChunk(nil, m, ChatChunk{Role: true, Content: "hi", UsageNull: true})
		}},
		{"chat final chunk", "chat.completion.chunk", func(m ChunkMeta) []byte { return AppendChatChunk(nil, m, ChatChunk{Finish: final}) }},
		{"completion chunk", "text_completion", func(m ChunkMeta) []byte {
			return AppendCompletionChunk(nil, m, CompletionChunk{Text: "hi", UsageNull: true})
		}},
		{"usage chunk", "chat.completion.chunk", func(m ChunkMeta) []byte {
			return AppendUsageChunk(nil, "chat.completion.chunk", m, final.Usage)
		}},
		{"another object's head is not used", "text_completion", func(m ChunkMeta) []byte {
			return AppendChatChunk(nil, m, ChatChunk{Content: "hi"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := c.render(ChunkMeta{Meta: m})
			if got := c.render(WithChunkHead(m, c.object)); !bytes.Equal(got, want) {
				t.Errorf("with the head rendered once:\n%s\nwant:\n%s", got, want)
			}
			if !json.Valid(want) {
				t.Errorf("not JSON: %s", want)
			}
		})
	}
}
