package routerdisagg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/duet-ai/duet/sdk/router"
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
