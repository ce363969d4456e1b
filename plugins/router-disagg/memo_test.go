package routerdisagg_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/sdk/router"
)

// memoPair is two routers of one configuration: one whose profiles memoize for every seed, one whose profiles
// run every filter and scorer over every candidate. They must decide alike.
type memoPair struct{ memo, full *routerdisagg.Router }

func newMemoPair(t testing.TB, cfg routerdisagg.Config) memoPair {
	t.Helper()
	memo, err := routerdisagg.NewWith(cfg, sched.MemoizeFrom(1))
	if err != nil {
		t.Fatal(err)
	}
	full, err := routerdisagg.NewWith(cfg, sched.MemoizeFrom(math.MaxInt))
	if err != nil {
		t.Fatal(err)
	}
	return memoPair{memo, full}
}

// route routes req with both routers and fails unless the decisions (scores to the bit) or errors are equal.
func (p memoPair) route(t testing.TB, what string, req router.Request, snap *router.Snapshot) {
	t.Helper()
	d1, e1 := p.memo.Route(context.Background(), req, snap)
	d2, e2 := p.full.Route(context.Background(), req, snap)
	if (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
		t.Fatalf("%s: errors differ: memoized %v, full %v", what, e1, e2)
	}
	if len(d1.Scores) != len(d2.Scores) {
		t.Fatalf("%s: scores differ: memoized %v, full %v", what, d1.Scores, d2.Scores)
	}
	for k, v := range d1.Scores {
		if w, ok := d2.Scores[k]; !ok || math.Float64bits(v) != math.Float64bits(w) {
			t.Fatalf("%s: score %s: memoized %v, full %v", what, k, v, w)
		}
	}
	d1.Scores, d2.Scores = nil, nil
	if !reflect.DeepEqual(d1, d2) {
		t.Fatalf("%s: decisions differ:\nmemoized %+v\nfull     %+v", what, d1, d2)
	}
}

// randomCluster is a cluster of up to 400 instances of two models with many ties in load and utilisation,
// odd statuses, roles, context lengths, fingerprints and endpoints, hardware classes and instance links.
func randomCluster(rng *rand.Rand, nodes, n int) *router.Snapshot {
	var ins []router.Instance
	for range n {
		role := []string{router.RoleBoth, router.RoleDecode, router.RolePrefill, ""}[rng.IntN(4)]
		in := inst(fmt.Sprintf("i%04d", rng.IntN(n*2)), fmt.Sprintf("n%d", rng.IntN(nodes+1)+1), role, inFlight(rng.IntN(4)))
		in.Load.Queued = rng.IntN(2)
		in.Load.KVUtilization = float64(rng.IntN(4)) / 4
		if rng.IntN(20) == 0 {
			in.Status = router.InstanceLoading
		}
		if rng.IntN(10) == 0 {
			in.ContextLength = 1000 + rng.IntN(8000)
		}
		if rng.IntN(15) == 0 {
			quantized(&in)
		}
		if rng.IntN(3) == 0 {
			in.Model = "m2"
		}
		if rng.IntN(30) == 0 {
			in.KVEndpoint = "0.0.0.0:7000"
		}
		ins = append(ins, in)
	}
	s := cluster(nodes, ins...)
	for i := range s.Nodes {
		s.Nodes[i].Hardware = []string{"gpu", "mac", ""}[rng.IntN(3)]
		if rng.IntN(8) == 0 {
			s.Nodes[i].Status = router.NodeSuspect
		}
	}
	for i := range s.Paths {
		s.Paths[i].Quality = float64(rng.IntN(5)) / 4
		if rng.IntN(5) == 0 {
			s.Paths[i].Address = ""
		}
	}
	for range rng.IntN(6) {
		linkPrefill(s, fmt.Sprintf("i%04d", rng.IntN(n*2)), fmt.Sprintf("i%04d", rng.IntN(n*2)), fmt.Sprintf("i%04d", rng.IntN(n*2)))
	}
	return s
}

func randomWeights(rng *rand.Rand, w *routerdisagg.Weights) {
	for _, x := range []*float64{&w.Load, &w.KVUtilization, &w.Prefix, &w.Locality, &w.Partner, &w.PrefillLoad, &w.Link, &w.Hardware} {
		*x = []float64{0, 0.1, 0.3, 0.5, 1, 2}[rng.IntN(6)]
	}
}

// TestMemoizedDecisionsMatchFullRuns routes random requests over random clusters, of a few instances to a
// thousand, and checks that memoized profiles decide exactly as profiles that run every plugin over every
// candidate: the same instances, endpoints, reasons, scores to the bit, and errors.
func TestMemoizedDecisionsMatchFullRuns(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 150 {
		cfg := routerdisagg.DefaultConfig()
		cfg.LatencySampleEvery = rng.IntN(4)
		cfg.MaxPrefillEndpoints = rng.IntN(4)
		if rng.IntN(2) == 0 {
			cfg.PrefillHardware = []string{"gpu", "mac"}
		}
		if rng.IntN(3) == 0 {
			randomWeights(rng, &cfg.Weights)
		}
		pair := newMemoPair(t, cfg)
		nodes := 1 + rng.IntN(12)
		n := 1 + rng.IntN(400)
		snaps := []*router.Snapshot{randomCluster(rng, nodes, n)}
		if iter%10 == 0 {
			snaps = append(snaps, benchSnapshot(10+rng.IntN(990)), clusterSnapshot(1+rng.IntN(10), 1+rng.IntN(100)))
		}
		for q := range 40 {
			snap := snaps[rng.IntN(len(snaps))]
			req := router.Request{
				Model: []string{"m", "m", "m2", "x"}[rng.IntN(4)], PromptTokens: []int{0, 300, 999, 1000, 5200, 9000}[rng.IntN(6)],
				MaxTokens: rng.IntN(3000), SourceNode: fmt.Sprintf("n%d", rng.IntN(nodes+2)),
			}
			if rng.IntN(4) == 0 {
				req.SourceNode = ""
			}
			if rng.IntN(3) == 0 {
				for range 1 + rng.IntN(3) {
					req.Exclude = append(req.Exclude, fmt.Sprintf("i%04d", rng.IntN(n*2)))
				}
			}
			if rng.IntN(3) > 0 {
				req.PrefixHashes = hashes(uint64(rng.IntN(6)), rng.IntN(100))
			}
			pair.route(t, fmt.Sprintf("cluster %d, request %d (%+v)", iter, q, req), req, snap)
		}
	}
}

// FuzzMemoizedDecisions is FuzzRoute's clusters and requests, routed by memoized and full profiles alike.
func FuzzMemoizedDecisions(f *testing.F) {
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
		if s.next()%2 == 0 {
			cfg.PrefillHardware = []string{"gpu", "mac"}
		}
		pair := newMemoPair(t, cfg)
		snap := fuzzSnapshot(s)
		for q := range 1 + s.next()%6 {
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
			pair.route(t, fmt.Sprintf("request %d (%+v)", q, req), req, snap)
		}
	})
}
