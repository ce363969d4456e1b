package kvwire_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// dialIdle opens n connections that send nothing, as an attacker holding the port would.
func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// closedByServer reports whether the server has closed c (a read sees EOF or a reset at once).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsCannotLockThePort opens 300 connections that send nothing (the default limits hold 256
// of them, 64 from one address) and then sends a well-formed request from the same address: it gets its KV at
// once. The deadlines are an hour, so only making room by closing the oldest idle connections can serve it;
// before, the idle connections took every slot and the request got 503 until they timed out.
func TestIdleConnectionsCannotLockThePort(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{FirstByteTimeout: time.Hour, RequestTimeout: time.Hour},
		func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	idle := dialIdle(t, addr, 300)
	for round := range 3 {
		rx := newReceiver(t)
		start := time.Now()
		if _, err := kvwire.Fetch(ctxTimeout(t, 30*time.Second), addr, requestFor(smallShape), nil, rx.handler()); err != nil {
			t.Fatalf("round %d: a well-formed request behind 300 idle connections: %v", round, err)
		}
		rx.check(smallShape)
		t.Logf("round %d: served in %v with 300 idle connections open", round, time.Since(start).Round(time.Microsecond))
	}
	// The server holds at most 64 idle connections from one address: the oldest were closed.
	open := 0
	for _, c := range idle {
		if !closedByServer(c) {
			open++
		}
	}
	if open > kvwire.DefaultMaxPendingPerSource {
		t.Errorf("%d idle connections still open, want at most %d", open, kvwire.DefaultMaxPendingPerSource)
	}
}

// TestPartialRequestOutlivesIdleOnes: when room must be made, connections that sent nothing go before one that
// is midway through its request, which then completes.
func TestPartialRequestOutlivesIdleOnes(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{FirstByteTimeout: time.Hour, RequestTimeout: time.Hour,
		MaxPending: 8, MaxPendingPerSource: 8},
		func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	frame := frameOf(must(kvwire.AppendRequest(nil, requestFor(smallShape))))
	slow.Write(frame[:10]) // the length prefix and a few bytes: started, not complete
	time.Sleep(50 * time.Millisecond)
	dialIdle(t, addr, 20) // each past 8 closes the oldest idle one, never slow
	slow.Write(frame[10:])
	slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	data, err := io.ReadAll(slow)
	if err != nil || len(data) < 1000 {
		t.Fatalf("the slow request got %d bytes (%v); it was closed to make room for idle connections", len(data), err)
	}
}

// TestFirstByteDeadline: a connection that sends nothing is closed after FirstByteTimeout; one that sent its
// length prefix has RequestTimeout for the rest.
func TestFirstByteDeadline(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{FirstByteTimeout: 100 * time.Millisecond, RequestTimeout: time.Hour},
		func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	idle := dialIdle(t, addr, 1)[0]
	slow := dialIdle(t, addr, 1)[0]
	frame := frameOf(must(kvwire.AppendRequest(nil, requestFor(smallShape))))
	slow.Write(frame[:6])
	eventually(t, "the idle connection to be closed", func() bool { return closedByServer(idle) })
	time.Sleep(300 * time.Millisecond) // well past the first-byte deadline
	slow.Write(frame[6:])
	slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	if data, err := io.ReadAll(slow); err != nil || len(data) < 1000 {
		t.Fatalf("the slow sender got %d bytes (%v)", len(data), err)
	}
}

// lockedBuffer is a log sink for tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRejectionsAreLoggedAtABoundedRate: 500 connections beyond the pending limit are each a rejection; the
// log gets a burst of lines, not 500, and the line after a pause counts what it left out.
func TestRejectionsAreLoggedAtABoundedRate(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	_, addr := startServer(t, kvwire.ServerConfig{FirstByteTimeout: time.Hour, RequestTimeout: time.Hour,
		MaxPending: 4, MaxPendingPerSource: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	dialIdle(t, addr, 504)
	eventually(t, "the rejections to be logged", func() bool { return strings.Contains(logs.String(), "oldest") })
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(logs.String(), "\n"); n < 1 || n > 20 {
		t.Fatalf("%d log lines for 500 rejections, want a bounded burst:\n%s", n, logs.String())
	}
	time.Sleep(1100 * time.Millisecond) // a token comes back
	dialIdle(t, addr, 1)
	eventually(t, "the count of suppressed lines", func() bool { return strings.Contains(logs.String(), "suppressed_since_last=") })
	if _, err := kvwire.Fetch(ctxTimeout(t, 30*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{}); err != nil {
		t.Fatalf("a well-formed request after the flood: %v", err)
	}
}
