package serfcluster

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// loadKeyring builds the gossip keyring from Config: the keyring file if it exists, else EncryptKey (written
// to the keyring file when one is named, so that rotations have somewhere to persist). nil means no
// encryption.
func loadKeyring(cfg Config) (*memberlist.Keyring, error) {
	var keys [][]byte
	if cfg.KeyringFile != "" {
		b, err := os.ReadFile(cfg.KeyringFile)
		switch {
		case err == nil:
			keys, err = parseKeyring(b)
			if err != nil {
				return nil, fmt.Errorf("serfcluster: keyring file %s: %w", cfg.KeyringFile, err)
			}
		case errors.Is(err, fs.ErrNotExist) && len(cfg.EncryptKey) > 0:
			keys = [][]byte{cfg.EncryptKey}
			if err := writeKeyring(cfg.KeyringFile, keys); err != nil {
				return nil, err
			}
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("serfcluster: keyring file %s does not exist and there is no EncryptKey to start it with", cfg.KeyringFile)
		default:
			return nil, fmt.Errorf("serfcluster: keyring file: %w", err)
		}
	} else if len(cfg.EncryptKey) > 0 {
		keys = [][]byte{cfg.EncryptKey}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("serfcluster: keyring: %w", err)
	}
	return kr, nil
}

// parseKeyring reads serf's keyring file format: a JSON array of base64 keys, the first one primary.
func parseKeyring(b []byte) ([][]byte, error) {
	var enc []string
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("want a JSON array of base64 keys: %w", err)
	}
	if len(enc) == 0 {
		return nil, errors.New("no keys")
	}
	keys := make([][]byte, len(enc))
	for i, s := range enc {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		keys[i] = k
	}
	return keys, nil
}

func writeKeyring(path string, keys [][]byte) error {
	enc := make([]string, len(keys))
	for i, k := range keys {
		enc[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.MarshalIndent(enc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("serfcluster: write keyring file: %w", err)
	}
	return nil
}

// KeyringStatus is the cluster-wide answer to ListKeys: for each base64 key, how many nodes hold it and how
// many use it as primary.
type KeyringStatus struct {
	NumNodes    int
	NumResp     int
	Keys        map[string]int
	PrimaryKeys map[string]int
}

// InstallKey adds key to every member's keyring. Rotation is InstallKey(new), UseKey(new), RemoveKey(old):
// while both keys are installed every node decrypts both, so no member flaps.
func (c *Cluster) InstallKey(key []byte) error {
	return c.keyOp("install", key, c.serf.KeyManager().InstallKey)
}

// UseKey makes key, already installed, the primary key for encrypting on every member.
func (c *Cluster) UseKey(key []byte) error {
	return c.keyOp("use", key, c.serf.KeyManager().UseKey)
}

// RemoveKey removes key, which must not be primary, from every member's keyring.
func (c *Cluster) RemoveKey(key []byte) error {
	return c.keyOp("remove", key, c.serf.KeyManager().RemoveKey)
}

// ListKeys asks every member for its keys.
func (c *Cluster) ListKeys() (KeyringStatus, error) {
	if !c.serf.EncryptionEnabled() {
		return KeyringStatus{}, errors.New("serfcluster: list keys: encryption is not enabled")
	}
	resp, err := retryKeyQuery(c.serf.KeyManager().ListKeys)
	st := KeyringStatus{}
	if resp != nil {
		st = KeyringStatus{NumNodes: resp.NumNodes, NumResp: resp.NumResp, Keys: resp.Keys, PrimaryKeys: resp.PrimaryKeys}
	}
	if err != nil {
		return st, keyError("list", err, resp)
	}
	return st, nil
}

func (c *Cluster) keyOp(op string, key []byte, fn func(string) (*serf.KeyResponse, error)) error {
	if !c.serf.EncryptionEnabled() {
		return fmt.Errorf("serfcluster: %s key: encryption is not enabled", op)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("serfcluster: %s key: %w", op, err)
	}
	resp, err := retryKeyQuery(func() (*serf.KeyResponse, error) { return fn(base64.StdEncoding.EncodeToString(key)) })
	if err != nil {
		return keyError(op, err, resp)
	}
	return nil
}

// retryKeyQuery runs a keyring query again while members only failed to answer in time. Key operations are
// idempotent, and serf waits just the default query timeout, so a lost or late answer is not a failure.
func retryKeyQuery(query func() (*serf.KeyResponse, error)) (*serf.KeyResponse, error) {
	var resp *serf.KeyResponse
	var err error
	for range keyOpAttempts {
		resp, err = query()
		if err == nil || resp == nil || resp.NumErr > 0 {
			break
		}
	}
	return resp, err
}

// keyOpAttempts bounds the retries of a key operation that some members did not answer in time. Each attempt
// waits serf's query timeout (a few gossip intervals); on a loaded machine (five members under the race
// detector beside other packages) three attempts leave some members unanswered, so there are eight: a
// rotation is rare and may take seconds, a member that really is gone still fails it.
const keyOpAttempts = 8

func keyError(op string, err error, resp *serf.KeyResponse) error {
	var detail []string
	if resp != nil {
		for _, node := range slices.Sorted(maps.Keys(resp.Messages)) {
			detail = append(detail, node+": "+resp.Messages[node])
		}
	}
	if len(detail) == 0 {
		return fmt.Errorf("serfcluster: %s key: %w", op, err)
	}
	return fmt.Errorf("serfcluster: %s key: %w (%s)", op, err, strings.Join(detail, "; "))
}
