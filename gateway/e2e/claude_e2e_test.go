package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// Claude Code (the real CLI, testdata/agents) against a real duet, started by `duet launch claude`: with the
// echo engine scripted to call its Bash tool, which Claude Code runs, sends the result back and gets a final
// answer; and with the embedded model, which says anything. Claude Code asks for its own model names
// (claude-opus-5-5 in 2.1.328); --model-alias maps them onto the served model.

// claudeModels are the names Claude Code 2.1.328 asks for: its default, and the others it picks a model of.
var claudeModels = []string{"claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5", "claude-haiku-4-5"}

// callAPI sends a request with a bearer key (none when empty) through the client and returns the status and
// the body, for the endpoints of other APIs (OpenAI, Ollama) whose answer the tests read as text.
func callAPI(t *testing.T, g *gateway, method, path, key string, body any) (int, []byte) {
	t.Helper()
	var raw json.RawMessage
	st, err := g.as(key).Call(t.Context(), client.APIKey, method, path, body, &raw)
	if e := client.AsError(err); e != nil {
		return e.Status, e.Body
	}
	if err != nil {
		t.Fatal(err)
	}
	return st, raw
}

// modelIDs reads GET /v1/models.
func modelIDs(t *testing.T, g *gateway, key string) []string {
	t.Helper()
	models, err := g.as(key).Models(t.Context())
	if err != nil {
		t.Fatalf("GET /v1/models: %v", err)
	}
	var ids []string
	for _, m := range models {
		ids = append(ids, m.ID)
	}
	return ids
}

// claudeRun is what `claude -p --output-format stream-json` printed, line by line.
type claudeRun struct {
	lines  []map[string]any
	stderr string
}

