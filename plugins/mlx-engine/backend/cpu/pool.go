package cpu

import (
	"sync"
	"sync/atomic"
)

// pool is a fixed set of worker goroutines that run parallel loops. A loop's range is cut into chunks that
// workers (and the calling goroutine, which counts as worker 0) claim with an atomic counter, so uneven chunks
// balance out without a goroutine per row.
type pool struct {
	workers int
	jobs    chan *job
	quit    chan struct{}
}

type job struct {
	n, chunk int
	fn       func(worker, lo, hi int)
	next     atomic.Int64
	wg       sync.WaitGroup
}

func newPool(workers int) *pool {
	p := &pool{workers: max(workers, 1), jobs: make(chan *job), quit: make(chan struct{})}
	for w := 1; w < p.workers; w++ {
		go p.loop(w)
	}
	return p
}

func (p *pool) loop(worker int) {
	for {
		select {
		case j := <-p.jobs:
			j.run(worker)
			j.wg.Done()
		case <-p.quit:
			return
		}
	}
}

func (j *job) run(worker int) {
	for {
		lo := int(j.next.Add(int64(j.chunk))) - j.chunk
		if lo >= j.n {
			return
		}
		j.fn(worker, lo, min(lo+j.chunk, j.n))
	}
}

// run calls fn over [0, n) in chunks of at most chunk, in parallel, and returns when all are done. fn receives
// the index of the worker running it (0 ≤ worker < p.workers) so it can use per-worker scratch memory.
func (p *pool) run(n, chunk int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk = max(chunk, 1)
	chunks := (n + chunk - 1) / chunk
	helpers := min(p.workers, chunks) - 1
	if helpers <= 0 {
		fn(0, 0, n)
		return
	}
	j := &job{n: n, chunk: chunk, fn: fn}
	j.wg.Add(helpers)
	for i := 0; i < helpers; i++ {
		p.jobs <- j
	}
	j.run(0)
	j.wg.Wait()
}

func (p *pool) close() { close(p.quit) }
