package main

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The hardening tests: what an abuse test and a fresh-clone CI run found, each through the real gateway and
// real plugin subprocesses.

// socketsUnder lists the unix sockets below dir.
func socketsUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// TestNoStaleSockets kills the engine plugin three times: each restart must leave no socket of the dead
// process behind, and a stopped gateway none at all. A gateway killed with SIGKILL leaves its directory, which
// the next gateway removes.
func TestNoStaleSockets(t *testing.T) {
	tmp := t.TempDir()
	withTmp := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, "TMPDIR="+tmp) }
	g := startDuetCmd(t, withTmp, "--engine", "echo", "--model", "echo")
	if n := len(socketsUnder(t, tmp)); n != 2 {
		t.Fatalf("%d sockets with an engine and a router running, want 2: %v", n, socketsUnder(t, tmp))
	}
	for i := range 3 {
		pid := enginePID(t, g)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "the engine plugin to restart", func() bool {
			p := enginePID(t, g)
			return p != 0 && p != pid
		})
		if got := socketsUnder(t, tmp); len(got) != 2 {
			t.Fatalf("after kill %d: %d sockets, want 2: %v", i+1, len(got), got)
		}
	}
	c := g.client()
	if _, err := c.Chat.Completions.New(context.Background(), chatParams("echo", "still here")); err != nil {
		t.Fatal(err)
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	<-g.exited
	if left := dirEntries(t, tmp); len(left) != 0 {
		t.Errorf("a stopped gateway left %v in its temporary directory", left)
	}

	// SIGKILL: nothing runs to clean up, so the next gateway sweeps the dead one's directory.
	g2 := startDuetCmd(t, withTmp, "--engine", "echo", "--model", "echo")
	g2.cmd.Process.Kill()
	<-g2.exited
	waitFor(t, 5*time.Second, "the orphaned plugins to exit", func() bool {
		return len(socketsUnder(t, tmp)) == 0 || !anyPluginAlive(t, tmp)
	})
	if len(dirEntries(t, tmp)) == 0 {
		t.Fatal("a SIGKILLed gateway left nothing behind; the sweep below tests nothing")
	}
	g3 := startDuetCmd(t, withTmp, "--engine", "echo", "--model", "echo")
	if got := socketsUnder(t, tmp); len(got) != 2 {
		t.Errorf("with the next gateway running: %d sockets, want its own 2: %v", len(got), got)
	}
	g3.cmd.Process.Signal(syscall.SIGTERM)
	<-g3.exited
	if left := dirEntries(t, tmp); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// anyPluginAlive reports whether a plugin that serves a socket under dir still runs (a plugin exits shortly
// after its gateway dies).
func anyPluginAlive(t *testing.T, dir string) bool {
	t.Helper()
	out, _ := exec.Command("ps", "-eo", "args").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, duetBin+" plugin") {
			return true
		}
	}
	return false
}
