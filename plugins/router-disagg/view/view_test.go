package view

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/duet-ai/duet/sdk/router"
)

func snapshot() *router.Snapshot {
	return &router.Snapshot{
		Nodes: []router.Node{{ID: "n1", Status: router.NodeAlive}, {ID: "n2", Status: router.NodeFailed}, {ID: "n1", Status: router.NodeFailed}},
		Paths: []router.Path{{From: "n1", To: "n2", Kind: "ethernet"}, {From: "n1", To: "n2", Kind: "wifi"}},
		Instances: []router.Instance{
			{ID: "a", Model: "m", Node: "n1"}, {ID: "b", Model: "m", Node: "n2"}, {ID: "c", Model: "o", Node: "n1"},
			{ID: "a", Model: "o", Node: "n2"}, // a duplicate id: the first wins
			{ID: "p", Model: "m"}, {ID: "q", Model: "m"},
		},
		InstanceLinks: []router.InstanceLink{
			{ID: "l1", DecodeInstances: []string{"a", "b"}, PrefillInstances: []string{"p"}},
			{ID: "l2", DecodeInstances: []string{"q"}, PrefillInstances: []string{"b"}},
			{ID: "l3", DecodeInstances: []string{"c"}},
		},
	}
}

func TestView(t *testing.T) {
	t.Parallel()
	v := New(snapshot())
	if !v.NodeAlive("n1") || v.NodeAlive("n2") || v.NodeAlive("n9") {
		t.Error("NodeAlive: want n1 only (first n1 wins)")
	}
	if p, ok := v.Path("n1", "n2"); !ok || p.Kind != "ethernet" {
		t.Errorf("Path(n1, n2) = %+v, %v; want the first, ethernet", p, ok)
	}
	if _, ok := v.Path("n2", "n1"); ok {
		t.Error("Path(n2, n1) found; paths are directed")
	}
	if in, ok := v.Instance("a"); !ok || in.Model != "m" {
		t.Errorf("Instance(a) = %+v, want the first a", in)
	}
	var ids []string
	for _, in := range v.Instances("m") {
		ids = append(ids, in.ID)
	}
	if got, want := ids, []string{"a", "b", "p", "q"}; len(got) != len(want) || got[0] != "a" || got[1] != "b" || got[2] != "p" || got[3] != "q" {
		t.Errorf("Instances(m) = %v, want %v", got, want)
	}
	if len(v.Instances("none")) != 0 {
		t.Error("Instances of an unknown model")
	}
	in := func(id string) *Instance {
		t.Helper()
		i, ok := v.Instance(id)
		if !ok {
			t.Fatalf("no instance %s", id)
		}
		return i
	}
	prefillOnly := map[string]bool{"a": false, "b": false, "p": true, "q": false, "c": false}
	for id, want := range prefillOnly {
		if got := in(id).PrefillOnly; got != want {
			t.Errorf("%s.PrefillOnly = %v, want %v", id, got, want)
		}
	}
	hasLinked := map[string]bool{"a": true, "b": true, "q": true, "c": false, "p": false}
	for id, want := range hasLinked {
		if got := v.HasLinkedPrefill(in(id)); got != want {
			t.Errorf("HasLinkedPrefill(%s) = %v, want %v", id, got, want)
		}
	}
	if !v.Linked(in("a"), in("p")) || !v.Linked(in("b"), in("p")) || !v.Linked(in("q"), in("b")) || v.Linked(in("a"), in("b")) || v.Linked(in("p"), in("a")) {
		t.Error("Linked: wrong pairs")
	}
	// Facts resolved per instance.
	if a := in("a"); !a.Alive || a.NodeInfo == nil || a.NodeInfo.ID != "n1" {
		t.Errorf("a: alive %v, node %+v; want alive on n1", a.Alive, a.NodeInfo)
	}
	if b := in("b"); b.Alive {
		t.Error("b is on a failed node but alive")
	}
	if p := in("p"); p.Alive || p.NodeInfo != nil {
		t.Error("p has no node but is alive")
	}
	if p, ok := v.PathBetween(in("a"), in("b")); !ok || p.Kind != "ethernet" {
		t.Errorf("PathBetween(a, b) = %+v, %v", p, ok)
	}
	if _, ok := v.PathBetween(in("a"), in("p")); ok {
		t.Error("PathBetween to an instance without a node")
	}
	names := func(ins []*Instance) string {
		var s string
		for _, in := range ins {
			s += in.ID
		}
		return s
	}
	if got := names(v.Decoders("m")); got != "abq" { // p is prefill-only by the links
		t.Errorf("Decoders(m) = %s, want abq", got)
	}
	if got := names(v.Prefillers("m")); got != "abpq" {
		t.Errorf("Prefillers(m) = %s, want abpq", got)
	}
	if got := names(v.LinkedPrefill(in("a"))) + "," + names(v.LinkedPrefill(in("q"))) + "," + names(v.LinkedPrefill(in("c"))); got != "p,b," {
		t.Errorf("LinkedPrefill(a, q, c) = %s, want p,b,", got)
	}
	if got := len(v.All()); got != 6-1 {
		t.Errorf("All has %d instances, want 5 (one duplicate id)", got)
	}
}

