package kvwire_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// startServer serves cfg on a loopback port. When cfg.Dispatch is nil, jobs go to a queue drained by one
// goroutine that stands for the engine's compute loop and calls compute for each job.
func startServer(t *testing.T, cfg kvwire.ServerConfig, compute func(*kvwire.Job)) (*kvwire.Server, string) {
	t.Helper()
	var loop sync.WaitGroup
	queue := make(chan *kvwire.Job, 16)
	if cfg.Dispatch == nil {
		cfg.Dispatch = func(j *kvwire.Job) {
			select {
			case queue <- j:
			default:
				j.Reject(kvwire.CodeBusy, "queue full")
			}
		}
		loop.Add(1)
		go func() {
			defer loop.Done()
			for j := range queue {
				compute(j)
			}
		}()
	}
	srv, err := kvwire.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != kvwire.ErrServerClosed {
			t.Errorf("Serve returned %v", err)
		}
		close(queue)
		loop.Wait()
	})
	return srv, l.Addr().String()
}

// stream accepts j and sends shape s through its writer, as an engine streaming a prefill does.
func stream(t *testing.T, j *kvwire.Job, s kvwiretest.Shape, release func(kvwire.KVChunk)) *kvwire.Writer {
	t.Helper()
	w, err := j.Accept()
	if err != nil {
		t.Errorf("Accept: %v", err)
		return nil
	}
	if err := w.Header(kvwire.Header{NumLayers: s.NumLayers, DType: s.DType, StartPos: s.StartPos}); err != nil {
		t.Errorf("Header: %v", err)
		return w
	}
	for _, c := range kvwiretest.Chunks(s) {
		if err := w.Chunk(*c, release); err != nil {
			return w // the test decides whether that was expected, through w.Err
		}
	}
	w.Done(s.EndPos - s.StartPos)
	return w
}

// receiver is a Handler that checks every chunk's bytes and order.
type receiver struct {
	t      *testing.T
	header kvwire.Header
	pos    map[int]int // next expected position per layer
	chunks int
	bad    error
}

func newReceiver(t *testing.T) *receiver { return &receiver{t: t, pos: map[int]int{}} }

func (r *receiver) handler() kvwire.Handler {
	return kvwire.Handler{
		OnHeader: func(h *kvwire.Header) error { r.header = *h; return nil },
		OnChunk: func(c *kvwire.KVChunk) error {
			pos, ok := r.pos[c.LayerIdx]
			if !ok {
				pos = r.header.StartPos
			}
			if !kvwiretest.Verify(c, pos) && r.bad == nil {
				r.bad = fmt.Errorf("chunk %d (layer %d, position %d) has wrong bytes", r.chunks, c.LayerIdx, pos)
			}
			r.pos[c.LayerIdx] = pos + c.NumTokens
			r.chunks++
			return nil
		},
	}
}

// check verifies that every layer of s arrived whole.
func (r *receiver) check(s kvwiretest.Shape) {
	r.t.Helper()
	if r.bad != nil {
		r.t.Fatal(r.bad)
	}
	for layer := range s.NumLayers {
		if got := r.pos[layer]; got != s.EndPos {
			r.t.Fatalf("layer %d ends at position %d, want %d", layer, got, s.EndPos)
		}
	}
}

// fakeServer accepts connections on a loopback port and, for each, reads the request frame and runs script.
// It stands for a broken or hostile server.
func fakeServer(t *testing.T, script func(c net.Conn, request []byte)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				body, err := kvwire.NewFrameReader(bufio.NewReader(c), 1<<20).Next()
				if err != nil {
					return
				}
				script(c, body)
			}()
		}
	}()
	return l.Addr().String()
}

// waitClose stalls a fake server until the client closes the connection.
func waitClose(c net.Conn) { io.Copy(io.Discard, c) }

// rawExchange sends frame to addr and returns everything the server sends until it closes.
func rawExchange(t *testing.T, addr string, frame []byte) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out
		}
	}
}

// frames splits a byte stream into frame bodies.
func frames(t *testing.T, stream []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(stream) > 0 {
		if len(stream) < 4 {
			t.Fatalf("%d stray bytes after the last frame", len(stream))
		}
		n := int(uint32(stream[0])<<24 | uint32(stream[1])<<16 | uint32(stream[2])<<8 | uint32(stream[3]))
		if len(stream) < 4+n {
			t.Fatalf("truncated frame: %d of %d bytes", len(stream)-4, n)
		}
		out = append(out, stream[4:4+n])
		stream = stream[4+n:]
	}
	return out
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
