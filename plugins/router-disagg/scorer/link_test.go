package scorer

import (
	"math"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestLinkScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		paths []router.Path
		from  string // the prefill node; the decode instance is on n1
		want  float64
	}{
		"same node":           {from: "n1", want: 1},
		"same node, no path":  {from: "n1", paths: []router.Path{{From: "n1", To: "n2", Quality: 0.1}}, want: 1},
		"no path":             {from: "n2", want: 0},
		"quality":             {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Quality: 0.8, SpeedMbps: 100}}, want: 0.8},
		"quality clamped":     {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Quality: 1.7}}, want: 1},
		"reverse path stands": {from: "n2", paths: []router.Path{{From: "n1", To: "n2", Quality: 0.3}}, want: 0.3},
		"forward path first": {from: "n2", paths: []router.Path{
			{From: "n1", To: "n2", Quality: 0.3}, {From: "n2", To: "n1", Quality: 0.9}}, want: 0.9},
		"unknown quality is 0, whatever the path": {from: "n2", paths: []router.Path{
			{From: "n2", To: "n1", Kind: "thunderbolt", SpeedMbps: 40000, RTT: time.Millisecond}}, want: 0},
		"unknown quality on loopback is 0": {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Kind: "loopback"}}, want: 0},
		"nan quality is 0":                 {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Quality: math.NaN()}}, want: 0},
		"negative quality is 0":            {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Quality: -1, SpeedMbps: 100000}}, want: 0},
		"infinite quality is 1":            {from: "n2", paths: []router.Path{{From: "n2", To: "n1", Quality: math.Inf(1)}}, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := view.New(&router.Snapshot{
				Nodes:     []router.Node{{ID: "n1"}, {ID: "n2"}},
				Paths:     tc.paths,
				Instances: []router.Instance{{ID: "d", Node: "n1"}, {ID: "p", Node: tc.from}},
			})
			d, _ := v.Instance("d")
			p, _ := v.Instance("p")
			out := []float64{-1}
			NewLink().Score(&sched.Cycle{View: v, Decode: d}, []*view.Instance{p}, out)
			if math.Abs(out[0]-tc.want) > 1e-9 {
				t.Errorf("scored %v, want %v", out[0], tc.want)
			}
		})
	}
}

func TestLinkPath(t *testing.T) {
	t.Parallel()
	v := view.New(&router.Snapshot{
		Nodes: []router.Node{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}},
		Paths: []router.Path{{From: "n1", To: "n2", Kind: "wifi"}, {From: "n2", To: "n3", Kind: "ethernet"}, {From: "n3", To: "n2", Kind: "thunderbolt"}},
	})
	tests := map[string]struct {
		from, to string
		want     string // the path's kind; empty for none
	}{
		"forward":         {from: "n1", to: "n2", want: "wifi"},
		"reverse stands":  {from: "n2", to: "n1", want: "wifi"},
		"forward first":   {from: "n3", to: "n2", want: "thunderbolt"},
		"none either way": {from: "n1", to: "n3"},
		"unknown node":    {from: "n1", to: "n9"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got string
			if p, ok := LinkPath(v, tc.from, tc.to); ok {
				got = p.Kind
			}
			if got != tc.want {
				t.Errorf("LinkPath(%s, %s) is over %q, want %q", tc.from, tc.to, got, tc.want)
			}
		})
	}
}
