// Package enginetest is the conformance suite for engine plugins. Any implementation of engine.Engine runs the
// same checks, in process through the real gRPC adapter (Run) or as a real subprocess (RunPlugin):
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, myengine.New(), enginetest.Config{Model: "testdata/model"})
//	}
//
// The suite checks the contract of sdk/engine: descriptions, the event stream (one Final, last), usage counts,
// determinism of greedy and seeded decoding, max tokens, stop strings across token boundaries, logprobs,
// cancellation, a consumer that goes away, concurrency, typed errors, Tokenize against Generate, and Unload.
package enginetest

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/internal/selfexec"
)

// Config says what to load and how hard to push.
type Config struct {
	// Model is passed to Load. Required.
	Model string
	// LoadOptions are passed to Load.
	LoadOptions map[string]string
	// Prompt is the user message of the generation checks; a default is used when empty.
	Prompt string
	// MaxTokens bounds the generations of the suite; 16 when zero.
	MaxTokens int
	// Timeout bounds each check; 60 s when zero (loading a real model can take a while), five times that
	// under the race detector.
	Timeout time.Duration
	// Skip names checks to skip, with the reason as the value (e.g. an engine without seeded sampling).
	Skip map[string]string
}

func (c Config) withDefaults() Config {
	if c.Prompt == "" {
		c.Prompt = "Tell me a short story about a lighthouse keeper who collects sea glass."
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 16
	}
	if c.Timeout == 0 {
		c.Timeout = raceSlowdown * 60 * time.Second
	}
	return c
}

// Run serves impl inside the test process through the real gRPC adapter and runs the suite against the client.
func Run(t *testing.T, impl engine.Engine, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rc, err := engine.ServeInProcess(ctx, impl)
	if err != nil {
		t.Fatalf("serve in process: %v", err)
	}
	ccfg := engine.ClientConfig()
	ccfg.Reattach = rc
	ccfg.Logger = hclog.NewNullLogger()
	client, pc, err := engine.Connect(ccfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pc.Kill)
	RunEngine(t, client, cfg)
}

// RunPlugin starts cmd as an engine plugin subprocess (with AutoMTLS, as the gateway does) and runs the suite.
func RunPlugin(t *testing.T, cmd *exec.Cmd, cfg Config) {
	t.Helper()
	client := StartPlugin(t, cmd)
	RunEngine(t, client, cfg)
}

// StartPlugin starts cmd as an engine plugin subprocess and returns an Engine connected to it. The process is
// killed when the test ends; its stderr goes to the test log.
func StartPlugin(t testing.TB, cmd *exec.Cmd) engine.Engine {
	t.Helper()
	ccfg := engine.ClientConfig()
	ccfg.Cmd = cmd
	ccfg.AutoMTLS = true
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	ccfg.Stderr = w
	ccfg.Logger = hclog.NewNullLogger()
	ccfg.StartTimeout = time.Minute
	client, pc, err := engine.Connect(ccfg)
	if err != nil {
		t.Fatalf("start plugin %s: %v", cmd.Path, err)
	}
	t.Cleanup(pc.Kill)
	return client
}

// pluginEnv marks a test binary re-executed as a plugin by PluginCommand.
const pluginEnv = "DUET_ENGINETEST_PLUGIN"

// ServePluginIfRequested serves the engine that newEngine returns and exits, when this process was started by
// PluginCommand. Call it first thing in TestMain, so a package's test binary doubles as its plugin binary:
//
//	func TestMain(m *testing.M) {
//		enginetest.ServePluginIfRequested(func() engine.Engine { return myengine.New() })
//		os.Exit(m.Run())
//	}
func ServePluginIfRequested(newEngine func() engine.Engine) {
	selfexec.ServeIfMarked(pluginEnv, func() { engine.Serve(newEngine()) })
}

// PluginCommand returns a command that re-executes the running test binary as an engine plugin (see
// ServePluginIfRequested).
func PluginCommand(t testing.TB) *exec.Cmd {
	t.Helper()
	return selfexec.Command(t, pluginEnv)
}

// testWriter sends a plugin's stderr to the test log until the test ends.
type testWriter struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Logf("plugin: %s", strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
