package routerdisagg_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
)

// bytesource hands out small numbers from fuzz input, and zeros once it runs out.
type bytesource struct{ b []byte }

func (s *bytesource) next() int {
	if len(s.b) == 0 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v
}

func (s *bytesource) pick(options ...string) string { return options[s.next()%len(options)] }

// fuzzSnapshot builds a small cluster from the input: up to 4 nodes, 8 instances, paths and instance links,
// with every field drawn from a few interesting values.
func fuzzSnapshot(s *bytesource) *router.Snapshot {
	snap := &router.Snapshot{Version: 1, Self: "n1"}
	nodes := 1 + s.next()%4
	for i := 1; i <= nodes; i++ {
		snap.Nodes = append(snap.Nodes, router.Node{
			ID: fmt.Sprintf("n%d", i), Status: s.pick(router.NodeAlive, router.NodeAlive, router.NodeSuspect, router.NodeFailed, router.NodeLeft),
			Hardware: s.pick("gpu", "mac", ""),
		})
	}
	for from := 1; from <= nodes; from++ {
		for to := 1; to <= nodes; to++ {
			if from == to || s.next()%4 == 0 {
				continue
			}
			snap.Paths = append(snap.Paths, router.Path{
				From: fmt.Sprintf("n%d", from), To: fmt.Sprintf("n%d", to),
				Address:   s.pick("", "10.0.0.9", "fe80::1", "[fe80::2]", "10.0.0.3:7946", "bad:addr:ess"),
				Kind:      s.pick("thunderbolt", "ethernet", "wifi", "loopback", "other", ""),
				SpeedMbps: int64(s.next()) * 100, RTT: time.Duration(s.next()) * 100 * time.Microsecond,
				Quality: float64(s.next()%12) / 10, // up to 1.1: out of range on purpose
			})
		}
	}
	instances := s.next() % 9
	for i := range instances {
		snap.Instances = append(snap.Instances, router.Instance{
			ID:            s.pick("a", "b", "c", "d", "e", "f", "g", fmt.Sprintf("i%d", i)),
			Model:         s.pick("m", "m", "other"),
			Node:          fmt.Sprintf("n%d", 1+s.next()%(nodes+1)), // sometimes a node the snapshot lacks
			Role:          s.pick(router.RoleBoth, router.RoleDecode, router.RolePrefill, "", "weird"),
			Status:        s.pick(router.InstanceReady, router.InstanceReady, router.InstanceLoading, router.InstanceDraining, router.InstanceUnavailable),
			KVEndpoint:    s.pick("n2:7000", "0.0.0.0:7000", "[::]:7001", ":7002", "", "nohost", "h:0", "h:99999"),
			Fingerprint:   s.pick("fp", "fp", "fp-q4", ""),
			KVCompat:      s.pick("kv", "kv", "kv-other", ""),
			Backend:       s.pick("cpu", "mlx", ""),
			ContextLength: s.next() * 64,
			Load: router.Load{
				InFlight: s.next() - 20, Queued: s.next() % 5,
				KVUtilization: float64(s.next()%15) / 10,
			},
		})
	}
	for range s.next() % 3 {
		var l router.InstanceLink
		for range s.next() % 3 {
			l.DecodeInstances = append(l.DecodeInstances, s.pick("a", "b", "c", "z"))
		}
		for range s.next() % 3 {
			l.PrefillInstances = append(l.PrefillInstances, s.pick("a", "d", "e", "z"))
		}
		snap.InstanceLinks = append(snap.InstanceLinks, l)
	}
	return snap
}

func cloneSnapshot(s *router.Snapshot) *router.Snapshot {
	c := *s
	c.Nodes = slices.Clone(s.Nodes)
	c.Paths = slices.Clone(s.Paths)
	c.Instances = slices.Clone(s.Instances)
	c.InstanceLinks = nil
	for _, l := range s.InstanceLinks {
		c.InstanceLinks = append(c.InstanceLinks, router.InstanceLink{
			ID: l.ID, DecodeInstances: slices.Clone(l.DecodeInstances), PrefillInstances: slices.Clone(l.PrefillInstances),
		})
	}
	return &c
}

