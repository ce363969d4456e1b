package kvwire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// Seeds: every golden frame, as a frame and as a body, plus a few hostile shapes. Inputs that ever fail belong
// in testdata/fuzz/<target>/ (go test runs them as regression tests).

func goldenFrames(f *testing.F) [][]byte {
	names, err := filepath.Glob(filepath.Join("testdata", "golden", "*.hex"))
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, n := range names {
		if b := filepath.Base(n); b != "auth_mac.hex" {
			out = append(out, readHex(f, b))
		}
	}
	return out
}

func seedBodies(f *testing.F) {
	for _, fr := range goldenFrames(f) {
		f.Add(fr[4:])
	}
	f.Add([]byte{})
	f.Add(hx(f, `81 a4 "type" a8 "kv_chunk"`))
	f.Add(hx(f, `82 a4 "type" a4 "done" a1 "x" 91 91 91 91 91 91 91 c0`))
	f.Add(hx(f, `81 a4 "type" c6 ff ff ff ff`))
}

// checkRoundTrip re-encodes a decoded value and decodes it again: the value must survive.
func checkRoundTrip[T any](t *testing.T, v T, encode func(T) ([]byte, error), decode func([]byte) (T, error)) {
	t.Helper()
	b, err := encode(v)
	if err != nil {
		t.Fatalf("re-encoding %+v: %v", v, err)
	}
	again, err := decode(b)
	if err != nil {
		t.Fatalf("decoding the re-encoding: %v", err)
	}
	if !reflect.DeepEqual(normalize(again), normalize(v)) {
		t.Fatalf("round trip changed the value:\n%+v\n%+v", again, v)
	}
}

// normalize maps empty slices to nil, which the encoding does not distinguish.
func normalize(v any) any {
	switch v := v.(type) {
	case kvwire.Request:
		if len(v.TokenIDs) == 0 {
			v.TokenIDs = nil
		}
		return v
	case *kvwire.ArraysState:
		a := *v
		a.Arrays = nil
		for _, t := range v.Arrays {
			if len(t.Shape) == 0 {
				t.Shape = nil
			}
			if len(t.Data) == 0 {
				t.Data = nil
			}
			a.Arrays = append(a.Arrays, t)
		}
		return &a
	case *kvwire.KVChunk:
		c := *v
		if len(c.Keys) == 0 {
			c.Keys, c.Values = nil, nil
		}
		return &c
	}
	return v
}

func FuzzDecodeMessage(f *testing.F) {
	seedBodies(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := kvwire.DecodeMessage(body)
		if err != nil {
			if !errors.Is(err, kvwire.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		switch m := m.(type) {
		case *kvwire.KVChunk:
			if err := m.Check(); err != nil {
				t.Fatalf("decoded an invalid chunk: %v", err)
			}
		case *kvwire.ArraysState:
			if err := m.Check(); err != nil {
				t.Fatalf("decoded an invalid arrays_state: %v", err)
			}
		}
		checkRoundTrip(t, m, func(m kvwire.Message) ([]byte, error) { return kvwire.AppendMessage(nil, m) }, kvwire.DecodeMessage)
	})
}

func FuzzDecodeRequest(f *testing.F) {
	seedBodies(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := kvwire.DecodeRequest(body)
		if err != nil {
			if !errors.Is(err, kvwire.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if r.Checksum != kvwire.ChecksumNone && r.Checksum != kvwire.ChecksumCRC32C {
			t.Fatalf("checksum %d", r.Checksum)
		}
		checkRoundTrip(t, r, func(r kvwire.Request) ([]byte, error) { return kvwire.AppendRequest(nil, &r) }, kvwire.DecodeRequest)
	})
}

func FuzzDecodeHeader(f *testing.F) {
	seedBodies(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := kvwire.DecodeHeader(body)
		if err != nil {
			if !errors.Is(err, kvwire.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		checkRoundTrip(t, h, func(h kvwire.Header) ([]byte, error) { return kvwire.AppendHeader(nil, &h) }, kvwire.DecodeHeader)
	})
}

// FuzzDecodeFrame reads a stream of frames and decodes each as every kind of message.
func FuzzDecodeFrame(f *testing.F) {
	frames := goldenFrames(f)
	for _, fr := range frames {
		f.Add(fr)
	}
	f.Add(bytes.Join(frames, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0x10, 0, 0x81})
	f.Fuzz(func(t *testing.T, stream []byte) {
		fr := kvwire.NewFrameReader(bytes.NewReader(stream), 1<<16)
		read := int64(0)
		for {
			body, err := fr.Next()
			if err != nil {
				var tooLarge *kvwire.FrameTooLargeError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &tooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			read += 4 + int64(len(body))
			if len(body) > 1<<16 {
				t.Fatalf("frame of %d bytes over the maximum", len(body))
			}
			kvwire.DecodeRequest(body)
			kvwire.DecodeHeader(body)
			kvwire.DecodeMessage(body)
		}
		if fr.BytesRead() < read || fr.BytesRead() > int64(len(stream)) {
			t.Fatalf("BytesRead %d, frames %d, stream %d", fr.BytesRead(), read, len(stream))
		}
	})
}

// FuzzFetchStream feeds arbitrary server bytes to the client's whole state machine over an in-memory pipe.
// The server side writes the bytes and closes, so every exchange ends with a typed error or a result; a frame
// deadline can only pass when the machine stalls the test, so a timeout is retried once with a generous one
// before it counts as a hang.
func FuzzFetchStream(f *testing.F) {
	frames := goldenFrames(f)
	byName := func(name string) []byte { return readHex(f, name) }
	f.Add(byName("header.hex"))
	f.Add(bytes.Join([][]byte{byName("header.hex"), byName("kv_chunk.hex"), byName("done.hex")}, nil))
	f.Add(bytes.Join([][]byte{byName("header_ext.hex"), byName("kv_chunk_crc.hex"), byName("arrays_state_crc.hex"), byName("done.hex")}, nil))
	f.Add(bytes.Join([][]byte{byName("header_error.hex"), byName("error.hex")}, nil))
	f.Add(bytes.Join(frames, nil))
	req := &kvwire.Request{RequestID: "req-1", ModelID: "llama", TokenIDs: []int32{1, 2, 3}}
	exchange := func(stream []byte, frameTimeout time.Duration) (kvwire.Result, error) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			defer server.Close()
			if _, err := kvwire.NewFrameReader(server, 1<<16).Next(); err != nil {
				return
			}
			server.Write(stream)
		}()
		dial := func(context.Context, string, string) (net.Conn, error) { return client, nil }
		return kvwire.Fetch(context.Background(), "pipe", req, &kvwire.FetchOptions{
			DialContext: dial, FrameTimeout: frameTimeout, MaxFrameSize: 1 << 16, Checksum: true,
		}, kvwire.Handler{
			OnChunk: func(c *kvwire.KVChunk) error { return c.Check() },
		})
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		res, err := exchange(stream, 2*time.Second)
		if errors.Is(err, kvwire.ErrTimeout) {
			res, err = exchange(stream, time.Minute)
		}
		if err != nil {
			var re *kvwire.RemoteError
			if !errors.Is(err, kvwire.ErrProtocol) && !errors.Is(err, kvwire.ErrConnLost) && !errors.As(err, &re) {
				t.Fatalf("error %v is not typed, or the exchange hangs", err)
			}
			return
		}
		if res.BytesReceived > int64(len(stream)) {
			t.Fatalf("received %d bytes of %d", res.BytesReceived, len(stream))
		}
	})
}
