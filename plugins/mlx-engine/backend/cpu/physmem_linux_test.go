package cpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		want    int64
		ok      bool
	}{
		"v2 limit": {"8589934592\n", 8 << 30, true},
		"v2 none":  {"max\n", 0, false},
		"v1 none":  {"9223372036854771712\n", 0, false},
		"garbage":  {"lots", 0, false},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, ok := cgroupLimit(p); got != c.want || ok != c.ok {
			t.Errorf("%s: %d, %v", name, got, ok)
		}
	}
	if _, ok := cgroupLimit(filepath.Join(dir, "missing")); ok {
		t.Errorf("a missing file gave a limit")
	}
}
