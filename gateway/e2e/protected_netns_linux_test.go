package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/internal/netnstest"
)

// TestProtectedModeNetns: a gateway without keys that listens beyond loopback (0.0.0.0 in a network
// namespace of its own, 10.215.0.1 on its veth) takes the cluster API's writes from its own loopback only,
// refuses a client on the network with a 403 that says why and how to open it, warns at start what is open,
// and tells the dashboard the same in GET /state. With --allow-remote-admin the network client may write.
// It needs root and iproute2 (see TestClusterNetns).
func TestProtectedModeNetns(t *testing.T) {
	env := duetNet(t, 1)
	remote := &http.Client{Transport: &http.Transport{DialContext: netnstest.DialContext(env.Bridge())}}
	local := &http.Client{Transport: &http.Transport{DialContext: netnstest.DialContext(env.Node(1))}}
	start := func(port, gossip string, args ...string) *gateway {
		return startDuetWith(t, duetOptions{listen: env.IP(1) + ":" + port, client: remote,
			prefix: env.Exec(1)},
			append([]string{"--engine", "echo", "--model", "echo", "--listen", "0.0.0.0:" + port, "--cluster-bind", "127.0.0.1:" + gossip}, args...)...)
	}
	writes := []struct {
		method, path string
		body         any
	}{
		{"PUT", "/admin/v1/router", map[string]string{"router": "roundrobin"}},
		{"POST", "/v1/instances", map[string]any{"model": "echo"}},
		{"POST", "/v1/instance-links", map[string]any{"prefill_instances": []string{"x"}, "decode_instances": []string{"y"}}},
		{"POST", "/admin/v1/cluster/keys", map[string]string{"op": "use", "key": "AAAA"}},
	}

	g := start("8000", "7946")
	for _, w := range writes {
		st, err := g.api.Call(t.Context(), client.AdminKey, w.method, w.path, w.body, nil)
		if e := client.AsError(err); e == nil || st != 403 || e.Code != "protected_mode" ||
			!strings.Contains(e.Message, "--admin-key") || !strings.Contains(e.Message, "--allow-remote-admin") {
			t.Errorf("%s %s from the network: %d %v", w.method, w.path, st, err)
		}
	}
	if out, err := g.api.Router(t.Context()); err != nil || out.Router != "router-disagg" {
		t.Errorf("a read from the network: %v %+v", err, out)
	}
	// The same write from the gateway's own machine.
	onLoopback := client.New("http://127.0.0.1:8000", client.WithHTTPClient(local))
	if now, err := onLoopback.SetRouter(t.Context(), "roundrobin", ""); err != nil || now != "roundrobin" {
		t.Errorf("a write from loopback: %v %q", err, now)
	}
	state := g.state(t)
	joined := strings.Join(state.Exposure, "\n")
	for _, want := range []string{"No --api-key", "protected mode", "No cluster secret"} {
		if !strings.Contains(joined, want) {
			t.Errorf("/state's exposure does not say %q: %q", want, state.Exposure)
		}
		if !strings.Contains(g.stderr.String(), want) {
			t.Errorf("the start log does not say %q", want)
		}
	}

	opened := start("8001", "7947", "--allow-remote-admin")
	if now, err := opened.api.SetRouter(t.Context(), "roundrobin", ""); err != nil || now != "roundrobin" {
		t.Errorf("a write from the network with --allow-remote-admin: %v %q", err, now)
	}
	state = opened.state(t)
	if joined := strings.Join(state.Exposure, "\n"); !strings.Contains(joined, "anyone who can reach this gateway may load") {
		t.Errorf("/state's exposure with --allow-remote-admin: %q", state.Exposure)
	}
}
