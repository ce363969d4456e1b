package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// TestPinnedCarriesDecision: the route a hop pins carries the router's reason and its estimate, through the
// header's encoding, and the owner's decision has both back: the reason for its answer's timings.route, the
// estimate in the Scores that the speed observer reads, so the node that runs the request records its error.
func TestPinnedCarriesDecision(t *testing.T) {
	t.Parallel()
	reg := node.NewRegistry(node.RegistryConfig{Node: "n2"})
	reg.AddSpec(node.InstanceSpec{ID: "n2-0"})
	if err := reg.LoadAll(context.Background(), loadOnly{}); err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{reg: reg, log: slog.New(slog.DiscardHandler)}
	// The owner's own view: it knows n1-0 and where it serves KV.
	snap := &router.Snapshot{Self: "n2", Instances: []router.Instance{
		{ID: "n2-0", Node: "n2", Status: router.InstanceReady},
		{ID: "n1-0", Node: "n1", Status: router.InstanceReady, KVEndpoint: "127.0.0.1:7000"},
	}}
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
			d := &router.Decision{DecodeInstance: "n2-0", DecodeNode: "n2", Reason: tc.reason, Scores: tc.scores,
				PrefillEndpoints: []router.PrefillEndpoint{{InstanceID: "n1-0", Node: "n1", Address: "127.0.0.1:7000"}}}
			hop, err := forward.DecodeRoute(pinned("n3", d, 1).Encode())
			if err != nil {
				t.Fatal(err)
			}
			if hop.Reason != tc.wantReason || hop.EstimateFirstToken != tc.first || hop.EstimateTotal != tc.total {
				t.Fatalf("pinned %+v", hop)
			}
			r := &request{id: "rid", hop: hop, hopped: true}
			if err := p.fromPinned(r, snap); err != nil {
				t.Fatal(err)
			}
			got := r.decision
			if r.local == nil || got.Reason != tc.wantReason || len(got.PrefillEndpoints) != 1 {
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

// TestResolvePinned: the owner of a hop takes the prefill instances it names, never their addresses: each is
// resolved from the owner's own view (the path address to its node replaces the KV endpoint's host), one it
// does not know as a KV server is dropped, and an endpoint stays approximate only when an instance link pairs
// it with the decode instance.
func TestResolvePinned(t *testing.T) {
	t.Parallel()
	snap := &router.Snapshot{Self: "n2",
		Instances: []router.Instance{
			{ID: "d", Node: "n2", Status: router.InstanceReady, Fingerprint: "fp-a", KVEndpoint: "127.0.0.2:7002"},
			{ID: "p", Node: "n1", Status: router.InstanceReady, Fingerprint: "fp-a", KVEndpoint: "0.0.0.0:7001"},
			{ID: "q", Node: "n3", Status: router.InstanceReady, Fingerprint: "fp-q", KVEndpoint: "127.0.0.3:7003"},
			{ID: "linked-q", Node: "n3", Status: router.InstanceReady, Fingerprint: "fp-q", KVEndpoint: "127.0.0.3:7004"},
			{ID: "no-kv", Node: "n1", Status: router.InstanceReady, Fingerprint: "fp-a"},
			{ID: "gone", Node: "n1", Status: router.InstanceUnavailable, Fingerprint: "fp-a", KVEndpoint: "127.0.0.1:7005"},
			{ID: "local", Node: "n2", Status: router.InstanceReady, Fingerprint: "fp-a", KVEndpoint: "0.0.0.0:7006"},
		},
		Paths:         []router.Path{{From: "n2", To: "n1", Address: "127.0.0.1"}},
		InstanceLinks: []router.InstanceLink{{ID: "l", PrefillInstances: []string{"linked-q"}, DecodeInstances: []string{"d"}}},
	}
	evil := "127.0.0.66:17666"
	for _, tc := range []struct {
		name    string
		pinned  forward.Endpoint
		want    *router.PrefillEndpoint
		dropped bool
	}{
		{"known, the hop's address ignored", forward.Endpoint{InstanceID: "p", Node: "n1", Address: evil},
			&router.PrefillEndpoint{InstanceID: "p", Node: "n1", Address: "127.0.0.1:7001"}, false},
		{"no address in the hop", forward.Endpoint{InstanceID: "p"},
			&router.PrefillEndpoint{InstanceID: "p", Node: "n1", Address: "127.0.0.1:7001"}, false},
		{"no path: the KV endpoint as published", forward.Endpoint{InstanceID: "q", Address: evil},
			&router.PrefillEndpoint{InstanceID: "q", Node: "n3", Address: "127.0.0.3:7003"}, false},
		{"same node: loopback", forward.Endpoint{InstanceID: "local", Address: evil},
			&router.PrefillEndpoint{InstanceID: "local", Node: "n2", Address: "127.0.0.1:7006"}, false},
		{"approximate without a link: exact only", forward.Endpoint{InstanceID: "q", Approximate: true},
			&router.PrefillEndpoint{InstanceID: "q", Node: "n3", Address: "127.0.0.3:7003"}, false},
		{"approximate with a link", forward.Endpoint{InstanceID: "linked-q", Approximate: true},
			&router.PrefillEndpoint{InstanceID: "linked-q", Node: "n3", Address: "127.0.0.3:7004", Approximate: true}, false},
		{"exact is never approximate", forward.Endpoint{InstanceID: "p", Approximate: true},
			&router.PrefillEndpoint{InstanceID: "p", Node: "n1", Address: "127.0.0.1:7001"}, false},
		{"unknown instance", forward.Endpoint{InstanceID: "attacker", Node: "n1", Address: evil}, nil, true},
		{"no instance id", forward.Endpoint{Address: evil}, nil, true},
		{"serves no KV", forward.Endpoint{InstanceID: "no-kv", Address: evil}, nil, true},
		{"unavailable", forward.Endpoint{InstanceID: "gone", Address: evil}, nil, true},
		{"the decode instance itself", forward.Endpoint{InstanceID: "d", Address: evil}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, dropped := resolvePinned(snap, "d", []forward.Endpoint{tc.pinned})
			if tc.dropped != (len(dropped) == 1) {
				t.Errorf("dropped %q", dropped)
			}
			switch {
			case tc.want == nil && len(got) != 0:
				t.Errorf("got %+v, want none", got)
			case tc.want != nil && (len(got) != 1 || got[0] != *tc.want):
				t.Errorf("got %+v, want %+v", got, *tc.want)
			}
		})
	}
}

// loadOnly is an engine that loads any instance it is asked for and does nothing else.
type loadOnly struct{ engine.Engine }

func (loadOnly) Load(_ context.Context, req engine.LoadRequest) (engine.Description, error) {
	return engine.Description{InstanceID: req.InstanceID}, nil
}

func TestPlace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		decision  router.Decision
		err       error
		model     string
		hop       *forward.Route
		wantLocal string // the local instance, or "" when it goes elsewhere
		wantNode  string
		wantCode  int // an error's status
	}{
		{name: "this node's instance", decision: router.Decision{DecodeInstance: "n1-0"}, wantLocal: "n1-0", wantNode: "n1"},
		{name: "another node's instance", decision: router.Decision{DecodeInstance: "n2-0"}, wantNode: "n2"},
		{name: "an unknown model", model: "nope", wantCode: 404},
		{name: "no candidate", err: fmt.Errorf("all busy: %w", router.ErrNoCandidate), wantCode: 503},
		{name: "the router fails", err: errors.New("boom"), wantCode: 500},
		{name: "an instance this node does not serve", decision: router.Decision{DecodeInstance: "n1-9", DecodeNode: "n1"}, wantCode: 503},
		{name: "a hop's pinned instance", hop: &forward.Route{EntryNode: "n3", DecodeInstance: "n1-0", Reason: "pinned"}, wantLocal: "n1-0", wantNode: "n1"},
		{name: "a hop's unknown instance", hop: &forward.Route{EntryNode: "n3", DecodeInstance: "n1-7"}, wantCode: 503},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newStageFixture(t)
			f.router.decision, f.router.err = tc.decision, tc.err
			r := &request{p: f.p, id: "rid", model: "m", ctx: context.Background(), node: "n1"}
			if tc.model != "" {
				r.model = tc.model
			}
			if tc.hop != nil {
				r.hop, r.hopped = *tc.hop, true
			}
			err := f.p.place(r)
			if tc.wantCode != 0 {
				var apiErr *apicore.Error
				if !errors.As(err, &apiErr) || apiErr.Status != tc.wantCode {
					t.Fatalf("error %v, want status %d", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotLocal := ""
			if r.local != nil {
				gotLocal = r.local.Desc.InstanceID
			}
			if gotLocal != tc.wantLocal || r.decision.DecodeNode != tc.wantNode {
				t.Errorf("placed on %q at node %q, want %q at %q", gotLocal, r.decision.DecodeNode, tc.wantLocal, tc.wantNode)
			}
			if tc.hop != nil && (!r.route.Forwarded || r.route.EntryNode != "n3" || len(f.router.got) != 0) {
				t.Errorf("a hop: route %+v, routed %d times", r.route, len(f.router.got))
			}
		})
	}
}

// TestPlaceTellsTheRouter: the router hears of the prompt's size (estimated from its bytes when short) and,
// with a prompt_cache_key, of the key as the first prefix block.
func TestPlaceTellsTheRouter(t *testing.T) {
	t.Parallel()
	f := newStageFixture(t)
	r := &request{p: f.p, id: "rid", model: "m", ctx: context.Background(), promptBytes: 40, cacheKey: "conv"}
	if err := f.p.place(r); err != nil {
		t.Fatal(err)
	}
	got := f.router.got[0]
	if got.PromptTokens != 10 || len(got.PrefixHashes) != 1 || got.PrefixHashes[0] != keyedHashes("conv", nil)[0] {
		t.Errorf("the router was told %+v", got)
	}
}
