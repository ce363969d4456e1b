package main

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

	"github.com/duet-ai/duet/internal/testnode"
)

// The Codex CLI (npm @openai/codex, pinned in testdata/agents) against a real duet, over the Responses API: the
// configuration below is what `duet launch codex` and the README give a user.

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

// runCodex runs `codex exec --json prompt` in workdir with a CODEX_HOME of config, a HOME of its own, and no
// sandbox (the kernel features of Codex's sandbox are not on every CI machine; the command runs in a
// temporary directory). It fails the test unless codex exits 0 with a completed turn.
func runCodex(t *testing.T, config, workdir, apiKey, prompt string, args ...string) codexRun {
	t.Helper()
	bin := testnode.Agent(t, "codex")
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append([]string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--cd", workdir}, args...)
	cmd := exec.CommandContext(ctx, bin, append(argv, prompt)...)
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
		r := runCodex(t, codexConfig(g.url, "echo", `model_reasoning_effort = "high"`), dir, key,
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

	t.Run("code mode", func(t *testing.T) {
		dir := t.TempDir()
		r := runCodex(t, codexConfig(g.url, "gpt-6.1-sol"), dir, key, `call: functions__exec {"input":"text(\"hello from the JavaScript host\")"}`)
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
	instructions := filepath.Join(t.TempDir(), "instructions.md")
	if err := os.WriteFile(instructions, []byte("You are a coding agent. Use the tools to act in the workspace, then answer briefly.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := codexConfig(g.url, "embedded", fmt.Sprintf("model_instructions_file = %q", instructions),
		"web_search = \"disabled\"", "", "[features]", "multi_agent = false", "goals = false", "image_generation = false",
		"view_image = false", "skill_search = false", "apps = false")
	r := runCodex(t, config, t.TempDir(), key, "Say hello")
	msgs := r.items("agent_message")
	if len(msgs) == 0 || strings.TrimSpace(msgs[len(msgs)-1].Item.Text) == "" {
		t.Fatalf("want a final answer:\n%s", r)
	}
	t.Logf("the embedded model answers Codex: %q", msgs[len(msgs)-1].Item.Text)
}
