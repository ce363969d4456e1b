package tokenizer

import (
	"strings"
	"sync"
)

// rawKind says how tokens map to output bytes, for TokenBytes.
type rawKind struct {
	byteLevel, byteFallback bool
}

var rawKinds sync.Map // *Tokenizer -> rawKind

func (t *Tokenizer) rawKind() rawKind {
	if k, ok := rawKinds.Load(t); ok {
		return k.(rawKind)
	}
	var k rawKind
	for _, st := range newPipeline(t.decoder).stages {
		switch st.(type) {
		case *byteLevelStage:
			k.byteLevel = true
		case *byteFallbackStage:
			k.byteFallback = true
		}
	}
	rawKinds.Store(t, k)
	return k
}

// TokenBytes returns the bytes one token contributes to the output on its own, which may be part of a UTF-8
// character (OpenAI's logprobs report them as "bytes"): for byte-level vocabularies the bytes its symbols stand
// for, for a byte-fallback token (<0x0A>) its byte, otherwise its text with "▁" as a space.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if i, ok := t.addedByID[id]; ok {
		return []byte(t.added[i].Content)
	}
	if id < 0 || int(id) >= len(t.model.tokens) || t.model.tokens[id] == "" {
		return nil
	}
	tok := t.model.tokens[id]
	k := t.rawKind()
	if k.byteLevel {
		return byteLevelBytes(nil, tok)
	}
	if b, ok := parseByteToken(tok); ok && k.byteFallback {
		return []byte{b}
	}
	// SentencePiece-style: "▁" is the space. (Decoding the token alone would strip a leading one.)
	return []byte(strings.ReplaceAll(tok, "\u2581", " "))
}
