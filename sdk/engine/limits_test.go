package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	echo "github.com/duet-ai/duet/plugins/echo-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestLargeMessages sends and receives messages far above gRPC's default 4 MiB limit through the real
// adapter: a long prompt goes in, and its token list (larger still) comes back.
func TestLargeMessages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := engine.ServeInProcess(ctx, echo.New())
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.ClientConfig()
	cfg.Reattach = rc
	cfg.Logger = hclog.NewNullLogger()
	e, pc, err := engine.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Kill()
	d, err := e.Load(ctx, engine.LoadRequest{Model: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	prompt := strings.Repeat("word ", 2_000_000) // 10 MB of text, 2M tokens
	resp, err := e.Tokenize(ctx, engine.TokenizeRequest{InstanceID: d.InstanceID, Prompt: prompt})
	if err != nil {
		t.Fatalf("Tokenize of a 10 MB prompt: %v", err)
	}
	if len(resp.Tokens) != 2_000_000 || len(resp.Text) != len(prompt) {
		t.Errorf("got %d tokens and %d bytes of text", len(resp.Tokens), len(resp.Text))
	}
}
