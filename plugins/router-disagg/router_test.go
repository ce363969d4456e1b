package routerdisagg_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

func TestMain(m *testing.M) {
	routertest.ServePluginIfRequested(func() router.Router {
		r, err := routerdisagg.FromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return r
	})
	os.Exit(m.Run())
}

func TestConformanceInProcess(t *testing.T) { routertest.Run(t, newRouter(t, nil)) }

func TestConformanceSubprocess(t *testing.T) { routertest.RunPlugin(t, routertest.PluginCommand(t)) }

func TestConformanceDirect(t *testing.T) { routertest.RunRouter(t, newRouter(t, nil)) }

// newRouter returns a router with the default configuration, changed by edit.
func newRouter(t testing.TB, edit func(*routerdisagg.Config)) *routerdisagg.Router {
	t.Helper()
	cfg := routerdisagg.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	r, err := routerdisagg.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func route(t testing.TB, r router.Router, req router.Request, snap *router.Snapshot) router.Decision {
	t.Helper()
	d, err := r.Route(context.Background(), req, snap)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return d
}

// cluster is n alive nodes with paths over 10 GbE of quality 0.8 between each pair, holding the instances.
func cluster(n int, ins ...router.Instance) *router.Snapshot {
	s := routertest.Cluster(n, ins...)
	for i := range s.Paths {
		s.Paths[i].Address = "10.0.0." + strings.TrimPrefix(s.Paths[i].To, "n")
	}
	return s
}

// setPath sets the paths between two nodes, both ways.
func setPath(s *router.Snapshot, a, b, kind string, mbps int64, quality float64) {
	for i, p := range s.Paths {
		if p.From == a && p.To == b || p.From == b && p.To == a {
			s.Paths[i].Kind, s.Paths[i].SpeedMbps, s.Paths[i].Quality = kind, mbps, quality
		}
	}
}

// quantized puts the instance at another quantization of its model: another fingerprint, the same KVCompat.
func quantized(in *router.Instance) { in.Fingerprint += "-q4" }

// linkPrefill adds an instance link giving the decode instance these prefill instances.
func linkPrefill(s *router.Snapshot, decode string, prefill ...string) {
	s.InstanceLinks = append(s.InstanceLinks, router.InstanceLink{
		ID: fmt.Sprintf("l%d", len(s.InstanceLinks)+1), DecodeInstances: []string{decode}, PrefillInstances: prefill,
	})
}

func inst(id, node, role string, mod ...func(*router.Instance)) router.Instance {
	in := routertest.Ready(id, "m", node, role)
	for _, f := range mod {
		f(&in)
	}
	return in
}

func inFlight(n int) func(*router.Instance) {
	return func(in *router.Instance) { in.Load.InFlight = n }
}

func endpointIDs(d router.Decision) []string {
	var out []string
	for _, e := range d.PrefillEndpoints {
		out = append(out, e.InstanceID)
	}
	return out
}

func hashes(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	h := seed
	for i := range out {
		h = h*0x9E3779B97F4A7C15 + uint64(i) + 1
		out[i] = h
	}
	return out
}

func TestDecisions(t *testing.T) {
	t.Parallel()
	req := router.Request{Model: "m", PromptTokens: 5200, MaxTokens: 64, SourceNode: "n1"}
	tests := map[string]struct {
		snap        func() *router.Snapshot
		req         func(router.Request) router.Request
		cfg         func(*routerdisagg.Config)
		wantDecode  string
		wantPrefill []string
		wantAddr    []string
		wantExact   []bool   // per endpoint; nil: all exact
		wantReason  []string // substrings
	}{
		"prefill above the threshold": {
			snap:        func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			wantDecode:  "d",
			wantPrefill: []string{"p"},
			wantAddr:    []string{"10.0.0.2:7000"},
			wantReason:  []string{"decode on d@n1", "prefill on p@n2 over ethernet (10 Gb/s)", "because 5200 uncached tokens ≥ 1000"},
		},
		"prefill at exactly the threshold": {
			snap:        func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			req:         func(r router.Request) router.Request { r.PromptTokens = 1000; return r },
			wantDecode:  "d",
			wantPrefill: []string{"p"},
		},
		"local below the threshold": {
			snap:       func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			req:        func(r router.Request) router.Request { r.PromptTokens = 999; return r },
			wantDecode: "d",
			wantReason: []string{"prefill locally because 999 uncached tokens < 1000"},
		},
		"threshold from config": {
			snap:        func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			req:         func(r router.Request) router.Request { r.PromptTokens = 999; return r },
			cfg:         func(c *routerdisagg.Config) { c.PrefillThreshold = 500 },
			wantDecode:  "d",
			wantPrefill: []string{"p"},
		},
		"unknown prompt length offers prefill": {
			snap:        func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			req:         func(r router.Request) router.Request { r.PromptTokens = 0; return r },
			wantDecode:  "d",
			wantPrefill: []string{"p"},
			wantReason:  []string{"offered because the prompt length is unknown"},
		},
		"unknown prompt length, local by config": {
			snap:       func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			req:        func(r router.Request) router.Request { r.PromptTokens = 0; return r },
			cfg:        func(c *routerdisagg.Config) { c.PrefillWhenUnknown = false },
			wantDecode: "d",
			wantReason: []string{"prefill locally because the prompt length is unknown"},
		},
		"remote prefill off": {
			snap:       func() *router.Snapshot { return cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill")) },
			cfg:        func(c *routerdisagg.Config) { c.MaxPrefillEndpoints = 0 },
			wantDecode: "d",
			wantReason: []string{"prefill locally (remote prefill is off)"},
		},
		"fingerprint mismatch excluded": {
			snap: func() *router.Snapshot {
				return cluster(3, inst("d", "n1", "decode"),
					inst("p-q4", "n2", "prefill", func(in *router.Instance) { in.Fingerprint = "fp-m-q4" }),
					inst("p", "n3", "prefill", inFlight(9)))
			},
			wantDecode:  "d",
			wantPrefill: []string{"p"},
		},
		"only mismatched prefill": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("d", "n1", "decode"), inst("p-q4", "n2", "prefill", func(in *router.Instance) { in.Fingerprint = "fp-m-q4" }))
			},
			wantDecode: "d",
			wantReason: []string{"prefill locally: no prefill candidate (2 instances of the model; kv-compatible removed 1, not-decode removed 1)"},
		},
		"other quantization, linked: approximate": {
			snap: func() *router.Snapshot {
				s := cluster(2, inst("d", "n1", "decode"), inst("p-q4", "n2", "prefill", quantized))
				linkPrefill(s, "d", "p-q4")
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"p-q4"},
			wantExact:   []bool{false},
			wantReason:  []string{"prefill on p-q4@n2 (approximate: other quantization) over ethernet (10 Gb/s), because"},
		},
		"other quantization, not linked: never": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("d", "n1", "decode"), inst("p-q4", "n2", "prefill", quantized))
			},
			wantDecode: "d",
			wantReason: []string{"no prefill candidate (2 instances of the model; kv-compatible removed 1, not-decode removed 1)"},
		},
		"other quantization, linked to another decode instance: never": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("e", "n1", "decode", inFlight(5)), inst("p-q4", "n2", "prefill", quantized))
				linkPrefill(s, "e", "p-q4")
				return s
			},
			cfg:        noPartner, // so that the unlinked d decodes, and what it may prefill from shows
			wantDecode: "d",
			wantReason: []string{"kv-compatible removed 1"},
		},
		"other quantization without KVCompat: never": {
			snap: func() *router.Snapshot {
				s := cluster(2, inst("d", "n1", "decode", func(in *router.Instance) { in.KVCompat = "" }),
					inst("p-q4", "n2", "prefill", quantized, func(in *router.Instance) { in.KVCompat = "" }))
				linkPrefill(s, "d", "p-q4")
				return s
			},
			wantDecode: "d",
			wantReason: []string{"kv-compatible removed 1"},
		},
		"other KV family, linked: never": {
			snap: func() *router.Snapshot {
				s := cluster(2, inst("d", "n1", "decode"), inst("p-x", "n2", "prefill", quantized, func(in *router.Instance) { in.KVCompat = "kv-x" }))
				linkPrefill(s, "d", "p-x")
				return s
			},
			wantDecode: "d",
			wantReason: []string{"kv-compatible removed 1"},
		},
		"exact before approximate at equal score": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("a-q4", "n2", "prefill", quantized), inst("z-exact", "n3", "prefill"))
				linkPrefill(s, "d", "a-q4", "z-exact")
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"z-exact", "a-q4"},
			wantExact:   []bool{true, false},
			wantReason:  []string{"prefill on z-exact@n3 over ethernet (10 Gb/s), then a-q4@n2 (approximate: other quantization), because"},
		},
		"a better score beats exactness": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("a-q4", "n2", "prefill", quantized), inst("z-exact", "n3", "prefill", inFlight(2)))
				linkPrefill(s, "d", "a-q4", "z-exact")
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"a-q4", "z-exact"},
			wantExact:   []bool{false, true},
		},
		"excluded instance does not decode": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("a", "n1", "both"), inst("b", "n2", "both", inFlight(5)))
			},
			req:        func(r router.Request) router.Request { r.Exclude = []string{"a"}; return r },
			wantDecode: "b",
			// The exclusion is for decoding only: a may still prefill for b.
			wantPrefill: []string{"a"},
		},
		"instance links respected": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("p-far", "n2", "prefill", inFlight(5)), inst("p-near", "n3", "prefill"))
				setPath(s, "n1", "n3", "thunderbolt", 40000, 1)
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"d"}, PrefillInstances: []string{"p-far"}}}
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"p-far"},
		},
		"links to a missing prefill instance keep prefill local": {
			snap: func() *router.Snapshot {
				s := cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill"))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"d"}, PrefillInstances: []string{"p-gone"}}}
				return s
			},
			wantDecode: "d",
			wantReason: []string{"no prefill candidate (2 instances of the model; not-decode removed 1, linked removed 1)"},
		},
		"links of another decode instance do not restrict": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("e", "n1", "decode", inFlight(3)), inst("p1", "n2", "prefill"), inst("p2", "n3", "prefill"))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"e"}, PrefillInstances: []string{"p1"}}}
				return s
			},
			cfg:         noPartner,
			wantDecode:  "d",
			wantPrefill: []string{"p1", "p2"},
		},
		"a long prompt goes to the decode instance with a prefill partner": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("e", "n2", "decode", inFlight(3)), inst("p1", "n3", "prefill"))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"e"}, PrefillInstances: []string{"p1"}}}
				return s
			},
			wantDecode:  "e",
			wantPrefill: []string{"p1"},
		},
		"a short prompt does not care for partners": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("e", "n2", "decode", inFlight(3)), inst("p1", "n3", "prefill"))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"e"}, PrefillInstances: []string{"p1"}}}
				return s
			},
			req:        func(r router.Request) router.Request { r.PromptTokens = 300; return r },
			wantDecode: "d",
		},
		"prefill-only by links never decodes": {
			snap: func() *router.Snapshot {
				s := cluster(2, inst("a", "n1", "both", inFlight(4)), inst("b", "n2", "both"))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", DecodeInstances: []string{"a"}, PrefillInstances: []string{"b"}}}
				return s
			},
			wantDecode:  "a",
			wantPrefill: []string{"b"},
		},
		"failed node excluded": {
			snap: func() *router.Snapshot {
				s := cluster(4, inst("d-dead", "n2", "decode"), inst("d", "n1", "decode", inFlight(8)),
					inst("p-dead", "n2", "prefill"), inst("p-suspect", "n3", "prefill"), inst("p", "n4", "prefill", inFlight(8)))
				s.Nodes[1].Status = router.NodeFailed
				s.Nodes[2].Status = router.NodeSuspect
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"p"},
		},
		"path quality ordering": {
			snap: func() *router.Snapshot {
				s := cluster(4, inst("d", "n1", "decode"), inst("p-wifi", "n2", "prefill"), inst("p-tb", "n3", "prefill"), inst("p-eth", "n4", "prefill"))
				setPath(s, "n1", "n2", "wifi", 400, 0.35)
				setPath(s, "n1", "n3", "thunderbolt", 40000, 0.95)
				setPath(s, "n1", "n4", "ethernet", 1000, 0.6)
				return s
			},
			wantDecode:  "d",
			wantPrefill: []string{"p-tb", "p-eth"},
			wantAddr:    []string{"10.0.0.3:7000", "10.0.0.4:7000"},
			wantReason:  []string{"prefill on p-tb@n3 over thunderbolt (40 Gb/s), then p-eth@n4, because"},
		},
		"three endpoints by config": {
			snap: func() *router.Snapshot {
				return cluster(4, inst("d", "n1", "decode"), inst("p3", "n2", "prefill", inFlight(3)), inst("p1", "n3", "prefill", inFlight(1)), inst("p2", "n4", "prefill", inFlight(2)))
			},
			cfg:         func(c *routerdisagg.Config) { c.MaxPrefillEndpoints = 3 },
			wantDecode:  "d",
			wantPrefill: []string{"p1", "p2", "p3"},
		},
		"prefill on the same node": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("d", "n1", "decode"), inst("p", "n1", "prefill", func(in *router.Instance) { in.KVEndpoint = "0.0.0.0:7100" }))
			},
			wantDecode:  "d",
			wantPrefill: []string{"p"},
			wantAddr:    []string{"127.0.0.1:7100"},
			wantReason:  []string{"prefill on p@n1 on the same node"},
		},
		"decode instance is never its own prefill": {
			snap:       func() *router.Snapshot { return cluster(1, inst("a", "n1", "both")) },
			wantDecode: "a",
			wantReason: []string{"not-decode removed 1"},
		},
		"context too short excluded": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("short", "n1", "both", func(in *router.Instance) { in.ContextLength = 4096 }), inst("long", "n2", "both", inFlight(9)))
			},
			wantDecode: "long",
			wantReason: []string{"prompt-fits removed 1"},
		},
		"hardware preference": {
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("p-mac", "n2", "prefill"), inst("p-gpu", "n3", "prefill"))
				s.Nodes[1].Hardware, s.Nodes[2].Hardware = "apple-m3-ultra", "dgx-spark"
				return s
			},
			cfg:         func(c *routerdisagg.Config) { c.PrefillHardware = []string{"dgx-spark"} },
			wantDecode:  "d",
			wantPrefill: []string{"p-gpu", "p-mac"},
		},
		"locality breaks a tie": {
			snap:       func() *router.Snapshot { return cluster(2, inst("a", "n1", "both"), inst("b", "n2", "both")) },
			req:        func(r router.Request) router.Request { r.SourceNode = "n2"; r.PromptTokens = 10; return r },
			wantDecode: "b",
		},
		"lowest id breaks an exact tie": {
			snap:       func() *router.Snapshot { return cluster(2, inst("b", "n1", "both"), inst("a", "n2", "both")) },
			req:        func(r router.Request) router.Request { r.SourceNode = ""; r.PromptTokens = 10; return r },
			wantDecode: "a",
		},
		"load beats locality": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("a", "n1", "both", inFlight(4)), inst("b", "n2", "both", inFlight(1)))
			},
			req:        func(r router.Request) router.Request { r.PromptTokens = 10; return r },
			wantDecode: "b",
		},
		"kv utilisation counts": {
			snap: func() *router.Snapshot {
				return cluster(2, inst("a", "n1", "both", func(in *router.Instance) { in.Load.KVUtilization = 0.9 }),
					inst("b", "n2", "both", func(in *router.Instance) { in.Load.KVUtilization = 0.2 }))
			},
			req:        func(r router.Request) router.Request { r.PromptTokens = 10; return r },
			wantDecode: "b",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRouter(t, tc.cfg)
			rq := req
			if tc.req != nil {
				rq = tc.req(rq)
			}
			d := route(t, r, rq, tc.snap())
			if d.DecodeInstance != tc.wantDecode {
				t.Errorf("decode %q, want %q (%s)", d.DecodeInstance, tc.wantDecode, d.Reason)
			}
			if got := endpointIDs(d); !slices.Equal(got, tc.wantPrefill) {
				t.Errorf("prefill %v, want %v (%s)", got, tc.wantPrefill, d.Reason)
			}
			for i, a := range tc.wantAddr {
				if i < len(d.PrefillEndpoints) && d.PrefillEndpoints[i].Address != a {
					t.Errorf("prefill endpoint %d address %q, want %q", i, d.PrefillEndpoints[i].Address, a)
				}
			}
			for i, e := range d.PrefillEndpoints {
				if want := tc.wantExact == nil || i < len(tc.wantExact) && tc.wantExact[i]; e.Approximate == want {
					t.Errorf("prefill endpoint %d (%s) exact %v, want %v", i, e.InstanceID, !e.Approximate, want)
				}
			}
			for _, s := range tc.wantReason {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("reason %q lacks %q", d.Reason, s)
				}
			}
		})
	}
}

