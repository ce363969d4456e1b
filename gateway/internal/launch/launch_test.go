package launch

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want Options
		err  string
	}{
		{name: "claude with the defaults", args: []string{"claude"},
			want: Options{Agent: Claude, URL: "http://127.0.0.1:8000", Key: DefaultKey, Binary: "claude"}},
		{name: "codex with a model and agent args", args: []string{"codex", "--model", "embedded", "--", "exec", "Say hello"},
			want: Options{Agent: Codex, URL: "http://127.0.0.1:8000", Model: "embedded", Key: DefaultKey, Binary: "codex", Args: []string{"exec", "Say hello"}}},
		{name: "a wildcard listen address is reached on loopback", args: []string{"claude", "--listen", "0.0.0.0:9000"},
			want: Options{Agent: Claude, URL: "http://127.0.0.1:9000", Key: DefaultKey, Binary: "claude"}},
		{name: "the gateway's environment", args: []string{"claude"},
			env:  map[string]string{"DUET_LISTEN": "127.0.0.2:8001", "DUET_API_KEY": "k, k2", "DUET_TLS_CERT": "c.pem", "DUET_LAUNCH_BIN": "/opt/claude"},
			want: Options{Agent: Claude, URL: "https://127.0.0.2:8001", Key: "k", Binary: "/opt/claude"}},
		{name: "a URL", args: []string{"codex", "--url", "http://127.0.0.1:8000/v1/", "--bin", "./codex", "--api-key", "s"},
			want: Options{Agent: Codex, URL: "http://127.0.0.1:8000", Key: "s", Binary: "./codex"}},
		{name: "no agent", args: nil, err: "name the agent"},
		{name: "an unknown agent", args: []string{"gemini"}, err: `unknown agent "gemini"`},
		{name: "a bad URL", args: []string{"claude", "--url", "127.0.0.1:8000"}, err: "want http://host:port"},
		{name: "a bad listen address", args: []string{"claude", "--listen", "8000"}, err: `gateway address "8000"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			got, err := ParseArgs(c.args, func(k string) string { return c.env[k] }, &stderr)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestPrepare: what each agent is given, in testdata/*.golden: Claude Code's environment, Codex's CODEX_HOME
// and key, and the config.toml written there.
func TestPrepare(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		o    Options
	}{
		{"claude", Options{Agent: Claude, URL: "http://127.0.0.1:8000", Key: "duet"}},
		{"claude-model", Options{Agent: Claude, URL: "http://127.0.0.1:8000", Key: "duet", Model: "embedded"}},
		{"codex", Options{Agent: Codex, URL: "http://127.0.0.1:8000", Key: "duet"}},
		{"codex-model", Options{Agent: Codex, URL: "https://gw.local:8443", Key: "k", Model: `mlx-community/Qwen3-8B-4bit`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			env, err := Prepare(c.o, tmp)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for _, kv := range env {
				out.WriteString(strings.ReplaceAll(kv, tmp, "$TMP") + "\n")
			}
			if c.o.Agent == Codex {
				config, err := os.ReadFile(filepath.Join(tmp, "codex-home", "config.toml"))
				if err != nil {
					t.Fatal(err)
				}
				out.WriteString("--- $TMP/codex-home/config.toml\n")
				out.Write(config)
			}
			golden(t, c.name+".golden", []byte(out.String()))
		})
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	got := Merge([]string{"PATH=/bin", "ANTHROPIC_API_KEY=sk-real", "HOME=/h"}, []string{"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=http://x"})
	want := []string{"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=http://x", "HOME=/h", "PATH=/bin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestMain runs a stand-in agent (a shell script) through Main: it sees the environment and the config file,
// gets the arguments after --, and its exit status is Main's; the temporary CODEX_HOME is gone afterwards.
func TestMainRunsTheAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	report := filepath.Join(dir, "report")
	agent := filepath.Join(dir, "agent")
	script := "#!/bin/sh\n{ echo \"args: $*\"; echo \"url: $ANTHROPIC_BASE_URL\"; echo \"model: $ANTHROPIC_MODEL\"; " +
		"echo \"home: $CODEX_HOME\"; [ -n \"$CODEX_HOME\" ] && cat \"$CODEX_HOME/config.toml\"; } > " + report + "\nexit 3\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent string
		want  []string
	}{
		{Claude, []string{"args: -p hi", "url: http://127.0.0.1:8123", "model: embedded", "home: \n"}},
		{Codex, []string{"args: exec hi", "model: \n", `base_url = "http://127.0.0.1:8123/v1"`, `model = "embedded"`}},
	} {
		args := []string{c.agent, "--listen", "127.0.0.1:8123", "--model", "embedded", "--bin", agent, "--"}
		if c.agent == Claude {
			args = append(args, "-p", "hi")
		} else {
			args = append(args, "exec", "hi")
		}
		var stderr bytes.Buffer
		code := Main(args, func(string) string { return "" }, []string{"PATH=/usr/bin:/bin"}, nil, &stderr, &stderr)
		if code != 3 {
			t.Fatalf("%s: exit %d, want the agent's 3 (%s)", c.agent, code, stderr.String())
		}
		got, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%s: the agent saw\n%s\nwant %q in it", c.agent, got, w)
			}
		}
		if c.agent == Codex {
			home := strings.TrimSpace(strings.SplitN(strings.SplitN(string(got), "home: ", 2)[1], "\n", 2)[0])
			if _, err := os.Stat(home); !os.IsNotExist(err) {
				t.Errorf("the temporary CODEX_HOME %s is still there (%v)", home, err)
			}
		}
	}
	var stderr bytes.Buffer
	if code := Main([]string{"claude", "--bin", filepath.Join(dir, "none")}, func(string) string { return "" }, nil, nil, &stderr, &stderr); code != 127 || !strings.Contains(stderr.String(), "@anthropic-ai/claude-code") {
		t.Errorf("a missing agent: exit %d, %q", code, stderr.String())
	}
}
