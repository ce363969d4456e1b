package filter

import (
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

// cycle builds a cycle over a three-node cluster (n3 failed) holding the instances, with the decode instance
// d (model m, fingerprint fp-m, on n1) chosen.
func cycle(t *testing.T, req router.Request, links []router.InstanceLink, ins ...router.Instance) *sched.Cycle {
	t.Helper()
	d := routertest.Ready("d", "m", "n1", router.RoleDecode)
	snap := routertest.Cluster(3, append([]router.Instance{d}, ins...)...)
	snap.Nodes[2].Status = router.NodeFailed
	snap.InstanceLinks = links
	v := view.New(snap)
	dec, _ := v.Instance("d")
	return &sched.Cycle{Request: &req, View: v, Decode: dec}
}

func with(in router.Instance, f func(*router.Instance)) router.Instance {
	f(&in)
	return in
}

func TestFilters(t *testing.T) {
	t.Parallel()
	base := routertest.Ready("x", "m", "n2", router.RoleBoth)
	req := router.Request{Model: "m", PromptTokens: 1000, MaxTokens: 100}
	linkDX := []router.InstanceLink{{ID: "l", DecodeInstances: []string{"d"}, PrefillInstances: []string{"x"}}}
	linkDY := []router.InstanceLink{{ID: "l", DecodeInstances: []string{"d"}, PrefillInstances: []string{"y"}}}
	linkOther := []router.InstanceLink{{ID: "l", DecodeInstances: []string{"e"}, PrefillInstances: []string{"y"}}}
	tests := map[string]struct {
		filter sched.Filter
		in     router.Instance
		req    router.Request
		links  []router.InstanceLink
		keep   bool
	}{
		"model matches":                      {filter: Model(), in: base, keep: true},
		"model differs":                      {filter: Model(), in: with(base, func(i *router.Instance) { i.Model = "o" })},
		"ready":                              {filter: Ready(), in: base, keep: true},
		"loading":                            {filter: Ready(), in: with(base, func(i *router.Instance) { i.Status = router.InstanceLoading })},
		"draining":                           {filter: Ready(), in: with(base, func(i *router.Instance) { i.Status = router.InstanceDraining })},
		"unavailable":                        {filter: Ready(), in: with(base, func(i *router.Instance) { i.Status = router.InstanceUnavailable })},
		"node alive":                         {filter: NodeAlive(), in: base, keep: true},
		"node failed":                        {filter: NodeAlive(), in: with(base, func(i *router.Instance) { i.Node = "n3" })},
		"node unknown":                       {filter: NodeAlive(), in: with(base, func(i *router.Instance) { i.Node = "n9" })},
		"decode role both":                   {filter: DecodeRole(), in: base, keep: true},
		"decode role decode":                 {filter: DecodeRole(), in: with(base, func(i *router.Instance) { i.Role = router.RoleDecode }), keep: true},
		"decode role empty":                  {filter: DecodeRole(), in: with(base, func(i *router.Instance) { i.Role = "" }), keep: true},
		"decode role prefill":                {filter: DecodeRole(), in: with(base, func(i *router.Instance) { i.Role = router.RolePrefill })},
		"decode role unknown":                {filter: DecodeRole(), in: with(base, func(i *router.Instance) { i.Role = "embed" })},
		"decode role prefill-only by links":  {filter: DecodeRole(), in: base, links: linkDX},
		"decode role on both sides":          {filter: DecodeRole(), in: base, links: append(linkDX, router.InstanceLink{ID: "l2", DecodeInstances: []string{"x"}}), keep: true},
		"context fits exactly":               {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 1100 }), req: req, keep: true},
		"context too short":                  {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 1099 }), req: req},
		"context unknown":                    {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 0 }), req: req, keep: true},
		"prompt length unknown":              {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 10 }), req: router.Request{Model: "m", MaxTokens: 100}, keep: true},
		"max tokens unknown":                 {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 1000 }), req: router.Request{Model: "m", PromptTokens: 1000}, keep: true},
		"prompt alone too long":              {filter: ContextFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 999 }), req: router.Request{Model: "m", PromptTokens: 1000}},
		"prompt fits":                        {filter: PromptFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 1000 }), req: req, keep: true},
		"prompt too long":                    {filter: PromptFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 999 }), req: req},
		"prompt fits, context unknown":       {filter: PromptFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 0 }), req: req, keep: true},
		"prompt unknown":                     {filter: PromptFits(), in: with(base, func(i *router.Instance) { i.ContextLength = 10 }), keep: true},
		"prefill role both":                  {filter: PrefillRole(), in: base, keep: true},
		"prefill role prefill":               {filter: PrefillRole(), in: with(base, func(i *router.Instance) { i.Role = router.RolePrefill }), keep: true},
		"prefill role decode":                {filter: PrefillRole(), in: with(base, func(i *router.Instance) { i.Role = router.RoleDecode })},
		"not the decode instance":            {filter: NotDecode(), in: base, keep: true},
		"the decode instance":                {filter: NotDecode(), in: with(base, func(i *router.Instance) { i.ID = "d" })},
		"same fingerprint":                   {filter: KVCompatible(), in: base, keep: true},
		"same fingerprint, other kv family":  {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.KVCompat = "kv-x" }), keep: true},
		"same fingerprint, no kv family":     {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.KVCompat = "" }), keep: true},
		"other fingerprint, not linked":      {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "fp-q4" })},
		"other fingerprint, linked":          {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "fp-q4" }), links: linkDX, keep: true},
		"other fingerprint, linked to other": {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "fp-q4" }), links: linkOther},
		"other fingerprint and kv family":    {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "fp-q4"; i.KVCompat = "kv-x" }), links: linkDX},
		"other fingerprint, no kv family":    {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "fp-q4"; i.KVCompat = "" }), links: linkDX},
		"empty fingerprint, not linked":      {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "" })},
		"empty fingerprint, linked":          {filter: KVCompatible(), in: with(base, func(i *router.Instance) { i.Fingerprint = "" }), links: linkDX, keep: true},
		"not excluded":                       {filter: NotExcluded(), in: base, req: router.Request{Model: "m", Exclude: []string{"d", "y"}}, keep: true},
		"nothing excluded":                   {filter: NotExcluded(), in: base, keep: true},
		"excluded":                           {filter: NotExcluded(), in: base, req: router.Request{Model: "m", Exclude: []string{"y", "x"}}},
		"no links: any":                      {filter: Linked(), in: base, keep: true},
		"linked to the decode instance":      {filter: Linked(), in: base, links: linkDX, keep: true},
		"decode linked to another":           {filter: Linked(), in: base, links: linkDY},
		"links for other decode only":        {filter: Linked(), in: base, links: linkOther, keep: true},
		"kv endpoint via path":               {filter: KVEndpoint(), in: with(base, func(i *router.Instance) { i.KVEndpoint = "0.0.0.0:7000" }), keep: true},
		"kv endpoint missing":                {filter: KVEndpoint(), in: with(base, func(i *router.Instance) { i.KVEndpoint = "" })},
		"kv endpoint without port":           {filter: KVEndpoint(), in: with(base, func(i *router.Instance) { i.KVEndpoint = "n2" })},
		"kv endpoint unspecified, no path":   {filter: KVEndpoint(), in: with(base, func(i *router.Instance) { i.KVEndpoint = "0.0.0.0:7000"; i.Node = "n9" })},
		"kv endpoint unspecified, same node": {filter: KVEndpoint(), in: with(base, func(i *router.Instance) { i.KVEndpoint = "0.0.0.0:7000"; i.Node = "n1" }), keep: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := tc.req
			if r.Model == "" {
				r = router.Request{Model: "m"}
			}
			c := cycle(t, r, tc.links, tc.in)
			in, _ := c.View.Instance(tc.in.ID)
			if tc.in.ID == "d" {
				in = &view.Instance{Instance: &tc.in} // shadowed by the decode instance in the snapshot
			}
			if kept := tc.filter.Keep(c, in); kept != tc.keep {
				t.Errorf("%s kept %v, want %v", tc.filter.Name(), kept, tc.keep)
			}
		})
	}
}

