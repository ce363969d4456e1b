package e2e

import (
	"net/http"
	"strings"
	"testing"

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
	type errBody struct {
		Error struct{ Message, Code string } `json:"error"`
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
		var e errBody
		if st := g.api(t, w.method, w.path, w.body, &e); st != 403 || e.Error.Code != "protected_mode" ||
			!strings.Contains(e.Error.Message, "--admin-key") || !strings.Contains(e.Error.Message, "--allow-remote-admin") {
			t.Errorf("%s %s from the network: %d %+v", w.method, w.path, st, e)
		}
	}
	var out struct{ Router string }
	if st := g.api(t, "GET", "/admin/v1/router", nil, &out); st != 200 || out.Router != "router-disagg" {
		t.Errorf("a read from the network: %d %+v", st, out)
	}
	// The same write from the gateway's own machine.
	onLoopback := &gateway{url: "http://127.0.0.1:8000", http: local}
	if st := onLoopback.api(t, "PUT", "/admin/v1/router", map[string]string{"router": "roundrobin"}, &out); st != 200 || out.Router != "roundrobin" {
		t.Errorf("a write from loopback: %d %+v", st, out)
	}
	var state struct{ Exposure []string }
	g.api(t, "GET", "/state", nil, &state)
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
	if st := opened.api(t, "PUT", "/admin/v1/router", map[string]string{"router": "roundrobin"}, &out); st != 200 || out.Router != "roundrobin" {
		t.Errorf("a write from the network with --allow-remote-admin: %d %+v", st, out)
	}
	opened.api(t, "GET", "/state", nil, &state)
	if joined := strings.Join(state.Exposure, "\n"); !strings.Contains(joined, "anyone who can reach this gateway may load") {
		t.Errorf("/state's exposure with --allow-remote-admin: %q", state.Exposure)
	}
}
