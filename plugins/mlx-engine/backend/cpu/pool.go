package cpu

import (
	"runtime"
	"sync/atomic"
	"time"
)

// pool is a fixed set of worker goroutines that run parallel loops. A loop's range is cut into chunks that
// workers (and the calling goroutine, which counts as worker 0) claim with an atomic counter, so uneven chunks
// balance out without a goroutine per row, and a worker that never shows up (its thread descheduled) only
// leaves its share to the others.
//
// A decode step is a chain of short loops (about five per layer, each tens of microseconds), so what it costs
// to start and finish a loop matters as much as the loop: a worker blocked in a channel receive takes a futex
// wake-up and a trip through the scheduler to start, tens of microseconds on a loaded virtual machine, and a
// decode step on two threads was slower than on one. So a worker that finishes a loop keeps polling for the
// next one for spinFor (yielding to other goroutines between polls: the benchmarks' reads, the engine's
// goroutines), and only then blocks; the caller waits for the last chunk the same way. Between steps the
// workers sleep.
type pool struct {
	workers int
	posted  atomic.Pointer[job] // the latest loop, for workers to join
	seq     atomic.Uint64       // bumped with every posted loop
	sleep   []worker            // per worker (index 0, the caller, unused)
	quit    atomic.Bool
}

// worker is a helper's sleeping state: asleep is set while it is (about to be) blocked on wake.
type worker struct {
	asleep atomic.Bool
	wake   chan struct{}
}

// spinFor is how long a worker polls for the next loop, and a caller for its loop's last chunk, before
// blocking: longer than the gaps between a step's loops, much shorter than a step.
const spinFor = 100 * time.Microsecond

type job struct {
	n, chunk int
	fn       func(worker, lo, hi int)
	next     atomic.Int64 // the next index to claim
	done     atomic.Int64 // how many indices are finished
	waiting  atomic.Bool  // the caller is (about to be) blocked on finished
	finished chan struct{}
}

func newPool(workers int) *pool {
	p := &pool{workers: max(workers, 1)}
	p.sleep = make([]worker, p.workers)
	for w := 1; w < p.workers; w++ {
		p.sleep[w].wake = make(chan struct{}, 1)
		go p.loop(w)
	}
	return p
}

func (p *pool) loop(w int) {
	ws := &p.sleep[w]
	var seen uint64
	for !p.quit.Load() {
		if s := p.seq.Load(); s != seen {
			seen = s
			if j := p.posted.Load(); j != nil {
				j.run(w)
			}
			continue
		}
		if p.spin(func() bool { return p.seq.Load() != seen || p.quit.Load() }) {
			continue
		}
		// Block: announce it first, then look again, so that a loop posted in between is either seen here
		// or finds asleep set and wakes us.
		ws.asleep.Store(true)
		if p.seq.Load() == seen && !p.quit.Load() {
			<-ws.wake
		}
		ws.asleep.Store(false)
	}
}

// spin polls ready for up to spinFor and reports whether it turned true.
func (p *pool) spin(ready func() bool) bool {
	start := time.Now()
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i%64 == 63 {
			if time.Since(start) > spinFor {
				return false
			}
			runtime.Gosched()
		}
	}
}

func (j *job) run(worker int) {
	for {
		lo := int(j.next.Add(int64(j.chunk))) - j.chunk
		if lo >= j.n {
			return
		}
		hi := min(lo+j.chunk, j.n)
		j.fn(worker, lo, hi)
		if j.done.Add(int64(hi-lo)) == int64(j.n) && j.waiting.Load() {
			j.finished <- struct{}{}
		}
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
	if min(p.workers, chunks) <= 1 {
		fn(0, 0, n)
		return
	}
	j := &job{n: n, chunk: chunk, fn: fn, finished: make(chan struct{}, 1)}
	p.posted.Store(j)
	p.seq.Add(1)
	for w := 1; w < p.workers; w++ {
		if ws := &p.sleep[w]; ws.asleep.Load() {
			select {
			case ws.wake <- struct{}{}:
			default:
			}
		}
	}
	j.run(0)
	if p.spin(func() bool { return j.done.Load() == int64(n) }) {
		return
	}
	j.waiting.Store(true)
	if j.done.Load() != int64(n) {
		<-j.finished
	}
}

func (p *pool) close() {
	p.quit.Store(true)
	for w := 1; w < p.workers; w++ {
		select {
		case p.sleep[w].wake <- struct{}{}:
		default:
		}
	}
}
