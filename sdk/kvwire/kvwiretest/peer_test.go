package kvwiretest_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

func TestPlainPeersTalk(t *testing.T) {
	t.Parallel()
	shape := kvwiretest.Shape{NumLayers: 3, StartPos: 4, EndPos: 40, ChunkTokens: 16, NHeads: 2, HeadDim: 8, DType: kvwire.Float16}
	srv := kvwiretest.NewPlainServer(t, shape.Response)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kvwire.Request{RequestID: "r", ModelID: "m", TokenIDs: make([]int32, 40), StartPos: 4}
	resp, err := kvwiretest.PlainFetch(ctx, srv.Addr, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header != (kvwire.Header{RequestID: "r", ModelID: "m", NumLayers: 3, DType: kvwire.Float16, StartPos: 4}) {
		t.Fatalf("header %+v", resp.Header)
	}
	pos := map[int]int{}
	for _, m := range resp.Messages[:len(resp.Messages)-1] {
		c := m.(*kvwire.KVChunk)
		p, ok := pos[c.LayerIdx]
		if !ok {
			p = shape.StartPos
		}
		if !kvwiretest.Verify(c, p) {
			t.Fatalf("chunk for layer %d at %d has wrong bytes", c.LayerIdx, p)
		}
		pos[c.LayerIdx] = p + c.NumTokens
	}
	if d, ok := resp.Messages[len(resp.Messages)-1].(*kvwire.Done); !ok || d.TotalTokens != 36 { // positions sent: 40 less start_pos 4
		t.Fatalf("last message %+v", resp.Messages[len(resp.Messages)-1])
	}
	if got := srv.Requests(); len(got) != 1 || got[0].RequestID != "r" {
		t.Fatalf("requests %+v", got)
	}
}

func TestPlainServerAnswersBadRequests(t *testing.T) {
	t.Parallel()
	srv := kvwiretest.NewPlainServer(t, func(kvwire.Request) kvwiretest.Response {
		return kvwiretest.ErrorResponse(kvwire.CodeBusy, "No payload ready")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kvwiretest.PlainFetch(ctx, srv.Addr, kvwire.Request{RequestID: "r"})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 503 || resp.Header.DType != kvwire.Float32 {
		t.Fatalf("got %+v, %v", resp, err)
	}
}

// hybridStream is what a server sends for a hybrid model of four layers (linear, full, linear, full) in exo's
// order: each layer in turn, a linear layer as one arrays_state with mlx-lm's ArraysCache arrays (conv window
// [1, K-1, conv_dim] in the KV dtype, state [1, Nv, Dv, Dk] in float32), a full layer as kv_chunks of
// [start, end); statesLast moves the states after every chunk, as a duet server sends them.
func hybridStream(start, end int, statesLast bool) []kvwire.Message {
	var chunks, states []kvwire.Message
	for _, c := range kvwiretest.Chunks(kvwiretest.Shape{NumLayers: 4, StartPos: start, EndPos: end, ChunkTokens: 16,
		NHeads: 2, HeadDim: 8, DType: kvwire.BFloat16}) {
		if c.LayerIdx%2 == 1 {
			chunks = append(chunks, c)
		}
	}
	for _, l := range []int{0, 2} {
		conv, state := make([]byte, 3*24*2), make([]byte, 4*8*16*4)
		kvwiretest.Fill(conv, l, 0, 2)
		kvwiretest.Fill(state, l, 0, 3)
		states = append(states, &kvwire.ArraysState{LayerIdx: l, Arrays: []kvwire.TensorBlob{
			{DType: kvwire.BFloat16, Shape: []int{1, 3, 24}, Data: conv},
			{DType: kvwire.Float32, Shape: []int{1, 4, 8, 16}, Data: state}}})
	}
	if statesLast {
		return append(chunks, states...)
	}
	var out []kvwire.Message
	for l := range 4 {
		if l%2 == 0 {
			out = append(out, states[l/2])
		}
		for _, c := range chunks {
			if c.(*kvwire.KVChunk).LayerIdx == l {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestPlainPeersHybrid: the hybrid stream passes intact between an exo-shaped server and a duet client that asks
// for checksums the server does not grant (states in layer order) and between a duet server and an exo-shaped
// client (states last): header num_layers = every layer, kv_chunks for the full layers only, done.total_tokens =
// end - start.
func TestPlainPeersHybrid(t *testing.T) {
	t.Parallel()
	const start, end = 8, 40
	check := func(t *testing.T, h kvwire.Header, got, want []kvwire.Message) {
		t.Helper()
		if h.NumLayers != 4 || h.StartPos != start {
			t.Fatalf("header %+v", h)
		}
		if len(got) != len(want)+1 {
			t.Fatalf("%d messages, want %d and done", len(got), len(want))
		}
		for i, m := range want {
			g := got[i]
			if a, ok := g.(*kvwire.ArraysState); ok {
				a.CRC32C, a.HasCRC32C = 0, false
			}
			if c, ok := g.(*kvwire.KVChunk); ok {
				c.CRC32C, c.HasCRC32C = 0, false
			}
			if !reflect.DeepEqual(g, m) {
				t.Fatalf("message %d: %+v, want %+v", i, g, m)
			}
		}
		if d, ok := got[len(got)-1].(*kvwire.Done); !ok || d.TotalTokens != end-start {
			t.Fatalf("last message %+v, want done with %d tokens", got[len(got)-1], end-start)
		}
	}
	req := kvwire.Request{RequestID: "r", ModelID: "m", TokenIDs: make([]int32, end), StartPos: start}

	t.Run("ExoServerDuetClient", func(t *testing.T) {
		want := hybridStream(start, end, false)
		srv := kvwiretest.NewPlainServer(t, func(r kvwire.Request) kvwiretest.Response {
			return kvwiretest.Response{Header: kvwire.Header{RequestID: r.RequestID, ModelID: r.ModelID, NumLayers: 4,
				DType: kvwire.BFloat16, StartPos: r.StartPos}, Messages: append(slices.Clone(want), &kvwire.Done{TotalTokens: end - start})}
		})
		var h kvwire.Header
		var got []kvwire.Message
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := kvwire.Fetch(ctx, srv.Addr, &req, &kvwire.FetchOptions{Checksum: true}, kvwire.Handler{
			OnHeader:      func(x *kvwire.Header) error { h = *x; return nil },
			OnChunk:       func(c *kvwire.KVChunk) error { got = append(got, kvwiretest.Clone(c)); return nil },
			OnArraysState: func(a *kvwire.ArraysState) error { got = append(got, kvwiretest.Clone(a)); return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		check(t, h, append(got, &kvwire.Done{TotalTokens: end - start}), want)
	})

	t.Run("DuetServerExoClient", func(t *testing.T) {
		want := hybridStream(start, end, true)
		srv, err := kvwire.NewServer(kvwire.ServerConfig{Dispatch: func(j *kvwire.Job) {
			go func() {
				w, err := j.Accept()
				if err != nil {
					return
				}
				_ = w.Header(kvwire.Header{RequestID: j.Request.RequestID, ModelID: j.Request.ModelID, NumLayers: 4,
					DType: kvwire.BFloat16, StartPos: j.Request.StartPos})
				for _, m := range want {
					switch m := m.(type) {
					case *kvwire.KVChunk:
						_ = w.Chunk(*m, nil)
					case *kvwire.ArraysState:
						_ = w.ArraysState(*m)
					}
				}
				_ = w.Done(len(j.Request.TokenIDs) - j.Request.StartPos)
			}()
		}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := kvwiretest.PlainFetch(ctx, ln.Addr().String(), req)
		if err != nil {
			t.Fatal(err)
		}
		check(t, resp.Header, resp.Messages, want)
	})
}