// FuzzRoute routes random requests over random small clusters and checks the rules every decision keeps.
func FuzzRoute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0, 1, 1, 1, 5, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 40, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("a cluster of a few nodes and instances, built from whatever bytes come along"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &bytesource{b: data}
		cfg := routerdisagg.DefaultConfig()
		cfg.MaxPrefillEndpoints = s.next() % 4
		cfg.PrefillThreshold = s.next() * 10
		cfg.AffinitySize = s.next() % 64
		cfg.LatencySampleEvery = s.next() % 3
		r, err := routerdisagg.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		snap := fuzzSnapshot(s)
		before := cloneSnapshot(snap)
		for range 1 + s.next()%4 {
			req := router.Request{
				Model: s.pick("m", "m", "other", "none"), PromptTokens: s.next()*40 - 100, MaxTokens: s.next()*8 - 10,
				SourceNode: s.pick("n1", "n2", "", "n9"),
			}
			for range s.next() % 3 {
				req.Exclude = append(req.Exclude, s.pick("a", "b", "c", "z"))
			}
			for i := range s.next() % 70 {
				req.PrefixHashes = append(req.PrefixHashes, uint64(s.next()%3)<<32|uint64(i))
			}
			d, err := r.Route(context.Background(), req, snap)
			if err != nil {
				if !errors.Is(err, router.ErrNoCandidate) {
					t.Fatalf("error %v is not ErrNoCandidate", err)
				}
				continue
			}
			checkDecision(t, cfg, snap, req, d)
		}
		if !reflect.DeepEqual(snap, before) {
			t.Fatal("Route modified the snapshot")
		}
	})
}

// linked reports whether an instance link names prefill as a prefill instance of decode.
func linked(snap *router.Snapshot, decode, prefill string) bool {
	for _, l := range snap.InstanceLinks {
		if slices.Contains(l.DecodeInstances, decode) && slices.Contains(l.PrefillInstances, prefill) {
			return true
		}
	}
	return false
}

func checkDecision(t *testing.T, cfg routerdisagg.Config, snap *router.Snapshot, req router.Request, d router.Decision) {
	t.Helper()
	alive := func(node string) bool {
		n, ok := snap.Node(node)
		return ok && n.Status == router.NodeAlive
	}
	dec, ok := snap.Instance(d.DecodeInstance)
	switch {
	case !ok:
		t.Fatalf("decode instance %q is not in the snapshot", d.DecodeInstance)
	case dec.Model != req.Model || dec.Status != router.InstanceReady || !alive(dec.Node) || d.DecodeNode != dec.Node:
		t.Fatalf("decode instance %+v cannot serve %+v", dec, req)
	case dec.Role != router.RoleBoth && dec.Role != router.RoleDecode && dec.Role != "":
		t.Fatalf("decode instance %q has role %q", dec.ID, dec.Role)
	case slices.Contains(req.Exclude, dec.ID):
		t.Fatalf("decode instance %q is excluded (%v)", dec.ID, req.Exclude)
	case d.Reason == "":
		t.Fatal("no reason")
	case len(d.PrefillEndpoints) > cfg.MaxPrefillEndpoints:
		t.Fatalf("%d prefill endpoints, more than %d", len(d.PrefillEndpoints), cfg.MaxPrefillEndpoints)
	}
	seen := map[string]bool{}
	for _, pe := range d.PrefillEndpoints {
		p, ok := snap.Instance(pe.InstanceID)
		exact := p.Fingerprint != "" && p.Fingerprint == dec.Fingerprint
		approximate := !exact && p.KVCompat != "" && p.KVCompat == dec.KVCompat && linked(snap, dec.ID, p.ID)
		switch {
		case !ok:
			t.Fatalf("prefill endpoint %q is not in the snapshot", pe.InstanceID)
		case seen[pe.InstanceID]:
			t.Fatalf("prefill endpoint %q listed twice", pe.InstanceID)
		case pe.InstanceID == dec.ID:
			t.Fatal("the decode instance prefills for itself")
		case p.Model != dec.Model || !exact && !approximate:
			t.Fatalf("prefill instance %+v cannot feed %+v", p, dec)
		case pe.Approximate == exact:
			t.Fatalf("prefill endpoint %q has Approximate %v, want %v", pe.InstanceID, pe.Approximate, !exact)
		case p.Status != router.InstanceReady || !alive(p.Node) || pe.Node != p.Node:
			t.Fatalf("prefill instance %+v is not ready on a live node", p)
		case p.Role == router.RoleDecode || p.Role == "weird":
			t.Fatalf("prefill instance %q has role %q", p.ID, p.Role)
		}
		if host, port, err := net.SplitHostPort(pe.Address); err != nil || host == "" || port == "0" {
			t.Fatalf("prefill address %q is not dialable: %v", pe.Address, err)
		}
		seen[pe.InstanceID] = true
	}
	for k, v := range d.Scores {
		if k == routerdisagg.ScoreUncachedTokens {
			if v < 0 || v > float64(max(req.PromptTokens, 0)) {
				t.Fatalf("uncached tokens %v outside 0..%d", v, req.PromptTokens)
			}
			continue
		}
		if !(v >= 0 && v <= 1) {
			t.Fatalf("score %s = %v outside [0, 1]", k, v)
		}
	}
}
