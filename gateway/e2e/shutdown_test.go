//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// TestShutdownDrainsUnderGroupSIGTERM sends SIGTERM to duet's whole process group, as systemd (KillMode=
// control-group) or a shell's `kill -- -pgid` does, while a stream runs: the plugins must leave stopping to the
// gateway, which drains the stream to its end and then exits.
func TestShutdownDrainsUnderGroupSIGTERM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := startDuetCmd(t, func(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} },
		"--engine", exe, "--model", "echo")
	c := g.client()
	p := chatParams("echo", "slow words for a while")
	p.MaxTokens = openai.Int(60) // 20 ms each: over a second of streaming
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	if err := syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n, finish := 1, ""
	for stream.Next() {
		n++
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
	}
	if err := stream.Err(); err != nil || finish != "length" {
		t.Fatalf("after a group SIGTERM the stream ended with %v after %d chunks, finish %q; want it drained to its end", err, n, finish)
	}
	select {
	case <-g.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("duet did not exit after draining")
	}
}

// TestPluginsExitWithTheirHost SIGKILLs duet: its plugins, which ignore SIGTERM, must notice that their host is
// gone and exit rather than live on as orphans.
func TestPluginsExitWithTheirHost(t *testing.T) {
	g := startGateway(t)
	pid := enginePID(t, g)
	if pid == 0 {
		t.Fatal("no engine pid")
	}
	t.Cleanup(func() {
		if alive(pid) { // it ignores SIGTERM: do not leave it behind when the test fails
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := g.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	waitFor(t, 10*time.Second, "the orphaned engine plugin to exit", func() bool { return !alive(pid) })
}

// alive reports whether pid is a running process (a zombie waiting for its reaper counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc (macOS): ask the kernel
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
