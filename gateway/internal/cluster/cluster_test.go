package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/serfcluster"
	"github.com/duet-ai/duet/serfcluster/netif"
)

func TestLoadNodeID(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "duet")
	// Started at once on one data directory, every caller gets the same id, and it stays.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := LoadNodeID(dir)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || CheckNodeID(id) != nil {
			t.Fatalf("ids %q", ids)
		}
	}
	if again, _ := LoadNodeID(dir); again != ids[0] {
		t.Fatalf("the id changed: %q then %q", ids[0], again)
	}
	other, _ := LoadNodeID(t.TempDir())
	if other == ids[0] {
		t.Fatalf("two data directories got the same id %q", other)
	}
	os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("bad id!\n"), 0o600)
	if _, err := LoadNodeID(dir); err == nil {
		t.Fatal("a bad stored id was accepted")
	}
}

func TestSanitizeID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Mac-Studio.local": "mac-studio.local", "my host": "my-host", "--x--": "x", "ünïcode": "n-code", "": "",
	} {
		if got := sanitizeID(in); got != want {
			t.Errorf("sanitizeID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFactsRoundTrip(t *testing.T) {
	t.Parallel()
	f := Facts{Backend: "mlx", Architecture: "llama", Quantization: "affine-4bit-g64", KVCompat: "kv1:llama-0011223344556677",
		KV: engine.KVLayout{NumLayers: 32, NumKVHeads: 8, HeadDim: 128, DType: "bfloat16"}, ContextLength: 131072,
		MaxBytesPerToken: 128, Parameters: 8_030_000_000}
	labels := f.Labels()
	if len(labels) > serfcluster.MaxLabels {
		t.Fatalf("%d labels, over serfcluster's %d", len(labels), serfcluster.MaxLabels)
	}
	in := serfcluster.Instance{ID: "n1-0", Model: "m", Node: "n1", Engine: "mlx-engine", Role: serfcluster.RoleBoth,
		Status: serfcluster.InstanceReady, Labels: labels}
	if err := in.Validate(); err != nil {
		t.Fatalf("serfcluster refuses the labels: %v", err)
	}
	got, err := FactsFromLabels(labels)
	if err != nil || got != f {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, f)
	}
	for _, bad := range []map[string]string{
		{labelCtx: "-1"}, {labelCtx: "lots"}, {labelKV: "32/8/128"}, {labelKV: "32/x/128/bf16"}, {labelMBPT: "99999999999"},
	} {
		if _, err := FactsFromLabels(bad); err == nil {
			t.Errorf("labels %v decoded", bad)
		}
	}
}

// testInstance is an instance on node with the given facts.
func testInstance(id, node, fingerprint string, f Facts, kv string) serfcluster.Instance {
	return serfcluster.Instance{ID: id, Model: "m", Node: serfcluster.NodeID(node), Engine: "mlx-engine",
		Role: serfcluster.RoleBoth, Status: serfcluster.InstanceReady, KVEndpoint: kv, Fingerprint: fingerprint,
		Labels: f.Labels()}
}

func testNode(id string, ip string) serfcluster.Node {
	a := netip.MustParseAddr(ip)
	return serfcluster.Node{ID: serfcluster.NodeID(id), Name: id, Status: serfcluster.StatusAlive,
		Tags:      serfcluster.Tags{NodeID: serfcluster.NodeID(id), APIAddr: ip + ":8000"},
		Addresses: []netif.Address{{IP: a, PrefixLen: 24, Kind: netif.KindEthernet, SpeedMbps: 10000}},
		Gossip:    netip.AddrPortFrom(a, 7946)}
}

func TestCheckLink(t *testing.T) {
	t.Parallel()
	layout := engine.KVLayout{NumLayers: 16, NumKVHeads: 8, HeadDim: 64, DType: "bfloat16"}
	bf16 := Facts{KVCompat: "kv1:llama-aa", KV: layout}
	q4 := bf16
	q4.Quantization = "affine-4bit-g64"
	otherBase := Facts{KVCompat: "kv1:llama-bb", KV: layout}
	moreLayers := Facts{KVCompat: "kv1:llama-cc", KV: engine.KVLayout{NumLayers: 32, NumKVHeads: 8, HeadDim: 64}}
	fewerHeads := Facts{KVCompat: "kv1:llama-dd", KV: engine.KVLayout{NumLayers: 16, NumKVHeads: 4, HeadDim: 64}}
	s := serfcluster.SnapshotOf("n1", 1, []serfcluster.Node{testNode("n1", "10.0.0.1"), testNode("n2", "10.0.0.2")},
		[]serfcluster.Instance{
			testInstance("p", "n1", "fp-a", bf16, "10.0.0.1:7000"),
			testInstance("p-nokv", "n1", "fp-a", bf16, ""),
			testInstance("p-q4", "n1", "fp-q4", q4, "10.0.0.1:7001"),
			testInstance("p-other", "n1", "fp-b", otherBase, "10.0.0.1:7002"),
			testInstance("p-layers", "n1", "fp-c", moreLayers, "10.0.0.1:7003"),
			testInstance("p-heads", "n1", "fp-d", fewerHeads, "10.0.0.1:7004"),
			testInstance("d", "n2", "fp-a", bf16, "10.0.0.2:7000"),
			testInstance("d2", "n2", "fp-a", bf16, ""),
		}, nil)
	cases := []struct {
		name             string
		prefill, decode  []string
		exact            bool
		wantErrSubstring string
	}{
		{"exact", []string{"p"}, []string{"d", "d2"}, true, ""},
		{"across quantization", []string{"p-q4"}, []string{"d"}, false, ""},
		{"mixed", []string{"p", "p-q4"}, []string{"d"}, false, ""},
		{"empty prefill", nil, []string{"d"}, false, "prefill_instances must name"},
		{"empty decode", []string{"p"}, nil, false, "decode_instances must name"},
		{"unknown", []string{"p"}, []string{"ghost"}, false, `unknown instance "ghost"`},
		{"both sides", []string{"p"}, []string{"p"}, false, "on both sides"},
		{"twice", []string{"p", "p"}, []string{"d"}, false, "twice"},
		{"no kv server", []string{"p-nokv"}, []string{"d"}, false, "serves no KV"},
		{"other base model", []string{"p-other"}, []string{"d"}, false, "architecture, RoPE or tokenizer"},
		{"layers", []string{"p-layers"}, []string{"d"}, false, "32 layers against 16"},
		{"kv heads", []string{"p-heads"}, []string{"d"}, false, "4 KV heads against 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CheckLink(s, c.prefill, c.decode)
			if c.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrSubstring) {
					t.Fatalf("error %v, want one mentioning %q", err, c.wantErrSubstring)
				}
				return
			}
			if err != nil || got.Exact != c.exact {
				t.Fatalf("got %+v, %v; want exact %v", got, err, c.exact)
			}
		})
	}
}

