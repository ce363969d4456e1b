package scorer

import (
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestPartnerScore(t *testing.T) {
	t.Parallel()
	snap := &router.Snapshot{
		Nodes: []router.Node{{ID: "n1", Status: router.NodeAlive}, {ID: "n2", Status: router.NodeAlive}, {ID: "n3", Status: router.NodeFailed}},
		Instances: []router.Instance{
			{ID: "p", Model: "m", Node: "n1", Status: router.InstanceReady},
			{ID: "p-dead", Model: "m", Node: "n3", Status: router.InstanceReady},
			{ID: "d-linked", Model: "m", Node: "n2", Status: router.InstanceReady},
			{ID: "d-dead-partner", Model: "m", Node: "n2", Status: router.InstanceReady},
			{ID: "d-alone", Model: "m", Node: "n2", Status: router.InstanceReady},
		},
		InstanceLinks: []router.InstanceLink{
			{ID: "l1", PrefillInstances: []string{"p"}, DecodeInstances: []string{"d-linked"}},
			{ID: "l2", PrefillInstances: []string{"p-dead"}, DecodeInstances: []string{"d-dead-partner"}},
		},
	}
	var v view.Cache
	vw := v.Get(snap)
	var cands []*view.Instance
	for _, id := range []string{"d-linked", "d-dead-partner", "d-alone"} {
		in, _ := vw.Instance(id)
		cands = append(cands, in)
	}
	for _, c := range []struct {
		name   string
		tokens int
		want   []float64
	}{
		{"long prompt", 5000, []float64{1, 0, 0}},
		{"at the threshold", 1000, []float64{1, 0, 0}},
		{"short prompt", 999, []float64{1, 1, 1}},
		{"unknown length", 0, []float64{1, 1, 1}},
	} {
		out := make([]float64, len(cands))
		NewPartner(1000).Score(&sched.Cycle{Request: &router.Request{PromptTokens: c.tokens}, View: vw}, cands, out)
		for i := range out {
			if out[i] != c.want[i] {
				t.Errorf("%s: scores %v, want %v", c.name, out, c.want)
				break
			}
		}
	}
}

func TestPartnerUniform(t *testing.T) {
	t.Parallel()
	withLinks := &router.Snapshot{
		Nodes:         []router.Node{{ID: "n1", Status: router.NodeAlive}},
		Instances:     []router.Instance{{ID: "p", Model: "m", Node: "n1", Status: router.InstanceReady}, {ID: "d", Model: "m", Node: "n1"}},
		InstanceLinks: []router.InstanceLink{{PrefillInstances: []string{"p"}, DecodeInstances: []string{"d"}}},
	}
	withoutLinks := &router.Snapshot{Nodes: withLinks.Nodes, Instances: withLinks.Instances}
	tests := map[string]struct {
		snap    *router.Snapshot
		model   string
		tokens  int
		uniform bool
	}{
		"short prompt":              {snap: withLinks, model: "m", tokens: 999, uniform: true},
		"long, a partner":           {snap: withLinks, model: "m", tokens: 1000},
		"long, no partner at all":   {snap: withoutLinks, model: "m", tokens: 5000, uniform: true},
		"long, another model":       {snap: withLinks, model: "o", tokens: 5000, uniform: true},
		"unknown length, a partner": {snap: withLinks, model: "m", uniform: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &sched.Cycle{Request: &router.Request{Model: tc.model, PromptTokens: tc.tokens}, View: view.New(tc.snap)}
			if u, ok := NewPartner(1000).Uniform(c); ok != tc.uniform || ok && u != 1 {
				t.Errorf("Uniform = %v, %v; want 1, %v", u, ok, tc.uniform)
			}
		})
	}
}
