package link

import (
	"math"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		links []router.Link
		from  string // the prefill node; the decode instance is on n1
		want  float64
	}{
		"same node":           {from: "n1", want: 1},
		"no link":             {from: "n2", want: 0},
		"quality wins":        {from: "n2", links: []router.Link{{From: "n2", To: "n1", Quality: 0.8, SpeedMbps: 100}}, want: 0.8},
		"quality clamped":     {from: "n2", links: []router.Link{{From: "n2", To: "n1", Quality: 1.7}}, want: 1},
		"reverse link stands": {from: "n2", links: []router.Link{{From: "n1", To: "n2", Quality: 0.3}}, want: 0.3},
		"forward link first": {from: "n2", links: []router.Link{
			{From: "n1", To: "n2", Quality: 0.3}, {From: "n2", To: "n1", Quality: 0.9}}, want: 0.9},
		"fallback 100 Gb/s 1 ms":         {from: "n2", links: []router.Link{{From: "n2", To: "n1", SpeedMbps: 100000, RTT: time.Millisecond}}, want: 0.7 + 0.15},
		"fallback 10 Gb/s unknown rtt":   {from: "n2", links: []router.Link{{From: "n2", To: "n1", SpeedMbps: 10000}}, want: 0.7*0.8 + 0.15},
		"fallback thunderbolt nominal":   {from: "n2", links: []router.Link{{From: "n2", To: "n1", Kind: "thunderbolt"}}, want: 0.7*math.Log10(40000)/5 + 0.15},
		"fallback wifi nominal, 9 ms":    {from: "n2", links: []router.Link{{From: "n2", To: "n1", Kind: "wifi", RTT: 9 * time.Millisecond}}, want: 0.7*math.Log10(400)/5 + 0.03},
		"fallback unknown kind":          {from: "n2", links: []router.Link{{From: "n2", To: "n1"}}, want: 0.7*0.4 + 0.15},
		"fallback loopback between ids":  {from: "n2", links: []router.Link{{From: "n2", To: "n1", Kind: "loopback"}}, want: 1},
		"nan quality is 0":               {from: "n2", links: []router.Link{{From: "n2", To: "n1", Quality: math.NaN()}}, want: 0},
		"negative quality uses fallback": {from: "n2", links: []router.Link{{From: "n2", To: "n1", Quality: -1, SpeedMbps: 100000, RTT: time.Millisecond}}, want: 0.85},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := view.New(&router.Snapshot{
				Nodes:     []router.Node{{ID: "n1"}, {ID: "n2"}},
				Links:     tc.links,
				Instances: []router.Instance{{ID: "d", Node: "n1"}, {ID: "p", Node: tc.from}},
			})
			d, _ := v.Instance("d")
			p, _ := v.Instance("p")
			out := []float64{-1}
			New().Score(&sched.Cycle{View: v, Decode: d}, []*view.Instance{p}, out)
			if math.Abs(out[0]-tc.want) > 1e-9 {
				t.Errorf("scored %v, want %v", out[0], tc.want)
			}
		})
	}
}

func TestOrdering(t *testing.T) {
	t.Parallel()
	// Without Quality, the fallback still ranks the kinds as exo's interface priority does.
	kinds := []string{"thunderbolt", "ethernet", "wifi", "other"}
	prev := 2.0
	for _, k := range kinds {
		q := Quality(&router.Link{Kind: k})
		if q >= prev {
			t.Errorf("%s scored %v, not below the kind before it (%v)", k, q, prev)
		}
		prev = q
	}
}
