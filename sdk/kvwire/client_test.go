package kvwire_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

func headerFrame(h kvwire.Header) []byte {
	return frameOf(must(kvwire.AppendHeader(nil, &h)))
}

func messageFrame(m kvwire.Message) []byte {
	return frameOf(must(kvwire.AppendMessage(nil, m)))
}

var fourLayers = kvwire.Header{RequestID: "req-42", NumLayers: 4, DType: kvwire.BFloat16, StartPos: 10}

func TestFetchFaults(t *testing.T) {
	t.Parallel()
	chunk := kvwiretest.Chunks(smallShape)[0]
	chunkFrame := messageFrame(chunk)
	withCRC := *chunk
	withCRC.CRC32C, withCRC.HasCRC32C = kvwire.ChunkCRC32C(chunk.Keys, chunk.Values)^1, true
	acked := fourLayers
	acked.Checksum = kvwire.ChecksumCRC32C

	tests := map[string]struct {
		script func(c net.Conn, req []byte)
		opts   kvwire.FetchOptions
		is     error // sentinel the error must match
		want   string
	}{
		"closes before the header": {func(c net.Conn, _ []byte) {}, kvwire.FetchOptions{}, kvwire.ErrConnLost, "before done"},
		"closes after the header": {func(c net.Conn, _ []byte) { c.Write(headerFrame(fourLayers)) },
			kvwire.FetchOptions{}, kvwire.ErrConnLost, "before done"},
		"closes mid-chunk": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			c.Write(chunkFrame[:len(chunkFrame)/2])
		}, kvwire.FetchOptions{}, kvwire.ErrConnLost, "unexpected EOF"},
		"resets mid-stream": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			c.Write(chunkFrame)
			c.(*net.TCPConn).SetLinger(0)
		}, kvwire.FetchOptions{}, kvwire.ErrConnLost, ""},
		"stalls after the header": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			waitClose(c)
		}, kvwire.FetchOptions{FrameTimeout: 200 * time.Millisecond}, kvwire.ErrTimeout, "frame deadline"},
		"stalls inside a frame": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			c.Write(chunkFrame[:100])
			waitClose(c)
		}, kvwire.FetchOptions{FrameTimeout: 200 * time.Millisecond}, kvwire.ErrTimeout, "frame deadline"},
		"trickles past the exchange deadline": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			for range 60 {
				if _, err := c.Write(chunkFrame); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}, kvwire.FetchOptions{Timeout: 300 * time.Millisecond}, kvwire.ErrTimeout, "exchange deadline"},
		"wrong checksum": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(acked))
			c.Write(messageFrame(&withCRC))
		}, kvwire.FetchOptions{Checksum: true}, kvwire.ErrProtocol, "crc32c is"},
		"checksum promised, missing": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(acked))
			c.Write(chunkFrame)
		}, kvwire.FetchOptions{Checksum: true}, kvwire.ErrProtocol, "has no checksum"},
		"header for another request": {func(c net.Conn, _ []byte) {
			h := fourLayers
			h.RequestID = "someone-else"
			c.Write(headerFrame(h))
		}, kvwire.FetchOptions{}, kvwire.ErrProtocol, `header is for request "someone-else"`},
		"chunk beyond the layers": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(kvwire.Header{NumLayers: 0, DType: kvwire.BFloat16}))
			c.Write(chunkFrame)
		}, kvwire.FetchOptions{}, kvwire.ErrProtocol, "header has 0 layers"},
		"unknown message type": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			c.Write(frameOf(hx(t, `82 a4 "type" a8 "kv_quant" a4 "bits" 04`)))
		}, kvwire.FetchOptions{}, kvwire.ErrProtocol, `unknown message type "kv_quant"`},
		"frame over the maximum": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			c.Write(chunkFrame)
		}, kvwire.FetchOptions{MaxFrameSize: 1000}, kvwire.ErrProtocol, "exceeds the maximum of 1000"},
		"garbage header": {func(c net.Conn, _ []byte) { c.Write(frameOf([]byte{0x93, 1, 2, 3})) },
			kvwire.FetchOptions{}, kvwire.ErrProtocol, "header is not a map"},
		"chunk instead of header": {func(c net.Conn, _ []byte) { c.Write(chunkFrame) },
			kvwire.FetchOptions{}, kvwire.ErrProtocol, `expected the header, got a "kv_chunk"`},
		"corrupt chunk": {func(c net.Conn, _ []byte) {
			c.Write(headerFrame(fourLayers))
			bad := append([]byte(nil), chunkFrame...)
			bad[4] = 0x87 // one entry fewer than the map holds: the rest is stray bytes
			c.Write(bad)
		}, kvwire.FetchOptions{}, kvwire.ErrProtocol, "stray bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := fakeServer(t, tc.script)
			// A fault the client failed to notice would end in the 20 s exchange deadline instead, which no
			// case expects.
			_, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, requestFor(smallShape), &tc.opts, kvwire.Handler{})
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
}

