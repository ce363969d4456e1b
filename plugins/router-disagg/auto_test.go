package routerdisagg_test

import (
	"strings"
	"testing"
	"time"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

// kvPerToken is a small Llama's KV per prompt token (bf16, 12 layers × 6 KV heads × 128 × keys and values).
const kvPerToken = 12 * 6 * 128 * 2 * 2

// measured gives an instance measured speeds: prefill tok/s in every band, decode tok/s.
func measured(in router.Instance, prefill, decode float64) router.Instance {
	for i := range in.Speed.PrefillTPS {
		in.Speed.PrefillTPS[i] = prefill
	}
	in.Speed.DecodeTPS, in.Speed.KVBytesPerToken, in.Speed.Samples = decode, kvPerToken, 4
	return in
}

func autoRouter(t testing.TB) *routerdisagg.Router {
	return newRouter(t, func(c *routerdisagg.Config) { c.PD = routerdisagg.PDAuto })
}

// TestAutoDecisions: the cost model's choices over snapshots. Node n1 receives every request and decodes
// slowly (d: 100 prompt tok/s, 10 tok/s out); n2 prefills ten times faster (p, prefill-only unless a case
// says otherwise), over 10 GbE unless a case slows the link.
func TestAutoDecisions(t *testing.T) {
	t.Parallel()
	base := func() []router.Instance {
		return []router.Instance{
			measured(routertest.Ready("d", "m", "n1", router.RoleBoth), 100, 10),
			measured(routertest.Ready("p", "m", "n2", router.RolePrefill), 1000, 5),
		}
	}
	tests := []struct {
		name    string
		prompt  int
		edit    func(s *router.Snapshot)
		decode  string
		prefill string // "" for a local prefill
		reason  string // the reason after the decode clause
	}{
		{
			name: "fast prefill node", prompt: 2000, decode: "d", prefill: "p",
			reason: "; prefill on p@n2 over ethernet (10 Gb/s); auto: remote 14.9 s (first token 2.16 s) (link at nominal speed) vs local 32.7 s (first token 20.0 s), 2000 uncached tokens, 128 out",
		},
		{
			name: "slow link", prompt: 2000, decode: "d",
			edit: func(s *router.Snapshot) {
				s.Instances[0] = measured(s.Instances[0], 300, 10)
				setPath(s, "n1", "n2", "ethernet", 100, 0.3)
			},
			reason: "; prefill locally; auto: local 19.4 s (first token 6.67 s) vs remote 25.2 s via p@n2 (link at nominal speed), 2000 uncached tokens, 128 out",
		},
		{
			name: "slow link measured", prompt: 2000, decode: "d",
			edit: func(s *router.Snapshot) {
				s.Instances[0] = measured(s.Instances[0], 300, 10)
				s.Instances[0].Speed.Ingress = []router.LinkSpeed{{From: "n2", BytesPerSecond: 5e6, RTT: time.Millisecond}}
			},
			reason: "; prefill locally; auto: local 19.4 s (first token 6.67 s) vs remote 31.4 s via p@n2, 2000 uncached tokens, 128 out",
		},
		{
			name: "remote prefills measured", prompt: 2000, decode: "d", prefill: "p",
			edit: func(s *router.Snapshot) {
				// The prefill node's own figures say it is slow, but whole remote prefills from it went at 400 tok/s.
				s.Instances[1] = measured(s.Instances[1], 90, 5)
				s.Instances[0].Speed.Ingress = []router.LinkSpeed{{From: "n2", BytesPerSecond: 5e8, PrefillTPS: [router.PrefillBands]float64{0, 0, 400}}}
			},
			reason: "; prefill on p@n2 over ethernet (10 Gb/s); auto: remote 17.8 s (first token 5.14 s) (as remote prefills from there went) vs local 32.7 s (first token 20.0 s), 2000 uncached tokens, 128 out",
		},
		{
			name: "busy prefill node", prompt: 2000, decode: "d",
			edit:   func(s *router.Snapshot) { s.Instances[1].Speed.QueueWait = 25 * time.Second },
			reason: "; prefill locally; auto: local 32.7 s (first token 20.0 s) vs remote 39.9 s via p@n2 (link at nominal speed), 2000 uncached tokens, 128 out",
		},
		{
			name: "prefill node running requests", prompt: 2000, decode: "d",
			edit:   func(s *router.Snapshot) { s.Instances[1].Load.InFlight = 9 },
			reason: "; prefill locally; auto: local 32.7 s (first token 20.0 s) vs remote 32.9 s via p@n2 (link at nominal speed), 2000 uncached tokens, 128 out",
		},
		{
			name: "short prompt", prompt: 200, decode: "d",
			reason: "; prefill locally because 200 uncached tokens < 256 (auto)",
		},
		{
			name: "decode speed not measured", prompt: 2000, decode: "d", prefill: "p",
			edit:   func(s *router.Snapshot) { s.Instances[0].Speed = router.Speed{} },
			reason: "; prefill on p@n2 over ethernet (10 Gb/s), because 2000 uncached tokens ≥ 1000; auto: no prefill speed measured for d yet, so by the threshold",
		},
		{
			name: "prefill node not measured", prompt: 2000, decode: "d",
			edit:   func(s *router.Snapshot) { s.Instances[1].Speed = router.Speed{} },
			reason: "; prefill locally; auto: local 32.7 s (first token 20.0 s) (no prefill candidate measured), 2000 uncached tokens, 128 out",
		},
		{
			name: "fast node decodes too", prompt: 2000, decode: "p",
			edit: func(s *router.Snapshot) {
				s.Instances[1].Role = router.RoleBoth
				s.Instances[1] = measured(s.Instances[1], 1000, 20)
			},
			reason: "; prefill locally; auto: local 8.35 s (first token 2.00 s) vs 32.7 s on d@n1 vs remote 14.9 s via p@n2 (link at nominal speed), 2000 uncached tokens, 128 out",
		},
		{
			name: "instance links restrict the choice", prompt: 2000, decode: "d", prefill: "q",
			edit: func(s *router.Snapshot) {
				s.Instances = append(s.Instances, measured(routertest.Ready("q", "m", "n3", router.RolePrefill), 400, 5))
				s.InstanceLinks = []router.InstanceLink{{ID: "l", PrefillInstances: []string{"q"}, DecodeInstances: []string{"d"}}}
			},
			reason: "; prefill on q@n3 over ethernet (10 Gb/s); auto: remote 17.9 s (first token 5.16 s) (link at nominal speed) vs local 32.7 s (first token 20.0 s), 2000 uncached tokens, 128 out",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap := cluster(3, base()...)
			if tc.edit != nil {
				tc.edit(snap)
			}
			d := route(t, autoRouter(t), router.Request{RequestID: "r", Model: "m", PromptTokens: tc.prompt, SourceNode: "n1", MaxTokens: 128}, snap)
			var prefill string
			if len(d.PrefillEndpoints) > 0 {
				prefill = d.PrefillEndpoints[0].InstanceID
			}
			if d.DecodeInstance != tc.decode || prefill != tc.prefill {
				t.Errorf("decode %s, prefill %q; want %s, %q\nreason: %s", d.DecodeInstance, prefill, tc.decode, tc.prefill, d.Reason)
			}
			_, rest, _ := strings.Cut(d.Reason, ")")
			if rest != tc.reason {
				t.Errorf("reason after the decode clause:\n got %s\nwant %s", rest, tc.reason)
			}
		})
	}
}

