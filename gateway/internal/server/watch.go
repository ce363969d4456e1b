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
type disconnectWatcher struct {
	conn   net.Conn
	onGone func()
	gone   chan struct{}
	done   chan struct{}
	// pipelined is set when the client sent bytes of a next request, which the watcher consumed: the
	// connection must not be reused.
	pipelined bool
}

// watchDisconnect starts watching conn; onGone runs (on the watcher's goroutine) when the client leaves.
func watchDisconnect(conn net.Conn, onGone func()) *disconnectWatcher {
	w := &disconnectWatcher{conn: conn, onGone: onGone, gone: make(chan struct{}), done: make(chan struct{})}
	if conn == nil {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		var b [1]byte
		n, err := conn.Read(b[:])
		switch {
		case n > 0:
			w.pipelined = true
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			close(w.gone)
			w.onGone()
		}
	}()
	return w
}

// stop ends the watch; it returns once the watcher no longer reads the connection.
func (w *disconnectWatcher) stop() {
	if w.conn == nil {
		return
	}
	_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
}
