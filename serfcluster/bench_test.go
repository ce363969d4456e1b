package serfcluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The benchmarks measure the tuned LANTimings on a 10-node cluster over loopback. They report percentiles
// as custom metrics; run them with a fixed count so the percentiles mean something:
//
//	go test ./serfcluster -run '^$' -bench 'Propagation' -benchtime 100x
//	go test ./serfcluster -run '^$' -bench 'FailureDetection' -benchtime 10x

const benchNodes = 10

func benchCluster(b *testing.B) []*testNode {
	b.Helper()
	return startCluster(b, benchNodes, func(i int, cfg *Config) {
		cfg.Timings = LANTimings()
		cfg.AntiEntropyInterval = time.Minute // measure gossip, not pulls
		cfg.CoordinateInterval = time.Minute
	})
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

func reportPercentiles(b *testing.B, name string, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(ds, 0.5)), name+"-p50-ms")
	b.ReportMetric(ms(percentile(ds, 0.99)), name+"-p99-ms")
	b.ReportMetric(ms(slices.Max(ds)), name+"-max-ms")
}

// BenchmarkPropagation10 writes a link on one node and measures the time until all ten snapshots hold it.
func BenchmarkPropagation10(b *testing.B) {
	nodes := benchCluster(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	arrived := map[string]int{} // link ID -> nodes that have it
	lastArrival := map[string]time.Time{}
	var wg sync.WaitGroup
	for _, n := range nodes {
		ch := n.Subscribe(ctx)
		wg.Go(func() {
			seen := map[string]bool{}
			for s := range ch {
				now := time.Now()
				mu.Lock()
				for _, l := range s.Links {
					if !seen[l.LinkID] {
						seen[l.LinkID] = true
						arrived[l.LinkID]++
						lastArrival[l.LinkID] = now
					}
				}
				mu.Unlock()
			}
		})
	}
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if err := nodes[i%benchNodes].PutInstanceLink(InstanceLink{LinkID: id, DecodeInstances: []string{"d"}}); err != nil {
			b.Fatal(err)
		}
		waitFor(b, 30*time.Second, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return arrived[id] == benchNodes, fmt.Sprintf("%s reached %d nodes", id, arrived[id])
		})
		mu.Lock()
		took = append(took, lastArrival[id].Sub(start))
		mu.Unlock()
	}
	b.StopTimer()
	reportPercentiles(b, "all10", took)
	cancel()
	for _, n := range nodes {
		n.stop()
	}
	wg.Wait()
}

// BenchmarkFailureDetection10 hard-stops one node per iteration and measures the time until every other
// node reports it failed (and its instance unavailable); the node is then restarted and rejoins untimed.
func BenchmarkFailureDetection10(b *testing.B) {
	nodes := benchCluster(b)
	for _, n := range nodes {
		if err := n.PutInstance(testInstance(n.id, "a")); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 30*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			return len(s.Instances) == benchNodes, fmt.Sprintf("%d instances", len(s.Instances))
		})
	})
	var first, all []time.Duration
	b.ResetTimer()
	for i := range b.N {
		vi := 1 + i%(benchNodes-1)
		victim := nodes[vi]
		others := slices.Concat(nodes[:vi], nodes[vi+1:])
		inst := string(victim.id) + "/a"
		start := time.Now()
		victim.stop()
		var firstAt time.Time
		waitFor(b, 30*time.Second, func() (bool, string) {
			seen := 0
			for _, n := range others {
				s := n.Snapshot()
				node, _ := s.Node(victim.id)
				in, _ := s.Instance(inst)
				if node.Status == StatusFailed && in.Status == InstanceUnavailable {
					seen++
				}
			}
			if seen > 0 && firstAt.IsZero() {
				firstAt = time.Now()
			}
			s := others[0].Snapshot()
			node, _ := s.Node(victim.id)
			in, ok := s.Instance(inst)
			return seen == len(others), fmt.Sprintf("%d of %d nodes see %s failed (%s: %s, instance %v %s)",
				seen, len(others), victim.id, others[0].id, node.Status, ok, in.Status)
		})
		all = append(all, time.Since(start))
		first = append(first, firstAt.Sub(start))

		b.StopTimer()
		cfg := victim.cfg
		cfg.BindAddr = victim.GossipAddr()
		cfg.JoinAddrs = []string{nodes[0].GossipAddr()}
		nodes[vi] = startNode(b, cfg)
		if err := nodes[vi].PutInstance(testInstance(victim.id, "a")); err != nil {
			b.Fatal(err)
		}
		waitAllAlive(b, nodes, 60*time.Second)
		waitFor(b, 30*time.Second, func() (bool, string) {
			return everywhere(nodes, func(s *Snapshot) (bool, string) {
				in, _ := s.Instance(inst)
				return in.Status == InstanceReady, inst + " is " + string(in.Status)
			})
		})
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, "first", first)
	reportPercentiles(b, "all", all)
}
