package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// TestClusterPDAuto: two nodes with --pd auto and no instance links, node 2 four times slower than node 1
// (the engine's slowdown option: every forward pass sleeps three times its duration, so the nodes differ by
// the factor and not by contention, also under the race detector). Each node calibrates its instance when
// it loads and gossips the speeds; a long prompt sent to the slow node is then not prefilled there: the
// router either forwards it to node 1 or has node 1 prefill it, whichever it estimates faster. Each node
// probes its link from the other before any request, so the router weighs both splits; the answer's
// timings.route carries its reason, and the node that ran it records the estimate's error.
func TestClusterPDAuto(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster")
	}
	port := clusterPort(t)
	secret := writeSecret(t, "the fast and the slow node share this secret")
	opts := "remote_prefill_threshold=64,kv_frame_timeout=20s"
	n1 := startNode(t, "127.0.0.1", port, secret, "", "--pd", "auto", "--engine", "mlx-engine", "--engine-opt", opts)
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1", "--pd", "auto", "--engine", "mlx-engine", "--engine-opt", opts+",slowdown=4")
	id1, id2 := n1.nodeID(t), n2.nodeID(t)

	type speedInfo struct {
		ID    string `json:"id"`
		Node  string `json:"node"`
		Speed *struct {
			Prefill []struct {
				TPS float64 `json:"tokens_per_second"`
			} `json:"prefill_tokens_per_second"`
			DecodeTPS float64 `json:"decode_tokens_per_second"`
			Samples   int64   `json:"samples"`
			Ingress   []struct {
				From           string  `json:"from_node"`
				BytesPerSecond float64 `json:"bytes_per_second"`
				RTTMs          float64 `json:"rtt_ms"`
			} `json:"kv_ingress"`
		} `json:"speed"`
	}
	// Each node's speed as the other sees it, through gossip (a gateway shows its own instances' figures from
	// its book at once, and its router gets them with the gossip that carries them to the peer).
	speeds := map[string]float64{} // node → best prefill tok/s
	seen := func(g *node, id string) float64 {
		var out struct {
			Instances []speedInfo `json:"instances"`
		}
		// The speeds are the instances view's own; the client's Instance keeps them as JSON.
		if _, err := g.api.Call(t.Context(), client.APIKey, "GET", "/v1/instances", nil, &out); err != nil {
			t.Fatal(err)
		}
		best := 0.0
		for _, in := range out.Instances {
			if in.Node != id || in.Speed == nil || in.Speed.Samples == 0 || in.Speed.DecodeTPS == 0 {
				continue
			}
			for _, b := range in.Speed.Prefill {
				best = max(best, b.TPS)
			}
		}
		return best
	}
	waitFor(t, 3*time.Minute, "both instances calibrated, each seen by the other node", func() bool {
		speeds[id1], speeds[id2] = seen(n2, id1), seen(n1, id2)
		return speeds[id1] > 0 && speeds[id2] > 0
	})
	t.Logf("measured prefill: node 1 %.0f tok/s, node 2 %.0f tok/s", speeds[id1], speeds[id2])
	if speeds[id1] < 1.5*speeds[id2] {
		t.Fatalf("node 1 measured at %.0f tok/s, node 2 at %.0f: the slowdown did not show", speeds[id1], speeds[id2])
	}

	// Before any request crossed them, each node probed the link from the other into its instance (a timed
	// download from the peer's gateway over the hop), so the router has a measured goodput and round trip.
	// What a router weighs is the other node's figures as gossip brought them (at most every SpeedInterval),
	// so each node must see the link into the other's instance from itself: the one a request it decides
	// would use to prefill here for a decode there.
	links := map[string]string{} // from→into → what was measured
	probed := func(g *node, from, into string) bool {
		var out struct {
			Instances []speedInfo `json:"instances"`
		}
		if _, err := g.api.Call(t.Context(), client.APIKey, "GET", "/v1/instances", nil, &out); err != nil {
			t.Fatal(err)
		}
		for _, in := range out.Instances {
			if in.Node != into || in.Speed == nil {
				continue
			}
			for _, l := range in.Speed.Ingress {
				if l.From == from && l.BytesPerSecond > 0 && l.RTTMs > 0 {
					links[from+"→"+into] = fmt.Sprintf("%.0f MB/s, RTT %.3f ms", l.BytesPerSecond/1e6, l.RTTMs)
					return true
				}
			}
		}
		return false
	}
	waitFor(t, time.Minute, "each node's link from the other probed", func() bool {
		return probed(n2, id2, id1) && probed(n1, id1, id2)
	})
	t.Logf("probed links, as the other node sees them: %v", links)

	prompt := strings.Repeat("A slow tide turned the pebbles over and over along the shore at dusk. ", 40)
	a := n2.chat(t, prompt, 8)
	r := a.Timings.Route
	t.Logf("route %+v, prefill %s, remote %+v", r, a.Timings.PrefillSource, a.Timings.Remote)
	if a.Status != 200 {
		t.Fatalf("status %d", a.Status)
	}
	onFast := r.DecodeNode == id1
	remoteFromFast := a.Timings.PrefillSource == "remote" && a.Timings.Remote != nil
	if !onFast && !remoteFromFast {
		t.Errorf("the long prompt was prefilled on the slow node (decode on %s, prefill %s)", r.DecodeNode, a.Timings.PrefillSource)
	}

	// The answer says why: the router's reason, with the cost model's estimates, in timings.route (carried
	// by the hop when node 1 ran it).
	if !strings.Contains(r.Reason, "auto: ") {
		t.Errorf("timings.route.reason %q has no auto estimate", r.Reason)
	}
	// With both links probed, every prefill candidate the router weighed could be estimated.
	if strings.Contains(r.Reason, "no prefill candidate measured") {
		t.Errorf("timings.route.reason %q: a probed link still counts as unmeasured", r.Reason)
	}
	// The node that ran it compared the estimate with what happened: node 2, which decided, or node 1, which
	// got the estimate with the forwarded decision.
	ran := n2
	if r.DecodeNode == id1 {
		ran = n1
	}
	var out struct {
		Errors map[string]struct {
			Count int64 `json:"count"`
		} `json:"estimate_errors"`
	}
	if _, err := ran.api.Call(t.Context(), client.APIKey, "GET", "/v1/instances", nil, &out); err != nil {
		t.Fatal(err)
	}
	if out.Errors["remote"].Count+out.Errors["local"].Count == 0 {
		t.Errorf("no estimate error recorded on the node that ran it (%s): %+v", r.DecodeNode, out.Errors)
	}
	// A short prompt stays where it is decoded, with no estimate.
	if b := n2.chat(t, "Hello there", 4); b.Timings.PrefillSource == "remote" {
		t.Errorf("a short prompt was prefilled remotely: %+v", b.Timings)
	}
}
