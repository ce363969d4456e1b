// Package selfexec lets a test binary double as a plugin binary: the conformance suites re-execute the
// running test binary with a marker in its environment, and TestMain serves the plugin instead of running
// tests when it sees the marker.
package selfexec

import (
	"os"
	"os/exec"
	"testing"
)

// ServeIfMarked calls serve and exits when the environment variable marker is "1".
func ServeIfMarked(marker string, serve func()) {
	if os.Getenv(marker) != "1" {
		return
	}
	serve()
	os.Exit(0)
}

// Command re-executes the running test binary, running no tests, with marker set.
func Command(t testing.TB, marker string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), marker+"=1")
	return cmd
}
