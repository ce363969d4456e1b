package routerdisagg_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

// benchSnapshot is n instances of one model (the worst case: all are candidates) on n/10 nodes (at least 2),
// fully linked; a third each decode-only, prefill-only and both, with varied load.
func benchSnapshot(n int) *router.Snapshot {
	nodes := max(2, n/10)
	ins := make([]router.Instance, n)
	for i := range ins {
		role := []string{router.RoleBoth, router.RoleDecode, router.RolePrefill}[i%3]
		ins[i] = inst(fmt.Sprintf("i%04d", i), fmt.Sprintf("n%d", i%nodes+1), role, inFlight(i%7))
		ins[i].Load.KVUtilization = float64(i%10) / 10
	}
	return cluster(nodes, ins...)
}

// BenchmarkRoute measures one routing decision. "warm" reuses the snapshot, as the plugin does between
// cluster changes; "cold" hands a new snapshot each time, so the index is rebuilt on every call.
func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		snap := benchSnapshot(n)
		reqs := make([]router.Request, 8)
		for i := range reqs {
			reqs[i] = router.Request{Model: "m", PromptTokens: 5200, MaxTokens: 256, SourceNode: "n1", PrefixHashes: hashes(uint64(i), 81)}
		}
		b.Run(fmt.Sprintf("warm/instances=%d", n), func(b *testing.B) {
			r := newRouter(b, nil)
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(ctx, reqs[i%len(reqs)], snap); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("warm-nohashes/instances=%d", n), func(b *testing.B) {
			r := newRouter(b, nil)
			ctx := context.Background()
			req := router.Request{Model: "m", PromptTokens: 5200, MaxTokens: 256, SourceNode: "n1"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(ctx, req, snap); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("cold/instances=%d", n), func(b *testing.B) {
			r := newRouter(b, nil)
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				fresh := *snap // a new snapshot pointer over the same contents
				if _, err := r.Route(ctx, reqs[i%len(reqs)], &fresh); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRouteParallel routes from GOMAXPROCS goroutines sharing one router and snapshot.
func BenchmarkRouteParallel(b *testing.B) {
	snap := benchSnapshot(100)
	r := newRouter(b, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			req := router.Request{Model: "m", PromptTokens: 5200, SourceNode: "n1", PrefixHashes: hashes(uint64(i%8), 81)}
			if _, err := r.Route(context.Background(), req, snap); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// clusterSnapshot is nodes × perNode instances of one model, the fifth of them prefill-only by role, fully
// linked node to node.
func clusterSnapshot(nodes, perNode int) *router.Snapshot {
	var ins []router.Instance
	for n := range nodes {
		for j := range perNode {
			role := router.RoleBoth
			if j%5 == 0 {
				role = router.RolePrefill
			}
			in := inst(fmt.Sprintf("n%d-i%03d", n+1, j), fmt.Sprintf("n%d", n+1), role, inFlight((n+j)%7))
			in.Load.KVUtilization = float64(j%10) / 10
			ins = append(ins, in)
		}
	}
	return cluster(nodes, ins...)
}

// reportLatency reports the p50 and p99 of per-call times, in microseconds.
func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100])/1e3, "p99-µs")
}

// BenchmarkDecision is one routing decision for a 10-node cluster with 100 instances per node, in process and
// through the plugin boundary (this test binary re-executed as the plugin, over go-plugin's gRPC, as the
// gateway calls it): p50 and p99 per call. The snapshot is sent once, as the gateway does between cluster
// changes; requests mix long prompts (remote prefill) and short ones, with prefix hashes.
func BenchmarkDecision(b *testing.B) {
	snap := clusterSnapshot(10, 100)
	reqs := make([]router.Request, 16)
	for i := range reqs {
		tokens := 5200
		if i%2 == 1 {
			tokens = 300
		}
		reqs[i] = router.Request{Model: "m", PromptTokens: tokens, MaxTokens: 256, SourceNode: "n1", PrefixHashes: hashes(uint64(i), tokens/64)}
	}
	run := func(b *testing.B, r router.Router, snap *router.Snapshot) {
		ctx := context.Background()
		times := make([]time.Duration, 0, 1<<16)
		i := 0
		for b.Loop() {
			start := time.Now()
			if _, err := r.Route(ctx, reqs[i%len(reqs)], snap); err != nil {
				b.Fatal(err)
			}
			if len(times) < cap(times) {
				times = append(times, time.Since(start))
			}
			i++
		}
		reportLatency(b, times)
	}
	b.Run("in-process", func(b *testing.B) { run(b, newRouter(b, nil), snap) })
	// auto: every instance measured (prefill speeds differ by node), so each long prompt weighs the decode
	// profile's best 3 and, for each, the prefill profile's best 3.
	b.Run("in-process-auto", func(b *testing.B) {
		snap := clusterSnapshot(10, 100)
		for i := range snap.Instances {
			in := &snap.Instances[i]
			*in = measured(*in, float64(200+100*(i/100)), 10+float64(i%7))
		}
		run(b, autoRouter(b), snap)
	})
	b.Run("plugin-rpc", func(b *testing.B) {
		cfg := router.ClientConfig()
		cfg.Cmd = routertest.PluginCommand(b)
		cfg.AutoMTLS = true
		cfg.Logger = hclog.NewNullLogger()
		r, pc, err := router.Connect(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer pc.Kill()
		run(b, r, snap)
	})
}
