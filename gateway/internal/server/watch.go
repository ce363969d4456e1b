package server

import (
	"errors"
	"net"
	"os"
	"time"
)

// disconnectWatcher tells when a client closes its connection while its request runs. fasthttp does not read
// a connection while a handler runs, so the watcher reads it instead: a read that returns EOF or a reset means
// the client is gone. stop ends the watch with a read deadline before fasthttp reads the connection again.
//
// The read starts watchDelay after the request does: most answers of a gateway with a fast engine are over
// sooner, and a watch that never starts costs them a timer instead of a goroutine, two deadline changes and
// the wake-ups between them on the request's critical path. A client that left is noticed at most watchDelay
// late (its EOF is waiting when the read starts).
type disconnectWatcher struct {
	conn   net.Conn
	onGone func()
	gone   chan struct{}
	done   chan struct{}
	timer  *time.Timer
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
	*w = disconnectWatcher{conn: conn, onGone: onGone, gone: make(chan struct{}), done: make(chan struct{})}
	if conn == nil {
		close(w.done)
		return
	}
	w.timer = time.AfterFunc(watchDelay, w.watch)
}

// watch reads the connection until the client leaves, sends bytes, or stop sets a past read deadline. It runs
// on the timer's goroutine.
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
	if w.timer.Stop() {
		close(w.done) // the read never started
		return
	}
	// The read started, or is about to: a deadline in the past ends it either way.
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
}
