package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolRunsEveryIndexOnce runs loops of every shape on pools of several sizes, back to back (workers still
// polling) and after a pause longer than spinFor (workers asleep), and checks that each index is visited
// exactly once, by a valid worker, before run returns.
func TestPoolRunsEveryIndexOnce(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		p := newPool(workers)
		for _, pause := range []time.Duration{0, 3 * spinFor} {
			for _, tc := range []struct{ n, chunk int }{{1, 1}, {2, 1}, {7, 3}, {64, 1}, {1000, 16}, {5, 100}} {
				time.Sleep(pause)
				seen := make([]atomic.Int32, tc.n)
				var bad atomic.Bool
				p.run(tc.n, tc.chunk, func(w, lo, hi int) {
					if w < 0 || w >= workers || lo >= hi {
						bad.Store(true)
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				})
				if bad.Load() {
					t.Fatalf("workers=%d n=%d chunk=%d: a chunk with a bad worker index or an empty range", workers, tc.n, tc.chunk)
				}
				for i := range seen {
					if c := seen[i].Load(); c != 1 {
						t.Fatalf("workers=%d n=%d chunk=%d pause=%v: index %d run %d times", workers, tc.n, tc.chunk, pause, i, c)
					}
				}
			}
		}
		p.close()
	}
}

// TestPoolConcurrentRuns runs loops from several goroutines at once on one pool: each still covers its range
// exactly once (a loop that loses its workers to another runs on its caller).
func TestPoolConcurrentRuns(t *testing.T) {
	p := newPool(3)
	defer p.close()
	done := make(chan bool)
	for g := range 4 {
		go func() {
			ok := true
			for r := range 200 {
				n := 1 + (g*7+r)%50
				var sum atomic.Int64
				p.run(n, 2, func(_, lo, hi int) {
					for i := lo; i < hi; i++ {
						sum.Add(int64(i))
					}
				})
				ok = ok && sum.Load() == int64(n*(n-1)/2)
			}
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Fatal("a loop's indices were not each run once")
		}
	}
}
