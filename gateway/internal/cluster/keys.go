package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/duet-ai/duet/sdk/clustersecret"
)

// Secrets are the keys of a cluster's secrets, current first. The secret file may hold several, one per
// line: the first signs and encrypts, all are accepted. That is how a cluster changes its secret without
// downtime: add the new one second on every node, then move it first, then drop the old.
type Secrets struct {
	Keys []clustersecret.Keys
}

// LoadSecrets reads the secret file (one secret per line; # starts a comment) or, when path is empty, the
// single secret in env. No secret at all is (nil, nil): an unencrypted cluster.
func LoadSecrets(path, env string) (*Secrets, error) {
	var raw []string
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				raw = append(raw, line)
			}
		}
		if len(raw) == 0 {
			return nil, fmt.Errorf("--cluster-secret-file %s holds no secret", path)
		}
	case env != "":
		raw = []string{strings.TrimSpace(env)}
	default:
		return nil, nil
	}
	s := &Secrets{}
	for i, r := range raw {
		k, err := clustersecret.Derive([]byte(r))
		if err != nil {
			return nil, fmt.Errorf("cluster secret %d: %w", i+1, err)
		}
		s.Keys = append(s.Keys, k)
	}
	return s, nil
}

// HopKeys are the gateway-to-gateway keys, current first.
func (s *Secrets) HopKeys() [][]byte {
	if s == nil {
		return nil
	}
	out := make([][]byte, len(s.Keys))
	for i, k := range s.Keys {
		out[i] = k.Hop
	}
	return out
}

// KVKeyEnv is the environment entry that gives an engine plugin the KV wire keys (hex, comma-separated,
// current first) and nothing else of the secret.
func (s *Secrets) KVKeyEnv() string {
	if s == nil {
		return ""
	}
	hexes := make([]string, len(s.Keys))
	for i, k := range s.Keys {
		hexes[i] = hex.EncodeToString(k.KV)
	}
	return clustersecret.KVKeyEnv + "=" + strings.Join(hexes, ",")
}

// writeKeyring writes serf's keyring file (JSON array of base64 keys, primary first) with the gossip keys of
// the secrets, unless it already holds exactly those: serf rewrites it when keys are rotated online, and the
// secrets file is the source of truth at every start.
func (s *Secrets) writeKeyring(dataDir string) (string, error) {
	keys := make([]string, len(s.Keys))
	for i, k := range s.Keys {
		keys[i] = base64.StdEncoding.EncodeToString(k.Gossip)
	}
	b, _ := json.Marshal(keys)
	path := filepath.Join(dataDir, "keyring.json")
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(old), b) {
		return path, nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// reasoningKeyFile holds a node's own reasoning key (hex) when the cluster has no secret.
const reasoningKeyFile = "reasoning.key"

// ReasoningKeys are the keys that seal the reasoning handed to stateless clients, current first: the cluster
// secrets' when there are any, so that every node opens what another sealed; else this node's own, random,
// kept in dataDir so that it outlives a restart (made on the first start).
func ReasoningKeys(s *Secrets, dataDir string) ([][]byte, error) {
	if s != nil {
		out := make([][]byte, len(s.Keys))
		for i, k := range s.Keys {
			out[i] = k.Reasoning
		}
		return out, nil
	}
	path := filepath.Join(dataDir, reasoningKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		k, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(k) != 32 {
			return nil, fmt.Errorf("%s: not a 32-byte key in hex; delete it to make a new one", path)
		}
		return [][]byte{k}, nil
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return [][]byte{k}, os.Rename(tmp, path)
}
