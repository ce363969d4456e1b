package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/internal/testnode"
)

// The Codex CLI (npm @openai/codex, pinned in testdata/agents) against a real duet, over the Responses API: the
// configuration below is what `duet launch codex` and docs/agents.md give a user.

// codexConfig is the config.toml that points Codex at a duet gateway: a provider of the Responses API whose
// key comes from DUET_API_KEY, nothing that phones home. extra lines go after the top-level keys (top-level
// keys first, then tables).
func codexConfig(baseURL, model string, extra ...string) string {
	return fmt.Sprintf(`model_provider = "duet"
model = %q
check_for_update_on_startup = false
%s

[analytics]
enabled = false

[model_providers.duet]
name = "duet"
base_url = %q
wire_api = "responses"
env_key = "DUET_API_KEY"
`, model, strings.Join(extra, "\n"), baseURL+"/v1")
}

// codexEvent is a line of `codex exec --json`.
type codexEvent struct {
	Type string `json:"type"`
	Item struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Command  string `json:"command"`
		ExitCode *int   `json:"exit_code"`
		Status   string `json:"status"`
	} `json:"item"`
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
}

type codexRun struct {
	events []codexEvent
	stderr string
}

// items are the completed items of type typ.
func (r codexRun) items(typ string) []codexEvent {
	var out []codexEvent
	for _, e := range r.events {
		if e.Type == "item.completed" && e.Item.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (r codexRun) String() string {
	var b strings.Builder
	for _, e := range r.events {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String() + "stderr:\n" + r.stderr
}

// codexHome makes a HOME for Codex whose CODEX_HOME ($HOME/.codex) holds config.
func codexHome(t *testing.T, config string) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// runCodex runs `codex exec --json args...` (a prompt, or resume --last and a prompt) in workdir with the
// HOME of codexHome and no sandbox (the kernel features of Codex's sandbox are not on every CI machine; the
// command runs in a temporary directory). --strict-config makes a key of the configuration that this Codex
// does not know an error. It fails the test unless codex exits 0 with a completed turn.
func runCodex(t *testing.T, home, workdir, apiKey string, args ...string) codexRun {
	t.Helper()
	bin := testnode.Agent(t, "codex")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append([]string{"exec", "--json", "--strict-config", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--cd", workdir}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	codexHome := filepath.Join(home, ".codex")
	cmd.Dir = workdir
	cmd.Env = []string{"HOME=" + home, "CODEX_HOME=" + codexHome, "PATH=" + os.Getenv("PATH"), "DUET_API_KEY=" + apiKey,
		"LANG=C.UTF-8", "NO_COLOR=1"}
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := codexRun{stderr: stderr.String()}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e codexEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			r.events = append(r.events, e)
		}
	}
	if err != nil {
		t.Fatalf("codex exec: %v\n%s", err, r)
	}
	completed := false
	for _, e := range r.events {
		completed = completed || e.Type == "turn.completed"
		if e.Type == "turn.failed" || e.Type == "error" {
			t.Errorf("codex: %s %s%s", e.Type, e.Message, e.Error.Message)
		}
	}
	if !completed {
		t.Fatalf("codex exec ended without a completed turn:\n%s", r)
	}
	return r
}

// TestCodexEcho: Codex drives the echo engine, which is scripted to call a tool. Codex runs the command in a
// temporary directory, sends its output back, and gets a final answer (the echo of what the tool said);
// exec exits 0. Codex speaks only streams to a Responses provider: every turn here is a stream.
//
//   - exec_command: the request of a model Codex has no metadata for (plain function tools, a namespace of
//     tools, a hosted web_search left out), with reasoning on: the reasoning reaches Codex as a summary, and
//     comes back sealed on the next turn.
//   - code mode: the request of Codex's default model (gpt-6.1-sol, served here under that name), whose
//     tools come as an additional_tools input item: a custom tool with a lark grammar (exec, free-form
//     JavaScript) inside the namespace functions. The call goes back to Codex as a custom_tool_call in that
//     namespace, which Codex runs in its JavaScript host.
func TestCodexEcho(t *testing.T) {
	const key = "codex-test-key"
	g := startGateway(t, "--model", "gpt-6.1-sol", "--api-key", key)

	t.Run("exec_command", func(t *testing.T) {
		dir := t.TempDir()
		r := runCodex(t, codexHome(t, codexConfig(g.url, "echo", `model_reasoning_effort = "high"`)), dir, key,
			`call: exec_command {"cmd":"echo made by codex > marker.txt && ls"}`)
		if b, err := os.ReadFile(filepath.Join(dir, "marker.txt")); err != nil || string(b) != "made by codex\n" {
			t.Errorf("marker.txt: %q %v\n%s", b, err, r)
		}
		cmds := r.items("command_execution")
		if len(cmds) != 1 || cmds[0].Item.ExitCode == nil || *cmds[0].Item.ExitCode != 0 || !strings.Contains(cmds[0].Item.Command, "marker.txt") {
			t.Errorf("want one command that ran and exited 0:\n%s", r)
		}
		msgs := r.items("agent_message")
		if len(msgs) != 1 || !strings.Contains(msgs[0].Item.Text, "marker.txt") || !strings.Contains(msgs[0].Item.Text, "exited with code 0") {
			t.Errorf("want the final answer to be what the tool said (the ls of marker.txt):\n%s", r)
		}
		// Reasoning in both turns: about the prompt, then about the tool's output.
		rs := r.items("reasoning")
		if len(rs) != 2 || !strings.HasPrefix(rs[0].Item.Text, "about: call: exec_command") || !strings.Contains(rs[1].Item.Text, "marker.txt") {
			t.Errorf("want the reasoning of both turns:\n%s", r)
		}
	})

	// launch: the same turn through `duet launch codex`, whose temporary CODEX_HOME holds the configuration the
	// docs/agents.md gives.
	t.Run("launch", func(t *testing.T) {
		dir, home := t.TempDir(), t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, duetBin, "launch", "codex", "--url", g.url, "--model", "echo", "--api-key", key,
			"--bin", testnode.Agent(t, "codex"), "--", "exec", "--json", "--strict-config", "--skip-git-repo-check",
			"--dangerously-bypass-approvals-and-sandbox", "--cd", dir, `call: exec_command {"cmd":"echo launched > launched.txt"}`)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "NO_COLOR=1"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("duet launch codex: %v\n%s", err, out)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "launched.txt")); err != nil || string(b) != "launched\n" {
			t.Errorf("launched.txt: %q %v\n%s", b, err, out)
		}
		if !strings.Contains(string(out), `"type":"turn.completed"`) {
			t.Errorf("want a completed turn:\n%s", out)
		}
	})

	t.Run("code mode", func(t *testing.T) {
		dir := t.TempDir()
		r := runCodex(t, codexHome(t, codexConfig(g.url, "gpt-6.1-sol")), dir, key, `call: functions__exec {"input":"text(\"hello from the JavaScript host\")"}`)
		msgs := r.items("agent_message")
		if len(msgs) != 1 || !strings.Contains(msgs[0].Item.Text, "hello from the JavaScript host") {
			t.Errorf("want the final answer to be what the exec tool printed:\n%s", r)
		}
	})
}

