package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// answer is the status and body of a call's refusal: 200 and "" when it succeeded, 0 and the error when no
// answer came.
func answer(err error) (int, string) {
	if e := client.AsError(err); e != nil {
		return e.Status, string(e.Body)
	}
	if err != nil {
		return 0, err.Error()
	}
	return 200, ""
}

// setRouter asks g (no key) to swap its router to name.
func setRouter(t *testing.T, g *gateway, name string) (int, string) {
	t.Helper()
	_, err := g.api.SetRouter(t.Context(), name, "")
	return answer(err)
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRouterSwapOnlyRegistered: PUT /admin/v1/router starts only what the operator registered at start, by
// name. A path to any executable is refused before it runs (its marker file never appears), a registered
// plugin of --plugin-dir swaps in and serves, one whose binary changed after start is refused before it
// runs, and what a plugin prints never reaches the client (the gateway's log has it).
func TestRouterSwapOnlyRegistered(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	// A real router plugin: the built-in round robin, as an external binary of the plugin directory.
	writeScript(t, filepath.Join(plugins, "myrouter"), "exec "+duetBin+" plugin router roundrobin\n")
	// A registered plugin that fails its handshake, loudly.
	writeScript(t, filepath.Join(plugins, "noisy"), "echo NOISY-STDOUT-abc123\necho NOISY-STDERR-abc123 >&2\nexit 3\n")
	// What an attacker names: any executable on the machine.
	evil := filepath.Join(dir, "evil")
	writeScript(t, evil, "touch "+marker+"\necho EVIL-STDOUT-uid=0\necho EVIL-STDERR-secret >&2\nexit 1\n")

	g := startGateway(t, "--plugin-dir", plugins)

	type errBody struct {
		Error struct{ Message string } `json:"error"`
	}
	for _, name := range []string{evil, "../evil", "/usr/bin/id", "unknown-router"} {
		st, body := setRouter(t, g, name)
		if st != 400 {
			t.Errorf("router %q: status %d %s", name, st, body)
		}
		var e errBody
		_ = json.Unmarshal([]byte(body), &e)
		for _, want := range []string{"not swapped", "myrouter", "noisy", "roundrobin"} {
			if !strings.Contains(e.Error.Message, want) {
				t.Errorf("router %q: the refusal does not list %q: %s", name, want, e.Error.Message)
			}
		}
		if strings.Contains(body, "EVIL") || strings.Contains(body, "uid=") {
			t.Errorf("router %q: the program's output reached the client: %s", name, body)
		}
	}
	if exists(marker) {
		t.Fatal("a router swap ran a program the operator did not register")
	}

	// A registered plugin that fails: the client learns that it failed, the log learns what it said.
	st, body := setRouter(t, g, "noisy")
	if st != 400 || !strings.Contains(body, "did not start") || strings.Contains(body, "NOISY") {
		t.Errorf("a failing plugin: %d %s", st, body)
	}
	waitFor(t, 10*time.Second, "the plugin's output in the gateway's log", func() bool { return strings.Contains(g.stderr.String(), "NOISY-") })
	status, err := g.api.Status(t.Context())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if b, _ := json.Marshal(status); strings.Contains(string(b), "NOISY") {
		t.Errorf("the status shows a plugin's output: %s", b)
	}

	// The registered one swaps in and serves.
	if now, err := g.api.SetRouter(t.Context(), "myrouter", ""); err != nil || now != "myrouter" {
		t.Fatalf("swap to the registered plugin: %v %q\n%s", err, now, g.stderr.String())
	}
	c := g.client()
	if _, err := c.Chat.Completions.New(context.Background(), chatParams("echo", "through an external router")); err != nil {
		t.Fatal(err)
	}
	out := g.router(t)
	if out.Router != "myrouter" || !slices.Contains(out.Available, "myrouter") || !slices.Contains(out.Available, "router-disagg") {
		t.Errorf("GET router: %+v", out)
	}

	// Replaced after start: refused before it runs, whatever the request pins.
	if _, err := g.api.SetRouter(t.Context(), "roundrobin", ""); err != nil {
		t.Fatalf("swap back: %v", err)
	}
	writeScript(t, filepath.Join(plugins, "myrouter"), "touch "+marker+"\nexec "+duetBin+" plugin router roundrobin\n")
	st, body = setRouter(t, g, "myrouter")
	if st != 400 || strings.Contains(body, "touch") {
		t.Errorf("a replaced plugin: %d %s", st, body)
	}
	if exists(marker) {
		t.Error("a plugin binary replaced after start ran")
	}
	// duet logs before it answers, but its stderr reaches the test through a pipe and a copying goroutine.
	waitFor(t, 10*time.Second, "the log to say the binary is not the pinned one", func() bool {
		return strings.Contains(g.stderr.String(), "is pinned")
	})
	if out := g.router(t); out.Router != "roundrobin" {
		t.Errorf("router %q after refused swaps", out.Router)
	}
}

// TestInstanceLoadPolicy: a load over the API takes a model, a role and tuning options. Options that name an
// address or a file are the node operator's (refused, named); a local model directory loads only from under
// --models-dir, and a path that does not exist, one that cannot be read and one outside the directory (by
// "..", or by a link) get the same answer; loads past --max-instances and models larger than the memory
// available are refused.
func TestInstanceLoadPolicy(t *testing.T) {
	root := t.TempDir()
	models := filepath.Join(root, "models")
	for _, d := range []string{filepath.Join(models, "good"), filepath.Join(models, "org", "name"), filepath.Join(root, "outside"), filepath.Join(models, "locked"), filepath.Join(models, "huge")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "outside"), filepath.Join(models, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(models, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(models, "locked"), 0o755) })
	huge, err := os.Create(filepath.Join(models, "huge", "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	sparse := huge.Truncate(1<<50) == nil // 1 PiB, sparse: no machine has that much memory
	huge.Close()

	g := startGateway(t, "--models-dir", models, "--max-instances", "3")
	type errBody struct {
		Error struct{ Message, Code, Param string } `json:"error"`
	}
	load := func(in client.NewInstance) (int, errBody) {
		t.Helper()
		var e errBody
		_, err := g.api.CreateInstance(t.Context(), in)
		st, text := answer(err)
		_ = json.Unmarshal([]byte(text), &e)
		return st, e
	}

	for _, opt := range []string{"kv_listen", "kv_advertise", "cluster_secret_file"} {
		st, e := load(client.NewInstance{Model: "echo", Options: map[string]string{opt: "/etc/passwd"}})
		if st != 400 || !strings.Contains(e.Error.Message, opt) || !strings.Contains(e.Error.Message, "operator") {
			t.Errorf("option %s over the API: %d %+v", opt, st, e)
		}
	}
	if st, e := load(client.NewInstance{Model: "echo", Options: map[string]string{"nonsense": "1"}}); st != 400 || !strings.Contains(e.Error.Message, `"nonsense"`) {
		t.Errorf("an unknown option: %d %+v", st, e)
	}

	// One answer, whatever the file system holds.
	shape := func(model, msg string) string { return strings.ReplaceAll(msg, model, "MODEL") }
	var first string
	refused := []string{
		"/etc", "/nonexistent/dir", filepath.Join(root, "outside"), filepath.Join(models, "nope"), "../outside",
		"good/../../outside", "link-out", filepath.Join(models, "good", "config.json"), "~/x",
	}
	if os.Geteuid() != 0 { // root reads it anyway
		refused = append(refused, "locked")
	}
	for _, m := range refused {
		st, e := load(client.NewInstance{Model: m})
		got := fmt.Sprintf("%d %s %s", st, e.Error.Code, shape(m, e.Error.Message))
		if st != 404 {
			t.Errorf("model %q: %s", m, got)
		}
		if first == "" {
			first = got
		} else if got != first {
			t.Errorf("model %q answers otherwise than %q: %s", m, refused[0], got)
		}
	}

	// Under --models-dir, by its relative or absolute path; a hub-shaped name found there; and the limit.
	var created client.Instance
	if st, err := g.api.Call(t.Context(), client.AdminKey, "POST", "/v1/instances", client.NewInstance{Model: "good", Options: map[string]string{"token_delay": "1ms"}}, &created); st != 201 {
		t.Fatalf("a model under --models-dir: %d %v", st, err)
	}
	if st, err := g.api.Call(t.Context(), client.AdminKey, "POST", "/v1/instances", client.NewInstance{Model: filepath.Join(models, "org", "name")}, &created); st != 201 {
		t.Fatalf("a model under --models-dir by its absolute path: %d %v", st, err)
	}
	st, e := load(client.NewInstance{Model: "echo"})
	if st != 409 || e.Error.Code != "too_many_instances" || !strings.Contains(e.Error.Message, "--max-instances") {
		t.Errorf("a fourth instance with --max-instances 3: %d %+v", st, e)
	}
	if sparse {
		if err := g.api.DeleteInstance(t.Context(), created.ID); err != nil {
			t.Fatalf("unload: %v", err)
		}
		st, e := load(client.NewInstance{Model: "huge"})
		if st != 507 || e.Error.Code != "insufficient_memory" {
			t.Errorf("a model larger than memory: %d %+v", st, e)
		}
	}
}
