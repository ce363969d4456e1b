package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

// run is a generation in progress on its own goroutine, for a stream. Its events queue here until the stream's
// writer takes them, all that are ready at once: a writer that fell behind (the engine sent a batch, or the
// last write was slow) renders them into one write, and an event that arrives while the writer waits is
// handed over at once. Pushing an event costs a lock and an append; only the push into an empty queue wakes
// the writer.
type run struct {
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []engine.Event
	closed bool  // the generation returned: nothing more will be queued
	err    error // what it returned; set with closed

	ready    chan struct{} // capacity 1: the queue became non-empty, or the run closed
	space    chan struct{} // capacity 1: the writer took the queue
	finished chan struct{} // closed when the generation's goroutine has returned
}

// runQueueMax bounds the events queued: beyond it the generation waits for the writer, which is the
// backpressure of a slow client.
const runQueueMax = 256

func newRun(cancel context.CancelFunc) *run {
	return &run{cancel: cancel, ready: make(chan struct{}, 1), space: make(chan struct{}, 1), finished: make(chan struct{})}
}

// push queues an event; it waits while the queue is full, until ctx is done.
func (r *run) push(ctx context.Context, ev engine.Event) error {
	r.mu.Lock()
	for len(r.queue) >= runQueueMax {
		r.mu.Unlock()
		select {
		case <-r.space:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	r.queue = append(r.queue, ev)
	wake := len(r.queue) == 1
	r.mu.Unlock()
	if wake {
		signal(r.ready)
	}
	return nil
}

// close ends the run with the generation's error; it is the last thing the generation's goroutine does.
func (r *run) close(err error) {
	r.mu.Lock()
	r.closed, r.err = true, err
	r.mu.Unlock()
	signal(r.ready)
	close(r.finished)
}

// take waits for events and returns all that are queued, handing the queue buf's storage for what comes
// next, and whether the run is closed; events and closed can come together. It returns nothing when stop
// fires first (a nil stop never does).
func (r *run) take(buf []engine.Event, stop <-chan time.Time) (evs []engine.Event, closed, stopped bool) {
	for {
		r.mu.Lock()
		if len(r.queue) > 0 || r.closed {
			evs, r.queue = r.queue, clear0(buf)
			closed = r.closed
			r.mu.Unlock()
			signal(r.space)
			return evs, closed, false
		}
		r.mu.Unlock()
		select {
		case <-r.ready:
		case <-stop:
			return nil, false, true
		}
	}
}

// clear0 empties buf for reuse, dropping what its events point to.
func clear0(buf []engine.Event) []engine.Event {
	clear(buf)
	return buf[:0]
}

// drain cancels a run and waits for its goroutine to finish.
func drain(r *run) {
	r.cancel()
	<-r.finished
}

// signal sends on a channel of capacity 1 unless a signal is already pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
