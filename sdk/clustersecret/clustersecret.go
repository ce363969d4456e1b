// Package clustersecret turns the one secret a duet cluster's operator manages into the keys each part needs,
// so that none of them is used for two jobs: the serf gossip key (AES-256-GCM), the KV wire's HMAC key, the
// credential one gateway proves to another when it forwards a request, and the key that seals reasoning handed
// to stateless clients. They are derived with HKDF-SHA256 under distinct labels, so learning one (say, from an
// engine plugin that only holds the KV key) reveals nothing of the others, and every node derives the same keys
// from the same secret.
package clustersecret

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Keys are the keys derived from a cluster secret.
type Keys struct {
	Gossip []byte // 32 bytes: serf's keyring (AES-256-GCM)
	KV     []byte // 32 bytes: the KV wire's HMAC-SHA256 proofs
	Hop    []byte // 32 bytes: gateway-to-gateway request proofs
	// Reasoning seals the reasoning a gateway hands a stateless client (the Responses API's encrypted_content,
	// AES-256-GCM), so any node of the cluster reads it back.
	Reasoning []byte
}

// Labels of the derivation (HKDF info). Changing one changes that key everywhere: they are part of the
// protocol between nodes.
const (
	salt        = "duet cluster secret v1"
	labelGossip = "duet serf gossip key"
	labelKV     = "duet kv wire hmac key"
	labelHop    = "duet gateway hop key"
	labelReason = "duet responses reasoning key"
)

// MinSecretLen is the shortest secret accepted: 16 bytes, e.g. 32 hex digits.
const MinSecretLen = 16

// Derive derives the keys of a secret.
func Derive(secret []byte) (Keys, error) {
	if len(secret) < MinSecretLen {
		return Keys{}, fmt.Errorf("the cluster secret is %d bytes; use at least %d (e.g. `openssl rand -hex 32`)", len(secret), MinSecretLen)
	}
	key := func(label string) ([]byte, error) { return hkdf.Key(sha256.New, secret, []byte(salt), label, 32) }
	var k Keys
	var err error
	if k.Gossip, err = key(labelGossip); err != nil {
		return Keys{}, err
	}
	if k.KV, err = key(labelKV); err != nil {
		return Keys{}, err
	}
	if k.Hop, err = key(labelHop); err != nil {
		return Keys{}, err
	}
	if k.Reasoning, err = key(labelReason); err != nil {
		return Keys{}, err
	}
	return k, nil
}

// ReadFile reads a secret file: its content with surrounding whitespace trimmed.
func ReadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("cluster secret file %s is empty", path)
	}
	return []byte(s), nil
}

// KVKeyEnv is the environment variable through which a gateway gives its engine plugins the KV keys (hex,
// comma-separated, the current one first; the others are still accepted while a secret rotates), and only
// those keys: a plugin never sees the secret itself.
const KVKeyEnv = "DUET_KV_KEY"

// KVKeysFromEnv reads KVKeyEnv; nil when it is not set.
func KVKeysFromEnv() ([][]byte, error) {
	s := os.Getenv(KVKeyEnv)
	if s == "" {
		return nil, nil
	}
	var keys [][]byte
	for _, h := range strings.Split(s, ",") {
		k, err := hex.DecodeString(strings.TrimSpace(h))
		if err != nil || len(k) == 0 {
			return nil, errors.New(KVKeyEnv + " is not a list of hex keys")
		}
		keys = append(keys, k)
	}
	return keys, nil
}
