package server

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// TestPinnedCarriesDecision: the route a hop pins carries the router's reason and its estimate, through the
// header's encoding, and the owner's decision has both back: the reason for its answer's timings.route, the
// estimate in the Scores that expectEstimate reads, so the node that runs the request records its error.
func TestPinnedCarriesDecision(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryConfig{Node: "n2"})
	reg.instances["n2-0"] = &Instance{Desc: engine.Description{InstanceID: "n2-0"}}
	s := &Server{reg: reg}
	reason := "decode on n2-0@n2; prefill on n1-0@n1; auto: remote 14.9 s (first token 2.16 s) vs local 32.7 s"
	long := string(make([]byte, 2*forward.MaxReason))
	for _, tc := range []struct {
		name         string
		reason       string
		scores       map[string]float64
		wantReason   string
		first, total float64
	}{
		{"estimate", reason, map[string]float64{scoreEstimateFirstToken: 2.16, scoreEstimateTotal: 14.9, "load": 0.5}, reason, 2.16, 14.9},
		{"no estimate (not PD auto)", reason, map[string]float64{"load": 0.5}, reason, 0, 0},
		{"half an estimate", reason, map[string]float64{scoreEstimateTotal: 14.9}, reason, 0, 0},
		{"infinite", reason, map[string]float64{scoreEstimateFirstToken: 1, scoreEstimateTotal: math.Inf(1)}, reason, 0, 0},
		{"NaN", reason, map[string]float64{scoreEstimateFirstToken: math.NaN(), scoreEstimateTotal: 3}, reason, 0, 0},
		{"long reason", long, nil, long[:forward.MaxReason], 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &decision{Decision: router.Decision{DecodeInstance: "n2-0", DecodeNode: "n2", Reason: tc.reason, Scores: tc.scores,
				PrefillEndpoints: []router.PrefillEndpoint{{InstanceID: "n1-0", Node: "n1", Address: "127.0.0.1:7000"}}}}
			hop, err := forward.DecodeRoute(pinned("n3", d, 1).Encode())
			if err != nil {
				t.Fatal(err)
			}
			if hop.Reason != tc.wantReason || hop.EstimateFirstToken != tc.first || hop.EstimateTotal != tc.total {
				t.Fatalf("pinned %+v", hop)
			}
			got, err := s.fromPinned(hop, "rid")
			if err != nil {
				t.Fatal(err)
			}
			if got.local == nil || got.Reason != tc.wantReason || len(got.PrefillEndpoints) != 1 {
				t.Fatalf("owner's decision %+v", got)
			}
			first, okF := got.Scores[scoreEstimateFirstToken]
			total, okT := got.Scores[scoreEstimateTotal]
			if want := tc.total > 0; okF != want || okT != want || first != tc.first || total != tc.total {
				t.Errorf("owner's estimate %v", got.Scores)
			}
		})
	}
}

// TestKeyedHashes: a prompt_cache_key leads the prefix hashes as a block of its own and is mixed into the
// others, so that the same key shares a prefix even with nothing tokenized, and different keys share none.
func TestKeyedHashes(t *testing.T) {
	t.Parallel()
	prompt := []uint64{11, 22, 33}
	a, a2, b := keyedHashes("conv-a", prompt), keyedHashes("conv-a", prompt[:2]), keyedHashes("conv-b", prompt)
	cases := []struct {
		name string
		got  []uint64
		want func([]uint64) bool
	}{
		{"no key: as they were", keyedHashes("", prompt), func(h []uint64) bool { return slices.Equal(h, prompt) }},
		{"no key, no hashes", keyedHashes("", nil), func(h []uint64) bool { return len(h) == 0 }},
		{"a key alone is one block", keyedHashes("conv-a", nil), func(h []uint64) bool { return len(h) == 1 && h[0] == a[0] }},
		{"a key leads and is mixed in", a, func(h []uint64) bool {
			return len(h) == 4 && h[1] == 11^h[0] && h[2] == 22^h[0] && h[3] == 33^h[0]
		}},
		{"the same key and a shorter prompt share its prefix", a2, func(h []uint64) bool { return slices.Equal(h, a[:3]) }},
		{"another key shares nothing", b, func(h []uint64) bool {
			for i := range h {
				if h[i] == a[i] {
					return false
				}
			}
			return len(h) == 4
		}},
	}
	for _, c := range cases {
		if !c.want(c.got) {
			t.Errorf("%s: %v", c.name, c.got)
		}
	}
}
