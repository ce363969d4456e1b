package routerdisagg_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestReasonsGolden keeps the reason sentences of typical decisions in testdata/reasons.golden, so that a
// change to their wording is a reviewed diff. Run with -update to rewrite it.
func TestReasonsGolden(t *testing.T) {
	t.Parallel()
	pd := func() *router.Snapshot {
		s := cluster(4, inst("d", "n1", "decode", inFlight(1)), inst("e", "n2", "decode", inFlight(3)),
			inst("p-tb", "n3", "prefill"), inst("p-wifi", "n4", "prefill"))
		setPath(s, "n1", "n3", "thunderbolt", 40000, 0.95)
		setPath(s, "n1", "n4", "wifi", 400, 0.3)
		return s
	}
	cases := []struct {
		name string
		cfg  func(*routerdisagg.Config)
		snap func() *router.Snapshot
		reqs []router.Request // the last one's reason is kept
	}{
		{name: "remote prefill over thunderbolt", snap: pd,
			reqs: []router.Request{{Model: "m", PromptTokens: 5200, SourceNode: "n1"}}},
		{name: "below the threshold", snap: pd,
			reqs: []router.Request{{Model: "m", PromptTokens: 300, SourceNode: "n2"}}},
		{name: "prompt length unknown", snap: pd,
			reqs: []router.Request{{Model: "m", SourceNode: "n1"}}},
		{name: "prompt length unknown, local", snap: pd, cfg: func(c *routerdisagg.Config) { c.PrefillWhenUnknown = false },
			reqs: []router.Request{{Model: "m"}}},
		{name: "cached prefix keeps prefill local", snap: pd, reqs: []router.Request{
			{Model: "m", PromptTokens: 2600, PrefixHashes: hashes(1, 40)},
			{Model: "m", PromptTokens: 2600, PrefixHashes: hashes(1, 40)},
		}},
		{name: "next turn prefills the new part remotely", snap: pd, reqs: []router.Request{
			{Model: "m", PromptTokens: 2600, PrefixHashes: hashes(1, 40)},
			{Model: "m", PromptTokens: 5200, PrefixHashes: append(hashes(1, 40), hashes(2, 41)...)},
		}},
		{name: "remote prefill off", snap: pd, cfg: func(c *routerdisagg.Config) { c.MaxPrefillEndpoints = 0 },
			reqs: []router.Request{{Model: "m", PromptTokens: 5200}}},
		{name: "no prefill candidate", reqs: []router.Request{{Model: "m", PromptTokens: 5200}},
			snap: func() *router.Snapshot {
				return cluster(3, inst("d", "n1", "decode"),
					inst("p-q4", "n2", "prefill", func(in *router.Instance) { in.Fingerprint = "fp-q4" }),
					inst("p-loading", "n3", "prefill", func(in *router.Instance) { in.Status = router.InstanceLoading }))
			}},
		{name: "approximate prefill: another quantization, linked", reqs: []router.Request{{Model: "m", PromptTokens: 5200}},
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("p-q4", "n2", "prefill", quantized), inst("p", "n3", "prefill", inFlight(1)))
				setPath(s, "n1", "n2", "thunderbolt", 40000, 0.95)
				linkPrefill(s, "d", "p-q4", "p")
				return s
			}},
		{name: "exact before approximate at equal score", reqs: []router.Request{{Model: "m", PromptTokens: 5200}},
			snap: func() *router.Snapshot {
				s := cluster(3, inst("d", "n1", "decode"), inst("a-q4", "n2", "prefill", quantized), inst("z", "n3", "prefill"))
				linkPrefill(s, "d", "a-q4", "z")
				return s
			}},
		{name: "excluded instance (the gateway's retry)", snap: pd,
			reqs: []router.Request{{Model: "m", PromptTokens: 300, SourceNode: "n1", Exclude: []string{"d"}}}},
		{name: "same node prefill", reqs: []router.Request{{Model: "m", PromptTokens: 1500}},
			snap: func() *router.Snapshot { return cluster(1, inst("d", "n1", "decode"), inst("p", "n1", "prefill")) }},
		{name: "weights only load", cfg: func(c *routerdisagg.Config) {
			c.Weights = routerdisagg.Weights{Load: 1, PrefillLoad: 1}
		}, snap: pd, reqs: []router.Request{{Model: "m", PromptTokens: 5200}}},
		{name: "no scorer at all", cfg: func(c *routerdisagg.Config) { c.Weights = routerdisagg.Weights{} },
			snap: pd, reqs: []router.Request{{Model: "m", PromptTokens: 5200}}},
	}
	var b strings.Builder
	for _, tc := range cases {
		r := newRouter(t, tc.cfg)
		snap := tc.snap()
		var d router.Decision
		for _, req := range tc.reqs {
			var err error
			if d, err = r.Route(context.Background(), req, snap); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		b.WriteString(tc.name + ":\n\t" + d.Reason + "\n")
	}
	// And the error for a request nothing can serve.
	loading := inst("a", "n1", "both", func(in *router.Instance) { in.Status = router.InstanceLoading })
	_, err := newRouter(t, nil).Route(context.Background(), router.Request{Model: "m", PromptTokens: 100}, cluster(2, loading, inst("b", "n2", "prefill")))
	b.WriteString("no candidate (error):\n\t" + err.Error() + "\n")
	_, err = newRouter(t, nil).Route(context.Background(), router.Request{Model: "m", PromptTokens: 100, Exclude: []string{"d", "e"}}, pd())
	b.WriteString("every candidate excluded (error):\n\t" + err.Error() + "\n")

	path := filepath.Join("testdata", "reasons.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("reasons differ from %s (run with -update to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}
