package modelgen_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// TestTokenizersLoadInReference loads every generated tokenizer kind in @lenml/tokenizers, the reference
// implementation the engine's own tokenizer is compared with, and checks that it round-trips text (unicode
// included, through byte tokens), that merges compress English, and that the chat template renders.
func TestTokenizersLoadInReference(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("testdata", "tokenize.js"))
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{
		"The morning was cold and clear. A thin mist lay over the river.",
		"Numbers: 1, 22, 333, 4444 and 3.14159!",
		"unicode: café, naïve, 日本語, emoji 🙂 and tabs\tand  double  spaces\nnew line",
	}
	messages := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}}
	for _, tc := range []struct {
		name string
		opts func(*modelgen.Options)
		chat string
	}{
		{"llama/bytelevel", nil,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"qwen3/bytelevel", func(o *modelgen.Options) { o.Family = model.Qwen3 },
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"},
		{"mistral/sentencepiece", func(o *modelgen.Options) { o.Family, o.Tokenizer = model.Mistral, modelgen.SentencePiece },
			"<s>[INST] Be brief.\n\nHello there [/INST]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := modelgen.Tiny()
			o.VocabSize = 1024
			if tc.opts != nil {
				tc.opts(&o)
			}
			dir := t.TempDir()
			if err := modelgen.Generate(dir, o); err != nil {
				t.Fatal(err)
			}
			in, _ := json.Marshal(map[string]any{"dir": dir, "texts": texts, "messages": messages})
			var out struct {
				IDs     [][]int  `json:"ids"`
				Decoded []string `json:"decoded"`
				Chat    string   `json:"chat"`
				ChatIDs []int    `json:"chatIds"`
			}
			if err := json.Unmarshal(testnode.Run(t, script, in), &out); err != nil {
				t.Fatal(err)
			}
			for i, text := range texts {
				if out.Decoded[i] != text {
					t.Errorf("round trip of %q gave %q", text, out.Decoded[i])
				}
				for _, id := range out.IDs[i] {
					if id < 0 || id >= o.VocabSize {
						t.Errorf("token id %d outside the vocabulary", id)
					}
				}
			}
			if n, b := len(out.IDs[0]), len(texts[0]); n*3 > b {
				t.Errorf("English compresses poorly: %d tokens for %d bytes", n, b)
			}
			if out.Chat != tc.chat {
				t.Errorf("chat template rendered\n%q\nwant\n%q", out.Chat, tc.chat)
			}
			t.Logf("chat ids %v", out.ChatIDs)
		})
	}
}