func TestFetchErrorInsteadOfHeader(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, func(c net.Conn, _ []byte) { c.Write(messageFrame(&kvwire.Error{Code: 503, Message: "busy"})) })
	_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 503 || re.Message != "busy" {
		t.Fatalf("got %v", err)
	}
}

func TestFetchCancelled(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, func(c net.Conn, _ []byte) {
		c.Write(headerFrame(fourLayers))
		waitClose(c)
	})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := kvwire.Fetch(ctx, addr, requestFor(smallShape), nil, kvwire.Handler{
		OnHeader: func(*kvwire.Header) error { time.AfterFunc(50*time.Millisecond, cancel); return nil },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestFetchContextDeadlineIsATimeout(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, func(c net.Conn, _ []byte) { waitClose(c) })
	_, err := kvwire.Fetch(ctxTimeout(t, 200*time.Millisecond), addr, requestFor(smallShape), nil, kvwire.Handler{})
	if !errors.Is(err, kvwire.ErrTimeout) || !strings.Contains(err.Error(), "exchange deadline") {
		t.Fatalf("got %v", err)
	}
}

func TestFetchDialFailures(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), closed, requestFor(smallShape), nil, kvwire.Handler{})
	if !errors.Is(err, kvwire.ErrConnLost) || !strings.Contains(err.Error(), "dialing") {
		t.Fatalf("refused: %v", err)
	}
	blackhole := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), "192.0.2.1:9", requestFor(smallShape),
		&kvwire.FetchOptions{DialTimeout: 100 * time.Millisecond, DialContext: blackhole}, kvwire.Handler{})
	if !errors.Is(err, kvwire.ErrTimeout) || !strings.Contains(err.Error(), "dialing") {
		t.Fatalf("dial timeout: %v", err)
	}
}

func TestFetchHandlerErrorStopsTheStream(t *testing.T) {
	t.Parallel()
	srv := kvwiretest.NewPlainServer(t, smallShape.Response)
	stop := errors.New("cache full")
	res, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), srv.Addr, requestFor(smallShape), nil, kvwire.Handler{
		OnArraysState: func(*kvwire.ArraysState) error { return nil },
		OnChunk:       func(c *kvwire.KVChunk) error { return stop },
	})
	if err != stop || res.Chunks != 1 {
		t.Fatalf("got %v after %d chunks", err, res.Chunks)
	}
}

func TestFetchArraysState(t *testing.T) {
	t.Parallel()
	state := &kvwire.ArraysState{LayerIdx: 1, Arrays: []kvwire.TensorBlob{
		{DType: kvwire.Float32, Shape: []int{2, 2}, Data: make([]byte, 16)},
		{DType: kvwire.BFloat16, Shape: []int{3}, Data: []byte{1, 2, 3, 4, 5, 6}},
	}}
	for _, sums := range []bool{false, true} {
		_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
			w, _ := j.Accept()
			w.Header(kvwire.Header{NumLayers: 2, DType: kvwire.BFloat16})
			w.ArraysState(*state)
			w.Done(0)
		})
		var got *kvwire.ArraysState
		res, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape),
			&kvwire.FetchOptions{Checksum: sums}, kvwire.Handler{OnArraysState: func(a *kvwire.ArraysState) error {
				got = kvwiretest.Clone(a).(*kvwire.ArraysState)
				return nil
			}})
		if err != nil || got == nil || res.Checksummed != sums {
			t.Fatalf("checksum %v: %v, %+v", sums, err, res)
		}
		got.CRC32C, got.HasCRC32C = 0, false
		if want := kvwiretest.Clone(state); !equalMessages(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}
