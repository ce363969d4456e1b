package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPluginChecksum pins the engine plugin binary's SHA-256: the right one starts and serves, a wrong one
// stops duet before the binary runs, with an error that says why, and a pin on a built-in plugin is refused.
func TestPluginChecksum(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))

	t.Run("right", func(t *testing.T) {
		g := startFaulty(t, "--engine-sha256", sum)
		c := g.client()
		resp, err := c.Chat.Completions.New(context.Background(), chatParams("echo", "pinned"))
		if err != nil || len(resp.Choices) != 1 {
			t.Fatalf("chat through a pinned plugin: %v", err)
		}
	})
	fails := func(t *testing.T, want string, args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, duetBin, append([]string{"--listen", freeAddr(t)}, args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("duet did not exit with an error (%v):\n%s", err, out)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("duet's error does not say %q:\n%s", want, out)
		}
	}
	t.Run("wrong", func(t *testing.T) {
		wrong := []byte(sum)
		if wrong[0] == '0' { // another hex digit in the first place
			wrong[0] = '1'
		} else {
			wrong[0] = '0'
		}
		fails(t, "has SHA-256 "+sum, "--engine", exe, "--model", "echo", "--engine-sha256", string(wrong))
	})
	t.Run("built-in", func(t *testing.T) {
		fails(t, "built into duet", "--engine", "echo", "--model", "echo", "--engine-sha256", sum)
	})
}