// noPartner turns the partner scorer off, for the cases about what an unlinked decode instance may prefill
// from (with it on, the linked one would win the long prompt).
func noPartner(c *routerdisagg.Config) { c.Weights.Partner = 0 }

func TestScoresOfTheWinner(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil)
	snap := cluster(3, inst("d", "n1", "decode", inFlight(1), func(in *router.Instance) { in.Load.KVUtilization = 0.25 }),
		inst("e", "n2", "decode", inFlight(4)), inst("p", "n3", "prefill"))
	d := route(t, r, router.Request{Model: "m", PromptTokens: 3000, SourceNode: "n1"}, snap)
	want := map[string]float64{
		"load": 0.75, "kv-utilization": 0.75, "prefix": 0, "locality": 1, "partner": 1,
		"decode-total": (0.75 + 0.5*0.75 + 0 + 0.1 + 2*1) / 4.6,
		"prefill-load": 1, "link": 0.8, "prefill-total": 0.9,
		"uncached-tokens": 3000,
	}
	for k, v := range want {
		if got, ok := d.Scores[k]; !ok || got < v-1e-9 || got > v+1e-9 {
			t.Errorf("Scores[%q] = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(d.Scores) != len(want) {
		t.Errorf("Scores %v has keys beyond %v", d.Scores, want)
	}
	for k, v := range d.Scores {
		if k != "uncached-tokens" && (v < 0 || v > 1) {
			t.Errorf("Scores[%q] = %v, outside [0, 1]", k, v)
		}
	}
}

func TestPrefixAffinity(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil)
	h := hashes(1, 40) // 40 blocks of 64 tokens
	req := router.Request{Model: "m", PromptTokens: 40 * 64, PrefixHashes: h}
	// First request: c is the busiest, b the idlest.
	first := cluster(3, inst("a", "n1", "both", inFlight(1)), inst("b", "n2", "both"), inst("c", "n3", "both", inFlight(2)))
	if d := route(t, r, req, first); d.DecodeInstance != "b" || d.Scores["prefix"] != 0 {
		t.Fatalf("first request went to %q with prefix %v, want b and 0: %s", d.DecodeInstance, d.Scores["prefix"], d.Reason)
	}
	// Now b is busier than c, but it holds the prefix.
	later := cluster(3, inst("a", "n1", "both", inFlight(2)), inst("b", "n2", "both", inFlight(1)), inst("c", "n3", "both"))
	d := route(t, r, req, later)
	if d.DecodeInstance != "b" || d.Scores["prefix"] != 1 {
		t.Fatalf("repeated prefix went to %q with prefix %v, want b and 1: %s", d.DecodeInstance, d.Scores["prefix"], d.Reason)
	}
	// The whole prompt is likely cached on b: nothing left to prefill remotely.
	if d.Scores["uncached-tokens"] != 0 || len(d.PrefillEndpoints) != 0 {
		t.Errorf("uncached %v, endpoints %v; want 0 and none", d.Scores["uncached-tokens"], d.PrefillEndpoints)
	}
	// A new turn of the same conversation: the first 40 blocks are shared, 24 more are new.
	turn := append(slices.Clone(h), hashes(2, 24)...)
	for i := 40; i < len(turn); i++ {
		turn[i] = turn[i-1]*31 + uint64(i) // still chained: new hashes past the shared prefix
	}
	req2 := router.Request{Model: "m", PromptTokens: 64 * 64, PrefixHashes: turn}
	d = route(t, r, req2, later)
	if d.DecodeInstance != "b" {
		t.Errorf("the next turn went to %q, want b: %s", d.DecodeInstance, d.Reason)
	}
	if p := d.Scores["prefix"]; p < 0.6 || p > 40.0/64 {
		t.Errorf("prefix score %v, want about 40/64", p)
	}
	if u := d.Scores["uncached-tokens"]; u != 24*64 {
		t.Errorf("uncached tokens %v, want %v", u, 24*64)
	}
	// An unrelated prompt is not drawn to b.
	other := router.Request{Model: "m", PromptTokens: 40 * 64, PrefixHashes: hashes(99, 40)}
	if d := route(t, r, other, later); d.DecodeInstance != "c" {
		t.Errorf("an unrelated prompt went to %q, want the idle c: %s", d.DecodeInstance, d.Reason)
	}
	// With affinity off, the repeated prefix goes to the idlest instance.
	off := newRouter(t, func(c *routerdisagg.Config) { c.AffinitySize = 0 })
	route(t, off, req, first)
	if d := route(t, off, req, later); d.DecodeInstance != "c" {
		t.Errorf("with affinity off the request went to %q, want c", d.DecodeInstance)
	}
}