// TestAutoScoresAndTies: an auto decision carries its estimates for the gateway to check against the
// request's timings, and two equally fast nodes keep the request where the decode profile put it (within
// the margin nothing moves).
func TestAutoScoresAndTies(t *testing.T) {
	t.Parallel()
	snap := cluster(2,
		measured(routertest.Ready("a", "m", "n1", router.RoleBoth), 500, 20),
		measured(routertest.Ready("b", "m", "n2", router.RoleBoth), 500, 20))
	d := route(t, autoRouter(t), router.Request{RequestID: "r", Model: "m", PromptTokens: 3000, SourceNode: "n1", MaxTokens: 64}, snap)
	if d.DecodeInstance != "a" || len(d.PrefillEndpoints) != 0 {
		t.Errorf("decision %+v, want a with a local prefill", d)
	}
	for _, k := range []string{routerdisagg.ScoreEstimateFirstToken, routerdisagg.ScoreEstimateTotal, routerdisagg.ScoreEstimateLocal, routerdisagg.ScoreEstimateRemote} {
		if d.Scores[k] <= 0 {
			t.Errorf("score %s = %v, want an estimate in seconds", k, d.Scores[k])
		}
	}
	if got, want := d.Scores[routerdisagg.ScoreEstimateTotal], 3000.0/500+63.0/20; got < want || got > want*1.01 {
		t.Errorf("estimated total %.3f s, want about %.3f s", got, want)
	}
}
