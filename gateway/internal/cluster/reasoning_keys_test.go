package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReasoningKeys: with a secret the keys are the cluster's (every node derives the same); without one the
// node makes its own once, keeps it in the data dir and reads it back; a damaged key file is an error.
func TestReasoningKeys(t *testing.T) {
	t.Parallel()
	s, err := LoadSecrets("", "correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ReasoningKeys(s, t.TempDir())
	if err != nil || len(a) != 1 || !bytes.Equal(a[0], s.Keys[0].Reasoning) || len(a[0]) != 32 {
		t.Fatalf("cluster keys %x %v", a, err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	first, err := ReasoningKeys(nil, dir)
	if err != nil || len(first) != 1 || len(first[0]) != 32 {
		t.Fatalf("node key %x %v", first, err)
	}
	again, err := ReasoningKeys(nil, dir)
	if err != nil || !bytes.Equal(first[0], again[0]) {
		t.Errorf("the node key changed across starts: %x, then %x (%v)", first, again, err)
	}
	if st, err := os.Stat(filepath.Join(dir, reasoningKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	if other, _ := ReasoningKeys(nil, t.TempDir()); bytes.Equal(other[0], first[0]) {
		t.Error("two nodes made the same key")
	}
	if err := os.WriteFile(filepath.Join(dir, reasoningKeyFile), []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReasoningKeys(nil, dir); err == nil {
		t.Error("a damaged key file was read")
	}
}