func TestCachedPrefixKeepsPrefillLocal(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil)
	snap := cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill"))
	h := hashes(7, 30)
	d := route(t, r, router.Request{Model: "m", PromptTokens: 30*64 + 10, PrefixHashes: h}, snap)
	if len(d.PrefillEndpoints) != 1 {
		t.Fatalf("first request: endpoints %v, want p: %s", d.PrefillEndpoints, d.Reason)
	}
	// The same prompt again, 1930 tokens of which 1920 are likely cached on d: prefill locally.
	d = route(t, r, router.Request{Model: "m", PromptTokens: 30*64 + 10, PrefixHashes: h}, snap)
	if len(d.PrefillEndpoints) != 0 {
		t.Errorf("repeated request: endpoints %v, want none: %s", d.PrefillEndpoints, d.Reason)
	}
	if want := "prefill locally because 10 uncached tokens (of 1930) < 1000"; !strings.Contains(d.Reason, want) {
		t.Errorf("reason %q lacks %q", d.Reason, want)
	}
}

func TestNoCandidateSaysWhy(t *testing.T) {
	t.Parallel()
	r := newRouter(t, nil)
	loading := inst("a", "n1", "both", func(in *router.Instance) { in.Status = router.InstanceLoading })
	snap := cluster(2, loading, inst("b", "n2", "prefill"), inst("c", "n2", "both", func(in *router.Instance) { in.ContextLength = 100 }))
	_, err := r.Route(context.Background(), router.Request{Model: "m", PromptTokens: 500}, snap)
	if !errors.Is(err, router.ErrNoCandidate) {
		t.Fatalf("got %v, want ErrNoCandidate", err)
	}
	want := `model "m": 3 instances of the model; ready removed 1, decode-role removed 1, context-fits removed 1`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	// Every candidate excluded (the gateway's retry after the only one failed).
	both := cluster(2, inst("a", "n1", "both"), inst("b", "n2", "both"))
	_, err = r.Route(context.Background(), router.Request{Model: "m", PromptTokens: 500, Exclude: []string{"b", "a"}}, both)
	if !errors.Is(err, router.ErrNoCandidate) {
		t.Fatalf("all excluded: got %v, want ErrNoCandidate", err)
	}
	if want := `model "m": 2 instances of the model; not-excluded removed 2`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	_, err = r.Route(context.Background(), router.Request{Model: "x"}, snap)
	if !errors.Is(err, router.ErrNoCandidate) || !strings.Contains(err.Error(), "no instance of it in the snapshot") {
		t.Errorf("unknown model: got %v", err)
	}
	if _, err := r.Route(context.Background(), router.Request{Model: "m"}, nil); !errors.Is(err, router.ErrNoCandidate) {
		t.Errorf("nil snapshot: got %v, want ErrNoCandidate", err)
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newRouter(t, nil).Route(ctx, router.Request{Model: "m"}, cluster(1, inst("a", "n1", "both")))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestDeterministic routes the same requests through fresh routers over snapshots whose instance order is
// shuffled: every router must make the same decisions, whatever the order.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []router.Instance
	for i := range 40 {
		role := []string{"both", "decode", "prefill"}[i%3]
		in := inst(fmt.Sprintf("i%02d", i), fmt.Sprintf("n%d", i%8+1), role, inFlight(i%4))
		in.Load.KVUtilization = float64(i%5) / 5
		ins = append(ins, in)
	}
	reqs := make([]router.Request, 50)
	for i := range reqs {
		reqs[i] = router.Request{Model: "m", PromptTokens: 500 + 97*i, SourceNode: fmt.Sprintf("n%d", i%8+1), PrefixHashes: hashes(uint64(i%7), 10+i%20)}
	}
	var first []router.Decision
	for run := range 5 {
		shuffled := slices.Clone(ins)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		snap := cluster(8, shuffled...)
		r := newRouter(t, nil)
		for i, req := range reqs {
			d := route(t, r, req, snap)
			if run == 0 {
				first = append(first, d)
				continue
			}
			if d.DecodeInstance != first[i].DecodeInstance || !slices.Equal(endpointIDs(d), endpointIDs(first[i])) || d.Reason != first[i].Reason {
				t.Fatalf("run %d request %d: %s; first run: %s", run, i, d.Reason, first[i].Reason)
			}
		}
	}
}

// TestConcurrent routes from many goroutines over changing snapshots with shared prefixes; run with -race.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	r := newRouter(t, func(c *routerdisagg.Config) { c.AffinitySize = 64 }) // small, so eviction runs too
	snaps := make([]*router.Snapshot, 6)
	for i := range snaps {
		snaps[i] = cluster(4, inst("a", "n1", "both", inFlight(i%3)), inst("b", "n2", "both"), inst("p", "n3", "prefill"), inst("q", "n4", "prefill"))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	deadline := time.Now().Add(5 * time.Second)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300 && time.Now().Before(deadline); i++ {
				req := router.Request{Model: "m", PromptTokens: 2000, PrefixHashes: hashes(uint64((g+i)%5), 20+i%30)}
				d, err := r.Route(context.Background(), req, snaps[(g+i)%len(snaps)])
				if err == nil && (d.DecodeInstance != "a" && d.DecodeInstance != "b") {
					err = fmt.Errorf("decode %q", d.DecodeInstance)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := r.Stats()
	if st.Routes == 0 || st.AffinityEntries == 0 || st.AffinityEntries > 64 {
		t.Errorf("stats %+v: want routes counted and 1..64 affinity entries", st)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	r := newRouter(t, func(c *routerdisagg.Config) { c.LatencySampleEvery = 1 })
	snap := cluster(2, inst("d", "n1", "decode"), inst("p", "n2", "prefill"))
	for range 3 {
		route(t, r, router.Request{Model: "m", PromptTokens: 4000}, snap)
	}
	st := r.Stats()
	if st.Routes != 3 {
		t.Errorf("routes %d, want 3", st.Routes)
	}
	seen := map[string]uint64{}
	for _, p := range st.Plugins {
		seen[string(p.Profile)+"/"+string(p.Plugin)] = p.Calls
	}
	for _, k := range []string{"decode/ready", "decode/load", "decode/prefix", "decode/pick", "prefill/kv-endpoint", "prefill/link", "prefill/pick"} {
		if seen[k] != 3 {
			t.Errorf("%s called %d times, want 3 (all: %v)", k, seen[k], seen)
		}
	}
	if _, ok := seen["prefill/hardware"]; ok {
		t.Errorf("hardware scorer present without a preference list")
	}
}
