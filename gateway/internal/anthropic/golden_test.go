package anthropic

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}

// goldenJSON checks that got is valid JSON and compares it, indented, with testdata/name.json.
func goldenJSON(t *testing.T, name string, got []byte) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("not valid JSON: %s", got)
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, got, "", "  ")
	pretty.WriteByte('\n')
	golden(t, name+".json", pretty.Bytes())
}
