package responses

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// Sealer seals a response's reasoning into its encrypted_content and opens it when a client sends the item back:
// that is how a stateless client (store false, as Codex is) gives the model its earlier reasoning, as it does
// with OpenAI's. It is AES-256-GCM under a key of the node, or of the cluster when there is a secret, so that
// whichever node a later turn lands on reads it. The sealed form is
//
//	"duet1:" + base64url(12-byte nonce || ciphertext || tag)
//
// with the prefix as additional data. Several keys may open (a cluster rotating its secret); the first seals.
// A nil *Sealer seals nothing and opens nothing.
type Sealer struct {
	aeads []cipher.AEAD
}

const sealPrefix = "duet1:"

// sealRand makes nonces; tests fix it, so that golden files hold the same sealed text at every run.
var sealRand io.Reader = rand.Reader

// maxSealed bounds what Open decodes: reasoning is text a model wrote, far below this.
const maxSealed = 8 << 20

// NewSealer makes a sealer of 32-byte keys, the first of which seals.
func NewSealer(keys ...[]byte) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("responses: a sealer needs a key")
	}
	s := &Sealer{}
	for i, k := range keys {
		if len(k) != 32 {
			return nil, fmt.Errorf("responses: reasoning key %d is %d bytes, want 32", i+1, len(k))
		}
		b, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		a, err := cipher.NewGCM(b)
		if err != nil {
			return nil, err
		}
		s.aeads = append(s.aeads, a)
	}
	return s, nil
}

// Seal returns text sealed; "" when s is nil.
func (s *Sealer) Seal(text string) string {
	if s == nil {
		return ""
	}
	a := s.aeads[0]
	buf := make([]byte, a.NonceSize(), a.NonceSize()+len(text)+a.Overhead())
	if _, err := io.ReadFull(sealRand, buf); err != nil {
		panic("responses: no randomness for a nonce: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	buf = a.Seal(buf, buf, []byte(text), []byte(sealPrefix))
	return sealPrefix + base64.RawURLEncoding.EncodeToString(buf)
}

// Open returns the text that Seal sealed into sealed, and false for anything else: another sealer's, altered,
// or not duet's at all.
func (s *Sealer) Open(sealed string) (string, bool) {
	if s == nil || len(sealed) > maxSealed {
		return "", false
	}
	b64, ok := strings.CutPrefix(sealed, sealPrefix)
	if !ok {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return "", false
	}
	for _, a := range s.aeads {
		if len(raw) < a.NonceSize()+a.Overhead() {
			return "", false
		}
		if text, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(sealPrefix)); err == nil {
			return string(text), true
		}
	}
	return "", false
}
