// Package e2e tests the duet binary from outside, as its users meet it. It has no code of its own: its TestMain
// builds github.com/duet-ai/duet/gateway into a temporary directory once, and each test starts that binary as
// a real process (startGateway, startDuet, startDuetWith in e2e_test.go) with real plugin subprocesses — the
// built-in echo engine and routers, the embedded model, or this test binary itself as an external engine
// plugin (faultyEngine, which misbehaves on request) — on loopback addresses, and drives it with the
// official clients: the OpenAI, Anthropic and Ollama SDKs for Go and Node.js, the Codex and Claude Code CLIs,
// headless Chromium for the dashboard, and `duet bench`. Clusters of several gateways run on 127.0.0.0/8, and
// in network namespaces through internal/netnstest where the host allows it.
//
// The tests are heavy (each starts processes); run the ones you need:
//
//	go test ./gateway/e2e -run 'TestChat|TestCluster'
package e2e