// TestCodexEmbedded: Codex against the embedded model (a real engine; any text is an answer). Its default
// prompt does not fit the embedded model's 8192 tokens, so the configuration shrinks it: short instructions,
// and the features whose tools and instructions Codex would add turned off.
func TestCodexEmbedded(t *testing.T) {
	const key = "codex-test-key"
	g := startDuet(t, "--api-key", key)
	r := runCodex(t, codexHome(t, embeddedCodexConfig(t, g.url)), t.TempDir(), key, "Say hello")
	msgs := r.items("agent_message")
	if len(msgs) == 0 || strings.TrimSpace(msgs[len(msgs)-1].Item.Text) == "" {
		t.Fatalf("want a final answer:\n%s", r)
	}
	t.Logf("the embedded model answers Codex: %q", msgs[len(msgs)-1].Item.Text)
}

// embeddedCodexConfig is codexConfig for the embedded model: short instructions, and the features whose tools
// and instructions Codex would add turned off.
func embeddedCodexConfig(t *testing.T, url string) string {
	t.Helper()
	instructions := filepath.Join(t.TempDir(), "instructions.md")
	if err := os.WriteFile(instructions, []byte("You are a coding agent. Use the tools to act in the workspace, then answer briefly.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return codexConfig(url, "embedded", fmt.Sprintf("model_instructions_file = %q", instructions),
		"web_search = \"disabled\"", "", "[features]", "multi_agent = false", "goals = false", "image_generation = false",
		"view_image = false", "skill_search = false", "apps = false")
}

// TestCodexPrefixAffinity: a Codex session of several turns (exec, then exec resume --last) against two
// instances of the embedded model. Each turn resends the conversation so far under the session's
// prompt_cache_key; every turn must land on the instance of the first, and from the second on find its prefix
// in that instance's cache. The hit ratio of each turn (cached tokens / prompt tokens) is logged.
func TestCodexPrefixAffinity(t *testing.T) {
	const key = "codex-test-key"
	g := startDuet(t, "--model", "embedded", "--model", "embedded", "--api-key", key)
	home, dir := codexHome(t, embeddedCodexConfig(t, g.url)), t.TempDir()
	prompts := []string{"Say hello", "Tell me more.", "And then?", "Sum it up."}
	for i, p := range prompts {
		args := []string{p}
		if i > 0 {
			args = []string{"resume", "--last", p}
		}
		runCodex(t, home, dir, key, args...)
	}

	recent := requests(t, g.as(key), client.RequestsQuery{})
	turns := recent.Requests[:0]
	for _, r := range recent.Requests {
		if r.Path == "/v1/responses" {
			turns = append(turns, r)
		}
	}
	if len(turns) != len(prompts) {
		t.Fatalf("%d requests to /v1/responses, want one per turn (%d): %+v", len(turns), len(prompts), recent.Requests)
	}
	instances := map[string]bool{}
	for i, r := range turns {
		if r.Status != 200 || r.Usage == nil || r.Usage.PromptTokens == 0 {
			t.Fatalf("turn %d: %+v", i+1, r)
		}
		instances[r.Route.DecodeInstance] = true
		ratio := float64(r.Usage.CachedTokens) / float64(r.Usage.PromptTokens)
		t.Logf("turn %d on %s: %d prompt tokens, %d cached (hit ratio %.3f); route: %s", i+1, r.Route.DecodeInstance, r.Usage.PromptTokens, r.Usage.CachedTokens, ratio, r.Route.Reason)
		if i > 0 && r.Usage.CachedTokens < turns[i-1].Usage.PromptTokens/2 {
			t.Errorf("turn %d found %d of its %d prompt tokens cached; the turn before sent %d", i+1, r.Usage.CachedTokens, r.Usage.PromptTokens, turns[i-1].Usage.PromptTokens)
		}
	}
	if len(instances) != 1 {
		t.Errorf("the turns of one session ran on %d instances, want one: %v", len(instances), instances)
	}
}
