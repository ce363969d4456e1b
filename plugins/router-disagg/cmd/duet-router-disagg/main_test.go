package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
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

func TestLogStats(t *testing.T) {
	cfg := routerdisagg.DefaultConfig()
	cfg.LatencySampleEvery = 1
	r, err := routerdisagg.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	snap := routertest.Cluster(2, routertest.Ready("d", "m", "n1", router.RoleDecode), routertest.Ready("p", "m", "n2", router.RolePrefill))
	if _, err := r.Route(context.Background(), router.Request{Model: "m", PromptTokens: 2000}, snap); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logStats(r, logger(&buf))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	for _, k := range []string{"@timestamp", "@level", "@message", "routes", "decode.ready", "decode.load", "prefill.link", "prefill.pick"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("log record lacks %q: %s", k, buf.String())
		}
	}
	if rec["@level"] != "info" || rec["routes"] != 1.0 {
		t.Errorf("record %v: want level info and 1 route", rec)
	}
}
