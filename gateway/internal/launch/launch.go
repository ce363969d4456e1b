// Package launch runs a coding agent pointed at a duet gateway (duet launch claude|codex), as `ollama launch`
// does for Ollama: Claude Code through its environment (ANTHROPIC_BASE_URL and the model variables), Codex CLI
// through a config.toml of its own in a temporary CODEX_HOME, with a provider block for the gateway's
// Responses API. Nothing of the user's own configuration is changed.
package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Agents launch knows, by the name on the command line.
const (
	Claude = "claude"
	Codex  = "codex"
)

// DefaultKey is the key an agent sends when the gateway has none: the agents refuse to start without one.
const DefaultKey = "duet"

// Options say which agent to run against which gateway.
type Options struct {
	Agent string
	// URL is the gateway's base URL (http://127.0.0.1:8000), without /v1.
	URL string
	// Model is the model the agent asks for; empty leaves the agent's own defaults, which the gateway's
	// --model-alias can map.
	Model string
	// Key is the API key the agent sends.
	Key string
	// Binary is the agent's executable: a path, or a name looked up on PATH (the agent's name by default).
	Binary string
	// Args go to the agent as they are.
	Args []string
}

// ClaudeEnv is the environment that points Claude Code at the gateway: its Messages API at ANTHROPIC_BASE_URL,
// the key as a bearer token (ANTHROPIC_AUTH_TOKEN, so Claude Code does not ask to approve an API key), and,
// with a model, that model for every role Claude Code picks a model for (main, opus, sonnet, haiku and its
// small/fast one, subagents). Non-essential traffic (telemetry, update checks, error reports) is off: the
// gateway is the only host it needs.
func ClaudeEnv(o Options) []string {
	env := []string{
		"ANTHROPIC_BASE_URL=" + o.URL,
		"ANTHROPIC_AUTH_TOKEN=" + o.Key,
		"ANTHROPIC_API_KEY=",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
	if o.Model != "" {
		for _, v := range []string{"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
			"ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"} {
			env = append(env, v+"="+o.Model)
		}
	}
	return env
}

// CodexKeyEnv is the variable Codex reads the gateway's key from (the provider's env_key).
const CodexKeyEnv = "DUET_API_KEY"

// CodexConfig is the config.toml that points Codex CLI at the gateway's Responses API: a provider "duet" and,
// with a model, that model. gateway/e2e/codex_e2e_test.go runs the real Codex with it (TestCodexEcho/launch).
func CodexConfig(o Options) string {
	var b strings.Builder
	if o.Model != "" {
		fmt.Fprintf(&b, "model = %s\n", strconv.Quote(o.Model))
	}
	b.WriteString("model_provider = \"duet\"\n")
	// Nothing that leaves the machine: no update check, no analytics.
	b.WriteString("check_for_update_on_startup = false\n\n")
	b.WriteString("[analytics]\nenabled = false\n\n")
	b.WriteString("[model_providers.duet]\n")
	b.WriteString("name = \"duet\"\n")
	fmt.Fprintf(&b, "base_url = %s\n", strconv.Quote(o.URL+"/v1"))
	b.WriteString("wire_api = \"responses\"\n")
	fmt.Fprintf(&b, "env_key = %s\n", strconv.Quote(CodexKeyEnv))
	return b.String()
}

// Prepare says how to run the agent: its environment additions, and for Codex the CODEX_HOME it writes under
// tmp (which the caller removes after the agent exits).
func Prepare(o Options, tmp string) (env []string, err error) {
	switch o.Agent {
	case Claude:
		return ClaudeEnv(o), nil
	case Codex:
		home := filepath.Join(tmp, "codex-home")
		if err := os.MkdirAll(home, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(CodexConfig(o)), 0o600); err != nil {
			return nil, err
		}
		return []string{"CODEX_HOME=" + home, CodexKeyEnv + "=" + o.Key}, nil
	}
	return nil, fmt.Errorf("unknown agent %q: want %s or %s", o.Agent, Claude, Codex)
}

// Merge returns base with add's variables set, each replacing base's of the same name; sorted for a
// reproducible environment.
func Merge(base, add []string) []string {
	vars := map[string]string{}
	for _, list := range [][]string{base, add} {
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// GatewayURL is the URL an agent on this machine reaches a gateway listening on listen at: a wildcard or empty
// host is the loopback address.
func GatewayURL(listen string, tls bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("gateway address %q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

const usage = `Usage: duet launch claude|codex [flags] [-- agent args]

Runs Claude Code or Codex CLI pointed at a duet gateway: Claude Code through its environment
(ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN and the model variables), Codex through a config.toml in a temporary
CODEX_HOME with a provider for the gateway's Responses API. Arguments after -- go to the agent.

`

// ParseArgs reads duet launch's command line; getenv supplies the DUET_* defaults.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	fs := flag.NewFlagSet("duet launch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var o Options
	var listen, rawURL string
	fs.StringVar(&listen, "listen", env("DUET_LISTEN", "127.0.0.1:8000"), "the gateway's --listen address [DUET_LISTEN]")
	fs.StringVar(&rawURL, "url", env("DUET_URL", ""), "the gateway's base URL, when not at --listen (http://host:port) [DUET_URL]")
	fs.StringVar(&o.Model, "model", env("DUET_LAUNCH_MODEL", ""), "model the agent asks for (default: the agent's own, for --model-alias to map) [DUET_LAUNCH_MODEL]")
	fs.StringVar(&o.Key, "api-key", env("DUET_API_KEY", DefaultKey), "API key the agent sends [DUET_API_KEY]")
	fs.StringVar(&o.Binary, "bin", env("DUET_LAUNCH_BIN", ""), "the agent's executable (default: claude or codex on PATH) [DUET_LAUNCH_BIN]")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return o, flag.ErrHelp
		}
		return o, errors.New("name the agent: claude or codex")
	}
	o.Agent = args[0]
	if o.Agent != Claude && o.Agent != Codex {
		return o, fmt.Errorf("unknown agent %q: want %s or %s", o.Agent, Claude, Codex)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		o.Args = fs.Args()
	}
	if o.Binary == "" {
		o.Binary = o.Agent
	}
	// The gateway's DUET_API_KEY may list several keys; the agent sends the first.
	o.Key, _, _ = strings.Cut(o.Key, ",")
	if o.Key = strings.TrimSpace(o.Key); o.Key == "" {
		o.Key = DefaultKey
	}
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, fmt.Errorf("--url %q: want http://host:port or https://host:port", rawURL)
		}
		o.URL = strings.TrimSuffix(strings.TrimSuffix(u.String(), "/"), "/v1")
		return o, nil
	}
	var err error
	o.URL, err = GatewayURL(listen, getenv("DUET_TLS_CERT") != "")
	return o, err
}

