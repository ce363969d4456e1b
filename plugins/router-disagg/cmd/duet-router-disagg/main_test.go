package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/duet-ai/duet/sdk/routertest"
)

// runMainEnv makes the test binary run main instead of the tests, so that the tests drive the real command.
const runMainEnv = "DUET_DISAGG_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func command(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{runMainEnv + "=1"}, env...)...)
	return cmd
}

// TestPlugin runs the command as a plugin subprocess, configured from the environment and logging its stats,
// through the conformance suite.
func TestPlugin(t *testing.T) {
	routertest.RunPlugin(t, command(t, "DUET_DISAGG_MAX_PREFILL=1", "DUET_DISAGG_STATS_INTERVAL=50ms"))
}

func TestBadEnvironment(t *testing.T) {
	tests := map[string]string{
		"DUET_DISAGG_WEIGHT_LOAD=heavy":   "DUET_DISAGG_WEIGHT_LOAD",
		"DUET_DISAGG_STATS_INTERVAL=soon": "DUET_DISAGG_STATS_INTERVAL",
	}
	for env, want := range tests {
		t.Run(env, func(t *testing.T) {
			cmd := command(t, env)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1", err)
			}
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q does not name %s", stderr.String(), want)
			}
		})
	}
}
