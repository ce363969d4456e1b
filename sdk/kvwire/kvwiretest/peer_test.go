package kvwiretest_test

import (
	"context"
	"errors"
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
