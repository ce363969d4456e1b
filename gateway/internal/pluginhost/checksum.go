package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"
)

func newSHA256() hash.Hash { return sha256.New() }

// fileSHA256 is the hex SHA-256 of a file, for an error message ("unreadable" when it cannot be read).
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unreadable"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable"
	}
	return hex.EncodeToString(h.Sum(nil))
}
