package pluginhost

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCatalog(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("alpha", 0o755)
	write("notexec", 0o644)
	write(".hidden", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := NewCatalog("router")
	c.AddBuiltin("roundrobin")
	if err := c.AddDir(dir); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "alpha,roundrobin" {
		t.Fatalf("names %s", got)
	}
	p, err := c.Lookup("alpha")
	want := sha256.Sum256([]byte("#!/bin/sh\necho alpha\n"))
	if err != nil || p.Builtin() || string(p.SHA256) != string(want[:]) {
		t.Fatalf("alpha: %+v %v", p, err)
	}
	for _, tc := range []struct{ name, says string }{
		{filepath.Join(dir, "alpha"), "is a path"},
		{"../alpha", "is a path"},
		{"notexec", `no router "notexec"`},
		{"beta", "alpha, roundrobin"},
	} {
		_, err := c.Lookup(tc.name)
		if !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Lookup(%q): %v, want it to say %q", tc.name, err, tc.says)
		}
	}
	// A pin that is not the file's, a file under a built-in's name.
	other := filepath.Join(t.TempDir(), "gamma")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddFile(other, make([]byte, 32)); err == nil || !strings.Contains(err.Error(), "is pinned") {
		t.Errorf("a wrong pin: %v", err)
	}
	clash := filepath.Join(t.TempDir(), "roundrobin")
	if err := os.WriteFile(clash, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddFile(clash, nil); err == nil || !strings.Contains(err.Error(), "taken by a built-in") {
		t.Errorf("a built-in's name: %v", err)
	}
}