func TestChains(t *testing.T) {
	t.Parallel()
	seen := map[sched.Name]bool{}
	for _, f := range append(Decode(), Prefill()...) {
		seen[f.Name()] = true
	}
	for _, n := range []sched.Name{ModelName, ReadyName, NodeAliveName, DecodeRoleName, ContextFitsName, PrefillRoleName, NotDecodeName, KVCompatibleName, NotExcludedName, LinkedName, KVEndpointName, PromptFitsName} {
		if !seen[n] {
			t.Errorf("filter %s is in no chain", n)
		}
	}
}

// TestConditionsKeepAll checks the promise of each Conditional filter: where it does not apply, it would keep
// every instance of the model (the model filter comes first, so only those reach it).
func TestConditionsKeepAll(t *testing.T) {
	t.Parallel()
	ctx := func(n int) func(*router.Instance) { return func(i *router.Instance) { i.ContextLength = n } }
	fp := func(f string) func(*router.Instance) { return func(i *router.Instance) { i.Fingerprint = f } }
	x := routertest.Ready("x", "m", "n2", router.RoleBoth)
	snaps := map[string][]router.Instance{
		"contexts 8192 and 4096": {with(x, ctx(4096)), with(routertest.Ready("y", "m", "n1", router.RoleBoth), ctx(8192))},
		"unknown contexts":       {with(x, ctx(0))},
		"one fingerprint":        {x},
		"two fingerprints":       {x, with(routertest.Ready("y", "m", "n1", router.RoleBoth), fp("fp-q4"))},
	}
	linkDX := []router.InstanceLink{{ID: "l", DecodeInstances: []string{"d"}, PrefillInstances: []string{"y"}}}
	reqs := []router.Request{
		{Model: "m"}, {Model: "m", PromptTokens: 1000, MaxTokens: 100}, {Model: "m", PromptTokens: 4000, MaxTokens: 96},
		{Model: "m", PromptTokens: 4000, MaxTokens: 97}, {Model: "m", PromptTokens: 4097}, {Model: "m", PromptTokens: 9000},
	}
	applied := map[sched.Name]bool{}
	for name, ins := range snaps {
		for _, links := range [][]router.InstanceLink{nil, linkDX} {
			for _, req := range reqs {
				c := cycle(t, req, links, ins...)
				for _, f := range []sched.Filter{ContextFits(), PromptFits(), KVCompatible(), Linked(), NotExcluded()} {
					cond, ok := f.(sched.Conditional)
					if !ok {
						t.Fatalf("%s is not conditional", f.Name())
					}
					if cond.Applies(c) {
						applied[f.Name()] = true
						continue
					}
					for _, in := range c.View.Instances(req.Model) {
						if !f.Keep(c, in) {
							t.Errorf("%s, %+v: %s does not apply but drops %s", name, req, f.Name(), in.ID)
						}
					}
				}
			}
		}
	}
	for _, n := range []sched.Name{ContextFitsName, PromptFitsName, KVCompatibleName, LinkedName} {
		if !applied[n] {
			t.Errorf("%s never applied", n)
		}
	}
}