// runClaude runs Claude Code through `duet launch claude` in dir, against g, and returns its JSON lines; it
// fails the test unless claude exits 0.
func runClaude(t *testing.T, g *gateway, dir string, launchArgs []string, claudeArgs ...string) claudeRun {
	t.Helper()
	bin := testnode.Agent(t, "claude")
	home := t.TempDir()
	args := append([]string{"launch", "claude", "--url", g.url, "--bin", bin}, launchArgs...)
	args = append(append(args, "--"), claudeArgs...)
	args = append(args, "--output-format", "stream-json", "--verbose", "--include-partial-messages")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, duetBin, args...)
	cmd.Dir = dir
	// A fresh HOME: no settings, sessions or credentials of the machine's user; nothing leaves loopback.
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run := claudeRun{stderr: stderr.String()}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			run.lines = append(run.lines, m)
		}
	}
	if err != nil {
		t.Fatalf("duet launch claude: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return run
}

// result is the final "result" line.
func (r claudeRun) result(t *testing.T) map[string]any {
	t.Helper()
	for _, m := range r.lines {
		if m["type"] == "result" {
			return m
		}
	}
	t.Fatalf("no result line; stderr:\n%s", r.stderr)
	return nil
}

// streamed lists the stream events Claude Code received (content_block_delta by delta type), in order.
func (r claudeRun) streamed() []string {
	var out []string
	for _, m := range r.lines {
		if m["type"] != "stream_event" {
			continue
		}
		ev, _ := m["event"].(map[string]any)
		kind, _ := ev["type"].(string)
		if d, ok := ev["delta"].(map[string]any); ok && kind == "content_block_delta" {
			kind += ":" + d["type"].(string)
		}
		out = append(out, kind)
	}
	return out
}

// toolResults are the tool results Claude Code sent back, by content.
func (r claudeRun) toolResults() []string {
	var out []string
	for _, m := range r.lines {
		msg, _ := m["message"].(map[string]any)
		if m["type"] != "user" || msg == nil {
			continue
		}
		blocks, _ := msg["content"].([]any)
		for _, b := range blocks {
			if bm, _ := b.(map[string]any); bm["type"] == "tool_result" {
				s, _ := bm["content"].(string)
				out = append(out, s)
			}
		}
	}
	return out
}

// TestClaudeCodeEcho: Claude Code asks for its default model, which an alias maps onto the echo engine; the
// echo engine thinks, then calls Bash with a command that writes a file in the test's directory; Claude Code
// runs it (allowed by --allowedTools), sends its output back, and the echo engine answers with it. The echo
// instance says its context holds 8192 tokens, so Claude Code's max_tokens (128000) means as many as fit.
// The aliases are also read and written through the admin API and listed by /v1/models and /api/tags.
func TestClaudeCodeEcho(t *testing.T) {
	args := []string{"--engine-opt", "context_length=8192", "--api-key", "k1", "--admin-key", "a1"}
	for _, m := range claudeModels {
		args = append(args, "--model-alias", m+"=echo")
	}
	g := startGateway(t, args...)

	ids := modelIDs(t, g, "k1")
	for _, want := range append([]string{"echo"}, claudeModels...) {
		if !slices.Contains(ids, want) {
			t.Errorf("/v1/models lists %v, not %q", ids, want)
		}
	}

	dir := t.TempDir()
	prompt := "Run the command, please.\ncall: Bash {\"command\":\"echo duet-e2e-ok > out.txt && cat out.txt\"}"
	run := runClaude(t, g, dir, []string{"--api-key", "k1"}, "-p", prompt, "--allowedTools", "Bash")

	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || strings.TrimSpace(string(b)) != "duet-e2e-ok" {
		t.Errorf("the Bash tool did not run: out.txt %q, %v", b, err)
	}
	if got := run.toolResults(); len(got) != 1 || strings.TrimSpace(got[0]) != "duet-e2e-ok" {
		t.Errorf("tool results sent back: %q, want the command's output", got)
	}
	res := run.result(t)
	if res["subtype"] != "success" || res["is_error"] != false || strings.TrimSpace(res["result"].(string)) != "duet-e2e-ok" {
		t.Errorf("result %v, want success with the tool's output", res)
	}
	streamed := run.streamed()
	for _, want := range []string{"message_start", "content_block_delta:thinking_delta", "content_block_delta:signature_delta",
		"content_block_delta:input_json_delta", "content_block_delta:text_delta", "message_delta", "message_stop"} {
		if !slices.Contains(streamed, want) {
			t.Errorf("Claude Code received no %s; it received %v", want, streamed)
		}
	}

	// The aliases at run time: an API key may read them, only the admin key change them.
	user, admin := g.as("k1"), g.as("a1")
	if aliases, err := user.ModelAliases(t.Context()); err != nil || aliases["claude-opus-5-5"] != "echo" {
		t.Errorf("GET /admin/v1/model-aliases: %v %v", err, aliases)
	}
	next := map[string]string{"gpt-5-codex": "echo"}
	if _, err := user.SetModelAliases(t.Context(), next); client.StatusOf(err) != 403 {
		t.Errorf("PUT with an API key: %v, want 403", err)
	}
	chain := map[string]string{"a": "b", "b": "echo"}
	if _, err := admin.SetModelAliases(t.Context(), chain); client.StatusOf(err) != 400 || !strings.Contains(client.AsError(err).Message, "is an alias too") {
		t.Errorf("PUT of a chain: %v, want 400", err)
	}
	if aliases, err := admin.SetModelAliases(t.Context(), next); err != nil || aliases["gpt-5-codex"] != "echo" {
		t.Fatalf("PUT: %v %v", err, aliases)
	}
	if ids := modelIDs(t, g, "k1"); !slices.Equal(ids, []string{"echo", "gpt-5-codex"}) {
		t.Errorf("/v1/models after the PUT: %v, want echo and gpt-5-codex", ids)
	}
	if st, body := callAPI(t, g, "GET", "/api/tags", "k1", nil); st != 200 || !strings.Contains(string(body), `"name":"gpt-5-codex:latest"`) {
		t.Errorf("/api/tags: %d %s, want the alias listed", st, body)
	}
	chat := map[string]any{"model": "gpt-5-codex", "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "hi"}}}
	if st, body := callAPI(t, g, "POST", "/v1/chat/completions", "k1", chat); st != 200 || !strings.Contains(string(body), `"model":"echo"`) {
		t.Errorf("chat with the alias: %d %s, want an answer of echo", st, body)
	}
	chat["model"] = "claude-opus-5-5"
	if st, body := callAPI(t, g, "POST", "/v1/chat/completions", "k1", chat); st != 404 || !strings.Contains(string(body), "--model-alias claude-opus-5-5=MODEL") {
		t.Errorf("chat with a removed alias: %d %s, want a 404 that says how to map the name", st, body)
	}
}

// TestClaudeCodeEmbedded: Claude Code with `duet launch claude --model embedded` (every model it picks is
// embedded) says hello to the embedded model, which answers anything; a short system prompt and no tools keep
// the prompt inside the model's 8192 tokens. The gateway also serves a local model directory: /v1/models lists
// only names a chat answers (its path, not the directory's base name, which the engine calls it).
func TestClaudeCodeEmbedded(t *testing.T) {
	local := filepath.Join(t.TempDir(), "llama")
	if err := modelgen.Generate(local, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	g := startDuet(t, "--model", "embedded", "--model", local)

	ids := modelIDs(t, g, "")
	if !slices.Contains(ids, "embedded") || !slices.Contains(ids, local) || slices.Contains(ids, "llama") {
		t.Errorf("/v1/models lists %v; want embedded and %s, not the base name llama", ids, local)
	}
	for _, id := range ids {
		chat := map[string]any{"model": id, "max_tokens": 1, "messages": []map[string]string{{"role": "user", "content": "hi"}}}
		if st, body := callAPI(t, g, "POST", "/v1/chat/completions", "", chat); st != 200 {
			t.Errorf("/v1/models lists %q, but chat answers %d %s", id, st, body)
		}
	}

	run := runClaude(t, g, t.TempDir(), []string{"--model", "embedded"},
		"-p", "Say hello", "--system-prompt", "You are brief.", "--tools", "", "--disable-slash-commands")
	res := run.result(t)
	if res["subtype"] != "success" || res["is_error"] != false || strings.TrimSpace(res["result"].(string)) == "" {
		t.Errorf("result %v, want success with some text", res)
	}
	if streamed := run.streamed(); !slices.Contains(streamed, "content_block_delta:text_delta") {
		t.Errorf("Claude Code received no text deltas: %v", streamed)
	}
}
