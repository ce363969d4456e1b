package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// nodeIDFile holds a node's id in its data directory.
const nodeIDFile = "node-id"

// LoadNodeID returns the node id kept in dataDir, creating one the first time: the host name and a random
// suffix, so that it is stable across restarts and never the same on two machines, even ones cloned from
// one image (each clone creates its own on first start, as long as the data directory is not copied too).
func LoadNodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := CheckNodeID(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	host, _ := os.Hostname()
	var suffix [3]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", err
	}
	id := sanitizeID(host)
	if id == "" {
		id = "node"
	}
	if len(id) > 48 {
		id = id[:48]
	}
	id += "-" + hex.EncodeToString(suffix[:])
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	// Written atomically, so that two gateways started at once on one data directory agree.
	tmp, err := os.CreateTemp(dataDir, nodeIDFile+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadNodeID(dataDir) // another process won
		}
		return "", err
	}
	return id, nil
}

// CheckNodeID checks an id against what serfcluster accepts.
func CheckNodeID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("node id %q: want 1 to 64 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("node id %q: use letters, digits and . _ - only", id)
		}
	}
	return nil
}

// sanitizeID keeps the characters ids may have, lower-cased, and turns runs of others into one "-".
func sanitizeID(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-.")
}
