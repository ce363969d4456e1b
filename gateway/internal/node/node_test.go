package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/cluster"
)

// testConfig is a node of one on loopback: a gossip port of its own, the in-process router, no engine yet.
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		NodeID: "n1", DataDir: t.TempDir(), Engine: "echo", Router: "roundrobin", Models: []string{"m1", "m2"},
		ListenHost: "127.0.0.1", APIAddr: "127.0.0.1:1", ClusterBind: "127.0.0.1:0", ClusterBindSet: true,
	}
}

// TestStart: a node starts without its engine (the API answers while it starts): it is a member of its
// cluster, its --model instances are specs with ids of its own, the router answers, swaps are checked against
// the catalog, and Close stops it all. No binary is built: the engine plugin is what StartEngine starts.
func TestStart(t *testing.T) {
	t.Setenv("DUET_CLUSTER_TIMINGS", "local")
	n, err := Start(context.Background(), testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.ID() != "n1" || n.Agent().NodeID() != "n1" || n.Secrets() != nil {
		t.Fatalf("id %q, agent %q, secrets %v", n.ID(), n.Agent().NodeID(), n.Secrets())
	}
	if _, ok := n.Agent().Snapshot().Node(cluster.NodeID("n1")); !ok {
		t.Error("the node is not a member of its own cluster")
	}
	if snap := n.View().Current(); snap.Self != "n1" {
		t.Errorf("the router's view is of %q", snap.Self)
	}
	if _, _, err := n.Engines().Get(); !errors.Is(err, errStarting) {
		t.Errorf("the engine before StartEngine: %v", err)
	}
	r, release, err := n.Routers().Acquire()
	if err != nil || r == nil {
		t.Fatalf("router: %v", err)
	}
	release()
	if got := n.Swapper().Current(); got != "roundrobin" {
		t.Errorf("router %q", got)
	}
	if !contains(n.Swapper().Available(), "router-disagg") {
		t.Errorf("available routers %v lack the built-in router-disagg", n.Swapper().Available())
	}
	for _, tc := range []struct {
		name, router string
		sum          []byte
	}{
		{"not registered", "/bin/sh", nil},
		{"a pin on a built-in", "roundrobin", make([]byte, 32)},
	} {
		if err := n.Swapper().SwapRouter(context.Background(), tc.router, tc.sum); !errors.Is(err, ErrRouterRefused) {
			t.Errorf("%s: %v, want ErrRouterRefused", tc.name, err)
		}
	}
	if err := n.Swapper().SwapRouter(context.Background(), "router-disagg", nil); err != nil {
		t.Fatal(err)
	}
	if got := n.Swapper().Current(); got != "router-disagg" {
		t.Errorf("after the swap: router %q", got)
	}
	if st := n.Plugins(); len(st) != 1 || !strings.Contains(st[0].Name, "router-disagg") {
		t.Errorf("plugins %+v", st)
	}
	if err := n.Leave(); err != nil {
		t.Error(err)
	}
}

// TestStartRefuses: what a node refuses at start says which flag is wrong, and leaves nothing running.
func TestStartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"bad node id", func(c *Config) { c.NodeID = "a b" }, "--node-id"},
		{"unknown engine", func(c *Config) { c.Engine = "nope" }, `engine "nope"`},
		{"unknown router", func(c *Config) { c.Router = "nope" }, `router "nope"`},
		{"pinned built-in", func(c *Config) { c.RouterSHA256 = make([]byte, 32) }, "--router-sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.edit(&cfg)
			n, err := Start(context.Background(), cfg)
			if err == nil {
				n.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want it to name %s", err, tc.want)
			}
		})
	}
}
