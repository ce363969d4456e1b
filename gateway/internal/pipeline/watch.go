package pipeline

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// disconnectWatcher tells when a client closes its connection while its request runs. fasthttp does not read
// a connection while a handler runs, so the watcher reads it instead: a read that returns EOF or a reset means
// the client is gone. stop ends the watch with a read deadline before fasthttp reads the connection again.
//
// The read starts once the request has run watchDelay: most answers of a gateway with a fast engine are over
// sooner, and a watch that never starts costs them a place in a queue instead of a goroutine, two deadline
// changes and the wake-ups between them on the request's critical path. One goroutine (watchQueue) starts the
// reads of all requests; a timer per request would cost each a thread wake-up, since the Go runtime wakes a
// thread to handle a new timer that is due before all others. A client that left is noticed at most twice
// watchDelay late (its EOF is waiting when the read starts).
type disconnectWatcher struct {
	conn   net.Conn
	onGone func()
	gone   chan struct{}
	done   chan struct{}
	// due is when the read starts; slot is the watcher's index in the queue, -1 once it left it (guarded by
	// the queue's lock).
	due  time.Time
	slot int
	// stopped makes stop idempotent; it is called by the request's owner (the handler, then a stream's writer).
	stopped bool
	// pipelined is set when the client sent bytes of a next request, which the watcher consumed: the
	// connection must not be reused. Read it after stop.
	pipelined bool
}

// watchDelay is how long a request runs before its connection is watched.
const watchDelay = 5 * time.Millisecond

// watchDisconnect starts watching conn; onGone runs (on the watcher's goroutine) when the client leaves.
func watchDisconnect(conn net.Conn, onGone func()) *disconnectWatcher {
	w := new(disconnectWatcher)
	w.start(conn, onGone)
	return w
}

// start is watchDisconnect for a watcher that is part of another value (a request's).
func (w *disconnectWatcher) start(conn net.Conn, onGone func()) {
	*w = disconnectWatcher{conn: conn, onGone: onGone, gone: make(chan struct{}), done: make(chan struct{}), slot: -1}
	if conn == nil {
		close(w.done)
		return
	}
	watches.add(w)
}

// watch reads the connection until the client leaves, sends bytes, or stop sets a past read deadline. It runs
// on a goroutine of its own.
func (w *disconnectWatcher) watch() {
	defer close(w.done)
	var b [1]byte
	n, err := w.conn.Read(b[:])
	switch {
	case n > 0:
		w.pipelined = true
	case errors.Is(err, os.ErrDeadlineExceeded):
	default:
		close(w.gone)
		w.onGone()
	}
}

// stop ends the watch; it returns once the watcher no longer reads the connection.
func (w *disconnectWatcher) stop() {
	if w.conn == nil || w.stopped {
		return
	}
	w.stopped = true
	if watches.remove(w) {
		close(w.done) // the read never started
		return
	}
	// The read started, or is about to: a deadline in the past ends it either way.
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
}

// watches is the process's queue of watches not yet started.
var watches watchQueue

// watchQueue holds the watchers whose read has not started. Its goroutine runs while the queue is not empty:
// every watchDelay it starts the reads that are due, and it ends when it finds the queue empty, so an idle
// gateway has no timer running. Adding and removing a watcher costs a lock and a swap.
type watchQueue struct {
	mu      sync.Mutex
	pending []*disconnectWatcher
	running bool
}

func (q *watchQueue) add(w *disconnectWatcher) {
	w.due = time.Now().Add(watchDelay)
	q.mu.Lock()
	w.slot = len(q.pending)
	q.pending = append(q.pending, w)
	idle := !q.running
	q.running = true
	q.mu.Unlock()
	if idle {
		go q.run()
	}
}

// remove takes w off the queue; false: it was not on it (its read started).
func (q *watchQueue) remove(w *disconnectWatcher) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.slot < 0 {
		return false
	}
	q.removeAt(w.slot)
	return true
}

// removeAt drops the watcher at index i, moving the last one into its place. q.mu is held.
func (q *watchQueue) removeAt(i int) {
	w, last := q.pending[i], len(q.pending)-1
	q.pending[i] = q.pending[last]
	q.pending[i].slot = i
	q.pending[last] = nil
	q.pending = q.pending[:last]
	w.slot = -1
}

func (q *watchQueue) run() {
	for {
		time.Sleep(watchDelay)
		q.mu.Lock()
		now := time.Now()
		for i := 0; i < len(q.pending); {
			w := q.pending[i]
			if w.due.After(now) {
				i++
				continue
			}
			q.removeAt(i)
			go w.watch()
		}
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}