// Main is duet launch: it runs the agent and returns its exit status.
func Main(args []string, getenv func(string) string, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := ParseArgs(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "duet launch:", err)
		return 2
	}
	path, err := exec.LookPath(o.Binary)
	if err != nil {
		fmt.Fprintf(stderr, "duet launch: %s not found (%v); install it (npm i -g %s) or name it with --bin\n", o.Binary, err, npmPackage(o.Agent))
		return 127
	}
	tmp, err := os.MkdirTemp("", "duet-launch-")
	if err != nil {
		fmt.Fprintln(stderr, "duet launch:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	add, err := Prepare(o, tmp)
	if err != nil {
		fmt.Fprintln(stderr, "duet launch:", err)
		return 1
	}
	cmd := exec.Command(path, o.Args...)
	cmd.Env = Merge(environ, add)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// The terminal's ^C reaches the agent itself (same process group); the launcher waits for it to finish.
	signal.Ignore(os.Interrupt, syscall.SIGQUIT)
	defer signal.Reset(os.Interrupt, syscall.SIGQUIT)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if exit.ExitCode() >= 0 {
			return exit.ExitCode()
		}
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "duet launch:", err)
		return 1
	}
	return 0
}

func npmPackage(agent string) string {
	if agent == Codex {
		return "@openai/codex"
	}
	return "@anthropic-ai/claude-code"
}
