package serfcluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// testLogger discards logs unless SERFCLUSTER_LOG=1, which sends them (debug included) to stderr. Serf's
// goroutines log after a test ends, so logging through testing.T is not an option.
func testLogger() *slog.Logger {
	if os.Getenv("SERFCLUSTER_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testNode is a Cluster with its state endpoint served on a loopback listener, as the gateway would mount it.
type testNode struct {
	*Cluster
	cfg Config
	srv *http.Server
}

// loopbackIP gives node i its own loopback address, so members differ by IP as on a real LAN.
func loopbackIP(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

// fakeAddresses gives node i a made-up Thunderbolt, Ethernet and Wi-Fi address: detection is injected, so
// path selection sees a realistic machine while gossip runs on loopback.
func fakeAddresses(i int) []netif.Address {
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	return []netif.Address{
		{IP: ip(fmt.Sprintf("169.254.7.%d", 10+i)), PrefixLen: 16, Interface: "bridge0", Kind: netif.KindThunderbolt},
		{IP: ip(fmt.Sprintf("10.1.0.%d", 10+i)), PrefixLen: 24, Interface: "en0", Kind: netif.KindEthernet, SpeedMbps: 10000},
		{IP: ip(fmt.Sprintf("192.168.1.%d", 10+i)), PrefixLen: 24, Interface: "en1", Kind: netif.KindWiFi},
	}
}

// testConfig is a fast configuration for node i on loopback.
func testConfig(i int) Config {
	cfg := DefaultConfig()
	cfg.NodeID = NodeID(fmt.Sprintf("n%d", i))
	cfg.BindAddr = loopbackIP(i) + ":0"
	cfg.Version = "test"
	cfg.HardwareClass = "ci"
	cfg.Addresses = fakeAddresses(i)
	cfg.Timings = LocalTimings()
	cfg.AntiEntropyInterval = 400 * time.Millisecond
	cfg.PullTimeout = 2 * time.Second
	cfg.LoadInterval = 50 * time.Millisecond
	cfg.CoordinateInterval = 200 * time.Millisecond
	cfg.TombstoneTTL = time.Minute
	cfg.OrphanGrace = 2 * time.Second
	cfg.Logger = testLogger()
	return cfg
}

// startNode starts a node with cfg; APIAddr and StateURL are set to a fresh listener on the node's IP
// unless cfg names them.
func startNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	host, _, err := net.SplitHostPort(cfg.BindAddr)
	if err != nil {
		t.Fatal(err)
	}
	listenAddr := net.JoinHostPort(host, "0")
	if cfg.APIAddr != "" {
		listenAddr = cfg.APIAddr
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIAddr = ln.Addr().String()
	c, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("New(%s): %v", cfg.NodeID, err)
	}
	mux := http.NewServeMux()
	mux.Handle(StatePath, c.StateHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	n := &testNode{Cluster: c, cfg: cfg, srv: srv}
	t.Cleanup(n.stop)
	return n
}

// stop shuts the node down without leaving (a crash, to its peers) and stops its HTTP server.
func (n *testNode) stop() {
	_ = n.Shutdown()
	_ = n.srv.Close()
}

// startCluster starts count nodes, all joining the first, and waits until every node sees every other
// alive. mod, if not nil, adjusts each node's config.
func startCluster(t testing.TB, count int, mod func(i int, cfg *Config)) []*testNode {
	t.Helper()
	nodes := make([]*testNode, count)
	for i := range count {
		cfg := testConfig(i)
		if i > 0 {
			cfg.JoinAddrs = []string{nodes[0].GossipAddr()}
		}
		if mod != nil {
			mod(i, &cfg)
		}
		nodes[i] = startNode(t, cfg)
	}
	waitAllAlive(t, nodes, 20*time.Second)
	return nodes
}

func waitAllAlive(t testing.TB, nodes []*testNode, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, func() (bool, string) {
		for _, n := range nodes {
			s := n.Snapshot()
			for _, m := range nodes {
				node, ok := s.Node(m.id)
				if !ok || node.Status != StatusAlive {
					return false, fmt.Sprintf("%s sees %s as %q (known %v)", n.id, m.id, node.Status, ok)
				}
			}
		}
		return true, ""
	})
}

// waitFor polls cond until it holds or timeout passes; on timeout the test fails with cond's last word.
func waitFor(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// everywhere checks pred on every node's snapshot and names the first node where it fails.
func everywhere(nodes []*testNode, pred func(s *Snapshot) (bool, string)) (bool, string) {
	for _, n := range nodes {
		if ok, why := pred(n.Snapshot()); !ok {
			return false, fmt.Sprintf("on %s: %s", n.id, why)
		}
	}
	return true, ""
}

func testInstance(node NodeID, name string) Instance {
	return Instance{
		ID: string(node) + "/" + name, Model: "mlx-community/Llama-3.1-8B-Instruct-4bit", Node: node,
		Engine: "mlx", Role: RoleBoth, Status: InstanceReady, KVEndpoint: "127.0.0.1:5000",
		Fingerprint: "llama3-8b/bf16/32x8x128", Labels: map[string]string{"backend": "metal"},
	}
}

func describeLinks(s *Snapshot) string {
	var b strings.Builder
	for _, l := range s.Links {
		fmt.Fprintf(&b, "%s@%d/%s%v ", l.LinkID, l.Revision.LTime, l.Revision.Origin, l.PrefillInstances)
	}
	return b.String()
}

func isClosed(err error) bool { return errors.Is(err, ErrClosed) }