func TestKVEndpoint(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ valid, unspecified bool }{
		"10.0.0.2:7000": {true, false},
		"0.0.0.0:7000":  {true, true},
		"[::]:7000":     {true, true},
		":7000":         {true, true},
		"n2:7000":       {true, false},
		"n2":            {false, false},
		"n2:0":          {false, false},
		"":              {false, false},
	}
	for kv, want := range tests {
		v := New(&router.Snapshot{Instances: []router.Instance{{ID: "a", KVEndpoint: kv}}})
		in, _ := v.Instance("a")
		if in.KVValid != want.valid || in.KVUnspecified != want.unspecified {
			t.Errorf("%q: valid %v unspecified %v, want %v %v", kv, in.KVValid, in.KVUnspecified, want.valid, want.unspecified)
		}
	}
}

func TestEmptySnapshot(t *testing.T) {
	t.Parallel()
	v := New(&router.Snapshot{})
	if v.NodeAlive("x") || len(v.Instances("m")) != 0 || len(v.All()) != 0 {
		t.Error("empty snapshot answered something")
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	var c Cache
	s1, s2 := snapshot(), snapshot()
	v1 := c.Get(s1)
	if c.Get(s1) != v1 {
		t.Error("second Get built a new view")
	}
	v2 := c.Get(s2)
	if v2 == v1 || v2.Snapshot != s2 {
		t.Error("another snapshot got the same view")
	}
	if c.Get(s1) != v1 {
		t.Error("the previous snapshot's view was dropped too soon")
	}
	for range cacheSize {
		c.Get(snapshot())
	}
	if c.Get(s1) == v1 {
		t.Error("the cache keeps more than cacheSize views")
	}
}

func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	var c Cache
	snaps := []*router.Snapshot{snapshot(), snapshot(), snapshot()}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s := snaps[(g+i)%len(snaps)]
				if v := c.Get(s); v.Snapshot != s {
					t.Error("view of another snapshot")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestLargeCluster checks the map-indexed paths of clusters past the dense table.
func TestLargeCluster(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{denseNodes, denseNodes + 1} {
		s := &router.Snapshot{}
		for i := range nodes {
			s.Nodes = append(s.Nodes, router.Node{ID: fmt.Sprintf("n%d", i), Status: router.NodeAlive})
		}
		for i := range nodes {
			s.Paths = append(s.Paths, router.Path{From: fmt.Sprintf("n%d", i), To: fmt.Sprintf("n%d", (i+1)%nodes), SpeedMbps: int64(i)})
		}
		s.Paths = append(s.Paths, router.Path{From: "n0", To: "n1", SpeedMbps: -1}) // a duplicate: the first wins
		s.Paths = append(s.Paths, router.Path{From: "n0", To: "nowhere"})
		s.Instances = []router.Instance{{ID: "a", Node: "n3"}, {ID: "b", Node: "n4"}}
		v := New(s)
		for i := range nodes {
			p, ok := v.Path(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", (i+1)%nodes))
			if !ok || p.SpeedMbps != int64(i) {
				t.Fatalf("%d nodes: path n%d → next = %+v, %v", nodes, i, p, ok)
			}
		}
		if _, ok := v.Path("n1", "n0"); ok && nodes > 2 {
			t.Errorf("%d nodes: a path that is not there", nodes)
		}
		if _, ok := v.Path("n0", "nowhere"); ok {
			t.Errorf("%d nodes: a path to an unknown node", nodes)
		}
		a, _ := v.Instance("a")
		b, _ := v.Instance("b")
		if p, ok := v.PathBetween(a, b); !ok || p.SpeedMbps != 3 {
			t.Errorf("%d nodes: PathBetween(a, b) = %+v, %v", nodes, p, ok)
		}
	}
}

func TestModelFacts(t *testing.T) {
	t.Parallel()
	s := &router.Snapshot{
		Nodes: []router.Node{{ID: "n1", Status: router.NodeAlive}, {ID: "n2", Status: router.NodeFailed}},
		Instances: []router.Instance{
			{ID: "a", Model: "m", Node: "n1", ContextLength: 8192, Fingerprint: "fp"},
			{ID: "b", Model: "m", Node: "n2", ContextLength: 4096, Fingerprint: "fp"},
			{ID: "c", Model: "m", Node: "n1", Fingerprint: "fp", Status: router.InstanceReady},
			{ID: "d", Model: "o", Node: "n1", Fingerprint: "fp-o"},
			{ID: "e", Model: "o", Node: "n2", Fingerprint: "fp-o-q4", Status: router.InstanceReady},
			{ID: "f", Model: "q", Node: "n9"},
		},
		InstanceLinks: []router.InstanceLink{
			{DecodeInstances: []string{"a"}, PrefillInstances: []string{"c"}}, // ready on an alive node
			{DecodeInstances: []string{"d"}, PrefillInstances: []string{"e"}}, // ready, but its node failed
		},
	}
	v := New(s)
	for model, want := range map[string]int{"m": 4096, "o": 0, "none": 0} {
		if got := v.ShortestContext(model); got != want {
			t.Errorf("ShortestContext(%s) = %d, want %d", model, got, want)
		}
	}
	if fp, ok := v.SoleFingerprint("m"); !ok || fp != "fp" {
		t.Errorf("SoleFingerprint(m) = %q, %v; want fp", fp, ok)
	}
	for _, model := range []string{"o", "q", "none"} {
		if _, ok := v.SoleFingerprint(model); ok {
			t.Errorf("SoleFingerprint(%s) found one", model)
		}
	}
	for id, want := range map[string]bool{"a": true, "b": false, "c": false, "d": false} {
		if in, _ := v.Instance(id); in.ReadyPartner != want {
			t.Errorf("%s.ReadyPartner = %v, want %v", id, in.ReadyPartner, want)
		}
	}
	if !v.HasReadyPartners("m") || v.HasReadyPartners("o") || v.HasReadyPartners("none") {
		t.Error("HasReadyPartners: want m only")
	}
	n1, ok := v.NodeIndex("n1")
	if _, unknown := v.NodeIndex("n9"); !ok || unknown {
		t.Fatal("NodeIndex: want n1 and not n9")
	}
	for id, want := range map[string]bool{"a": true, "b": false, "f": false} {
		if in, _ := v.Instance(id); (in.NodeIndex() == n1) != want {
			t.Errorf("%s on n1 by index: %v, want %v", id, !want, want)
		}
	}
	if in, _ := v.Instance("f"); in.NodeIndex() != -1 {
		t.Errorf("f.NodeIndex() = %d on a node the snapshot lacks, want -1", in.NodeIndex())
	}
}

func TestMemoize(t *testing.T) {
	t.Parallel()
	v := New(snapshot())
	type key struct{ name string }
	if _, ok := v.Memoized(key{"x"}); ok {
		t.Fatal("a value before any was memoized")
	}
	var builds atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := v.Memoize(key{"x"}, func() any { builds.Add(1); return 42 }); got != 42 {
				t.Errorf("Memoize = %v, want 42", got)
			}
		}()
	}
	wg.Wait()
	if builds.Load() != 1 {
		t.Errorf("built %d times, want once", builds.Load())
	}
	if got, ok := v.Memoized(key{"x"}); !ok || got != 42 {
		t.Errorf("Memoized = %v, %v; want 42", got, ok)
	}
	if _, ok := v.Memoized(key{"y"}); ok {
		t.Error("another key found the value")
	}
}