func TestConvert(t *testing.T) {
	t.Parallel()
	f := Facts{Backend: "cpu", KVCompat: "kv1:x", ContextLength: 8192}
	failed := testNode("n3", "10.0.0.3")
	failed.Status = serfcluster.StatusFailed
	s := serfcluster.SnapshotOf("n1", 7, []serfcluster.Node{testNode("n2", "10.0.0.2"), testNode("n1", "10.0.0.1"), failed},
		[]serfcluster.Instance{testInstance("a", "n1", "fp", f, "10.0.0.1:7000"), testInstance("c", "n3", "fp", f, "")},
		[]serfcluster.InstanceLink{{LinkID: "l1", PrefillInstances: []string{"a"}, DecodeInstances: []string{"c"}}})
	r := Convert(s, ConvertPaths(s))
	if r.Version != 7 || r.Self != "n1" || len(r.Nodes) != 3 || r.Nodes[0].ID != "n1" || r.Nodes[2].Status != "failed" {
		t.Fatalf("nodes %+v", r.Nodes)
	}
	if len(r.Paths) != 6 {
		t.Fatalf("%d paths among 3 nodes, want 6", len(r.Paths))
	}
	p, ok := r.Path("n1", "n2")
	if !ok || p.Address != "10.0.0.2" || p.Kind != "ethernet" || p.Quality <= 0 {
		t.Fatalf("path n1 -> n2: %+v %v", p, ok)
	}
	a, _ := r.Instance("a")
	c, _ := r.Instance("c")
	if a.Backend != "cpu" || a.KVCompat != "kv1:x" || a.ContextLength != 8192 || a.KVEndpoint != "10.0.0.1:7000" ||
		c.Status != "unavailable" {
		t.Fatalf("instances %+v %+v", a, c)
	}
	if len(r.InstanceLinks) != 1 || r.InstanceLinks[0].ID != "l1" {
		t.Fatalf("links %+v", r.InstanceLinks)
	}
}

// bigSnapshot is n nodes with perNode instances each.
func bigSnapshot(n, perNode int) *serfcluster.Snapshot {
	var nodes []serfcluster.Node
	var ins []serfcluster.Instance
	f := Facts{Backend: "mlx", KVCompat: "kv1:llama-aa", KV: engine.KVLayout{NumLayers: 32, NumKVHeads: 8, HeadDim: 128, DType: "bfloat16"},
		ContextLength: 131072, MaxBytesPerToken: 128}
	for i := range n {
		id := fmt.Sprintf("node-%02d", i)
		nodes = append(nodes, testNode(id, fmt.Sprintf("10.0.%d.%d", i/200, 1+i%200)))
		for j := range perNode {
			ins = append(ins, testInstance(fmt.Sprintf("%s-%d", id, j), id, "fp", f, fmt.Sprintf("10.0.0.1:%d", 7000+j)))
		}
	}
	return serfcluster.SnapshotOf("node-00", 1, nodes, ins, nil)
}

// BenchmarkConvert: converting a cluster snapshot for the router, with and without the paths (which the
// agent recomputes only on membership changes and every couple of seconds).
func BenchmarkConvert(b *testing.B) {
	for _, n := range []int{10, 64} {
		s := bigSnapshot(n, 4)
		b.Run(fmt.Sprintf("nodes=%d/with-paths", n), func(b *testing.B) {
			for b.Loop() {
				Convert(s, ConvertPaths(s))
			}
		})
		paths := ConvertPaths(s)
		b.Run(fmt.Sprintf("nodes=%d/cached-paths", n), func(b *testing.B) {
			for b.Loop() {
				Convert(s, paths)
			}
		})
	}
}

// The agent's converter caches instance conversions by revision and gives the same snapshot as Convert.
func TestConverterCache(t *testing.T) {
	t.Parallel()
	s := bigSnapshot(3, 2)
	var c converter
	c.paths = ConvertPaths(s)
	want := Convert(s, c.paths)
	for range 2 {
		got := c.convert(s)
		if fmt.Sprint(got.Instances) != fmt.Sprint(want.Instances) || len(got.Nodes) != len(want.Nodes) {
			t.Fatalf("cached conversion differs:\n%+v\n%+v", got.Instances, want.Instances)
		}
	}
}

func BenchmarkConverterCached(b *testing.B) {
	s := bigSnapshot(64, 4)
	var c converter
	c.paths = ConvertPaths(s)
	for b.Loop() {
		c.convert(s)
	}
}
