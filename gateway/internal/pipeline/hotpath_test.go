package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

// The request's hot path without a binary: the run's event queue and the disconnect watch here, the stream's
// writer and the rendering of a whole answer in stage_render_test.go, a whole request in pipeline_test.go.
// The benchmarks report allocs/op, so a per-token or per-request allocation that comes back shows:
//
//	go test ./gateway/internal/pipeline -run '^$' -bench 'Run|Stream|Watch|Answer|Serve' -benchmem
//
// A token's rendering as an OpenAI chunk alone is BenchmarkEncoderEvent, in package openai.

// pushUntilCancelled is an endless generation: it pushes tokens into r until ctx ends, then closes r.
func pushUntilCancelled(ctx context.Context, r *run) {
	var err error
	for i := 0; err == nil; i++ {
		err = r.push(ctx, tokenEvent(i))
	}
	r.close(err)
}

func tokenEvent(i int) engine.Event {
	return engine.Event{Token: &engine.Token{ID: int32(i), Text: fmt.Sprintf("t%d ", i)}}
}

func finalEvent(n int) engine.Event {
	return engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: n}}}
}

func TestRunQueue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		events int
		err    error
	}{
		{"empty, failed", 0, errors.New("engine failed")},
		{"fewer than the queue holds", 10, nil},
		{"more than the queue holds: the generation waits for the writer", 5 * runQueueMax, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := newRun(cancel)
			go func() {
				for i := range c.events {
					if err := r.push(ctx, tokenEvent(i)); err != nil {
						r.close(err)
						return
					}
				}
				r.close(c.err)
			}()
			var got []engine.Event
			var buf []engine.Event
			for {
				evs, closed, stopped := r.take(buf, nil)
				if stopped {
					t.Fatal("take stopped without a stop channel")
				}
				if len(evs) > runQueueMax {
					t.Fatalf("took %d events at once; the queue holds %d", len(evs), runQueueMax)
				}
				got = append(got, evs...)
				buf = evs
				if closed {
					break
				}
			}
			<-r.finished
			if len(got) != c.events {
				t.Fatalf("%d events, want %d", len(got), c.events)
			}
			for i, ev := range got {
				if ev.Token == nil || ev.Token.ID != int32(i) {
					t.Fatalf("event %d is %+v: out of order", i, ev.Token)
				}
			}
			if !errors.Is(r.err, c.err) {
				t.Errorf("err %v, want %v", r.err, c.err)
			}
		})
	}
}

// A generation blocked on a full queue returns when its request is cancelled, and drain waits for it.
func TestRunQueueCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	r := newRun(cancel)
	go pushUntilCancelled(ctx, r)
	evs, _, _ := r.take(nil, nil)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	drain(r)
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", r.err)
	}
}

// A heartbeat ends a wait for events without taking any.
func TestRunQueueHeartbeat(t *testing.T) {
	t.Parallel()
	r := newRun(func() {})
	tick := make(chan time.Time, 1)
	tick <- time.Now()
	evs, closed, stopped := r.take(nil, tick)
	if !stopped || closed || len(evs) != 0 {
		t.Errorf("take = %d events, closed %v, stopped %v; want a heartbeat", len(evs), closed, stopped)
	}
}

// loopbackPair is a connected TCP pair on 127.0.0.1: the server's side and the client's.
func loopbackPair(t testing.TB) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func TestDisconnectWatcher(t *testing.T) {
	t.Parallel()
	t.Run("a client that leaves is noticed", func(t *testing.T) {
		t.Parallel()
		server, client := loopbackPair(t)
		var gone atomic.Bool
		w := watchDisconnect(server, func() { gone.Store(true) })
		client.Close()
		<-w.gone // noticed once the watch starts, without waiting for stop
		w.stop()
		if !gone.Load() {
			t.Error("onGone did not run")
		}
	})
	t.Run("stopped: the connection reads on, twice stopped is once", func(t *testing.T) {
		t.Parallel()
		server, client := loopbackPair(t)
		for _, wait := range []bool{false, true} { // stopped before the watch starts, and after
			w := watchDisconnect(server, func() { t.Error("onGone on a live connection") })
			if wait {
				time.Sleep(2 * watchDelay) // lets the read start; the test holds either way
			}
			w.stop()
			w.stop()
			if w.pipelined {
				t.Fatal("pipelined without a byte sent")
			}
			if _, err := client.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
			var b [1]byte
			if n, err := server.Read(b[:]); n != 1 || err != nil {
				t.Fatalf("after stop the connection reads %d bytes, %v", n, err)
			}
			_ = server.SetReadDeadline(time.Time{})
		}
	})
	t.Run("no connection", func(t *testing.T) {
		t.Parallel()
		w := watchDisconnect(nil, func() { t.Error("onGone without a connection") })
		w.stop()
	})
}

// BenchmarkRunQueue: an event from the generation's goroutine to the stream's writer.
func BenchmarkRunQueue(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRun(cancel)
	ev := tokenEvent(1)
	go func() {
		for range b.N {
			if err := r.push(ctx, ev); err != nil {
				break
			}
		}
		r.close(nil)
	}()
	b.ReportAllocs()
	var buf []engine.Event
	for {
		evs, closed, _ := r.take(buf, nil)
		buf = evs
		if closed {
			break
		}
	}
}

// BenchmarkWatchShortRequest: the disconnect watch of a request over before watchDelay, on a real
// connection.
func BenchmarkWatchShortRequest(b *testing.B) {
	server, _ := loopbackPair(b)
	b.ReportAllocs()
	for range b.N {
		w := watchDisconnect(server, func() {})
		w.stop()
	}
}
