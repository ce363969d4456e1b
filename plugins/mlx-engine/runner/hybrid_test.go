package runner_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// The tests here run the runner's policy for models with linear-attention layers (docs/hybrid-design.md §3.4,
// §4) on stateModel, which keeps the backend contract of such layers: snapshots on the grid and at a prompt's
// end, prefix-cache hits at those cuts, and the KV wire's arrays_state in both directions with duet and exo-shaped
// peers.

func stateNode(t *testing.T, serve bool, prefixBytes int64, every int) (*node, *stateModel) {
	t.Helper()
	m := newStateModel()
	return newModelNode(t, m, stateModelFP, serve, runner.Config{PrefillChunk: 16, PrefillChunkIdle: 16,
		PrefixCacheBytes: prefixBytes, StateSnapshotEvery: every}), m
}

func exoFetch(t *testing.T, addr string, tokens []int32, start int) kvwiretest.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kvwiretest.PlainFetch(ctx, addr, kvwire.Request{RequestID: "exo", ModelID: modelID, TokenIDs: tokens, StartPos: start})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestHybridExportToExoClient: an exo-shaped client reads from a duet server what exo's own server sends for an
// mlx-lm hybrid cache: header num_layers = every layer, kv_chunks for the attention layers only, one arrays_state
// per linear layer with ArraysCache's two arrays (conv window in the KV dtype, state in float32) describing the
// whole prompt whatever start_pos is, and done.total_tokens = n - start_pos. Duet sends the states last, in layer
// order. Repeated fetches come from the prefix cache, at its cuts (the grid, the prompt's end).
func TestHybridExportToExoClient(t *testing.T) {
	t.Parallel()
	p, m := stateNode(t, true, 64<<20, 64)
	layout := m.KVLayout()
	full := prompt(150, 61, stateVocab)
	L := len(full) - 1
	ref := refState(full[:L])
	tb := layout.LayerTokenBytes(1)
	check := func(t *testing.T, tokens []int32, ref stateRef, start int) {
		t.Helper()
		resp := exoFetch(t, p.addr, tokens, start)
		if h := resp.Header; h.NumLayers != layout.NumLayers() || h.DType != kvwire.BFloat16 || h.StartPos != start {
			t.Fatalf("start %d: header %+v, want %d layers of bfloat16", start, h, layout.NumLayers())
		}
		kv := make([][2][]byte, layout.NumLayers())
		var states []int
		done := false
		for _, msg := range resp.Messages {
			switch msg := msg.(type) {
			case *kvwire.KVChunk:
				if layout.Layers[msg.LayerIdx].Kind == backend.KVLinear || len(states) > 0 {
					t.Fatalf("start %d: kv_chunk for layer %d (after the states of %v)", start, msg.LayerIdx, states)
				}
				kv[msg.LayerIdx][0] = append(kv[msg.LayerIdx][0], msg.Keys...)
				kv[msg.LayerIdx][1] = append(kv[msg.LayerIdx][1], msg.Values...)
			case *kvwire.ArraysState:
				ly := layout.Layers[msg.LayerIdx]
				if ly.Kind != backend.KVLinear {
					t.Fatalf("start %d: arrays_state for attention layer %d", start, msg.LayerIdx)
				}
				states = append(states, msg.LayerIdx)
				want := []kvwire.TensorBlob{
					{DType: kvwire.BFloat16, Shape: []int{1, stateConvK - 1, 4}, Data: ref.arrays[msg.LayerIdx][0]},
					{DType: kvwire.Float32, Shape: []int{1, 2, 2, 2}, Data: ref.arrays[msg.LayerIdx][1]},
				}
				if !slices.EqualFunc(msg.Arrays, want, func(a, b kvwire.TensorBlob) bool {
					return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && slices.Equal(a.Data, b.Data)
				}) {
					t.Errorf("start %d layer %d: arrays %+v, want the state after the whole prompt %+v", start, msg.LayerIdx, msg.Arrays, want)
				}
			case *kvwire.Done:
				done = true
				if msg.TotalTokens != len(tokens)-start {
					t.Errorf("start %d: done.total_tokens %d, want %d", start, msg.TotalTokens, len(tokens)-start)
				}
			case *kvwire.Error:
				t.Fatalf("start %d: error %d: %s", start, msg.Code, msg.Message)
			}
		}
		if !done || !slices.Equal(states, []int{0, 2}) {
			t.Fatalf("start %d: done %v, states of layers %v, want 0 and 2", start, done, states)
		}
		for i, ly := range layout.Layers {
			if ly.Kind == backend.KVLinear {
				continue
			}
			if !slices.Equal(kv[i][0], ref.kv[i][0][start*tb:]) || !slices.Equal(kv[i][1], ref.kv[i][1][start*tb:]) {
				t.Errorf("start %d layer %d: %d positions, want [%d, %d) of the reference", start, i, len(kv[i][0])/tb, start, len(tokens))
			}
		}
	}
	for _, start := range []int{0, 40, L} {
		before := m.positions.Load()
		check(t, full[:L], ref, start)
		if computed := m.positions.Load() - before; (start == 0) != (computed == int64(L)) {
			t.Errorf("start %d: computed %d positions; only the first fetch computes, the others hit the prefix cache", start, computed)
		}
	}
	// Another prompt sharing 140 positions hits the snapshot on the grid at 128 and computes the rest.
	other := append(slices.Clone(full[:140]), prompt(20, 62, stateVocab)...)
	before := m.positions.Load()
	check(t, other, refState(other), 100)
	if computed := m.positions.Load() - before; computed != int64(len(other)-128) {
		t.Errorf("a prompt sharing 140 positions computed %d, want %d (from the grid's cut at 128)", computed, len(other)-128)
	}
}

// TestHybridPDExact: remote prefill between duet runners gives a local prefill's tokens at start_pos 0 and > 0
// (a decode-side prefix-cache hit at a prompt's end); n > 1 choices fork from the prefilled prompt exactly.
func TestHybridPDExact(t *testing.T) {
	t.Parallel()
	ref, _ := stateNode(t, false, 0, 0)
	p, _ := stateNode(t, true, 0, 0)
	d, _ := stateNode(t, false, 64<<20, 0)
	long := prompt(100, 71, stateVocab)
	pdExactAtStarts(t, ref, p, d, long, prompt(40, 72, stateVocab), prompt(60, 73, stateVocab), 16)
	seed := int64(5)
	all := d.gen(t, long, 12, 3, &seed, d.remote(p.addr))
	for i := range 3 {
		s := seed + int64(i)
		one := ref.gen(t, long, 12, 1, &s, nil)
		if !slices.Equal(all.tokens[i], one.tokens[0]) {
			t.Errorf("choice %d: %v, want %v", i, all.tokens[i], one.tokens[0])
		}
	}
}

// TestHybridPrefixCache: a chat's next turn hits the previous prompt's end even when the template rewrote the
// answer, the whole previous sequence when it did not, and the grid inside a long shared prompt; a prefix between
// cuts is a shorter hit, never a wrong state.
func TestHybridPrefixCache(t *testing.T) {
	t.Parallel()
	ref, _ := stateNode(t, false, 0, 0)
	d, _ := stateNode(t, false, 64<<20, 64)
	turn1 := prompt(150, 81, stateVocab)
	answer := d.gen(t, turn1, 8, 1, nil, nil).tokens[0]
	if len(answer) != 8 {
		t.Fatalf("answer %v", answer)
	}
	for _, tc := range []struct {
		name   string
		prompt []int32
		cached int
	}{
		{"the prompt, another answer", append(slices.Clone(turn1), prompt(20, 82, stateVocab)...), 150},
		{"the whole sequence", append(append(slices.Clone(turn1), answer[:7]...), prompt(20, 83, stateVocab)...), 157},
		{"part of the answer: the prompt's end", append(append(slices.Clone(turn1), answer[:3]...), prompt(20, 84, stateVocab)...), 150},
		{"inside the prompt: the grid", append(slices.Clone(turn1[:140]), prompt(20, 85, stateVocab)...), 128},
		{"before the first grid point", append(slices.Clone(turn1[:50]), prompt(20, 86, stateVocab)...), 0},
	} {
		want := ref.gen(t, tc.prompt, 8, 1, nil, nil)
		got := d.gen(t, tc.prompt, 8, 1, nil, nil)
		if c := got.final.Usage.CachedTokens; c != tc.cached {
			t.Errorf("%s: %d cached tokens, want %d", tc.name, c, tc.cached)
		}
		if !slices.Equal(got.tokens[0], want.tokens[0]) {
			t.Errorf("%s: %v, want %v", tc.name, got.tokens[0], want.tokens[0])
		}
	}
}

// exoHybrid is an exo-shaped server for stateModel: it sends each layer in layer order (a linear layer's state
// before the next attention layer's chunks), as exo's send_mlx_kv_cache does; edit changes the messages.
func exoHybrid(t *testing.T, conv, state kvwire.DType, edit func([]kvwire.Message) []kvwire.Message) *kvwiretest.PlainServer {
	layout := newStateModel().KVLayout()
	return kvwiretest.NewPlainServer(t, func(req kvwire.Request) kvwiretest.Response {
		ref := refState(req.TokenIDs)
		resp := kvwiretest.Response{Header: kvwire.Header{RequestID: req.RequestID, ModelID: req.ModelID,
			NumLayers: layout.NumLayers(), DType: kvwire.BFloat16, StartPos: req.StartPos}}
		tb := layout.LayerTokenBytes(1)
		var msgs []kvwire.Message
		for i, ly := range layout.Layers {
			if ly.Kind == backend.KVLinear {
				msgs = append(msgs, &kvwire.ArraysState{LayerIdx: i, Arrays: stateBlobs(ly, ref.arrays[i], conv, state)})
				continue
			}
			k, v := ref.kv[i][0][req.StartPos*tb:], ref.kv[i][1][req.StartPos*tb:]
			msgs = append(msgs, &kvwire.KVChunk{LayerIdx: i, NumTokens: len(k) / tb, NHeads: ly.KVHeads, HeadDim: ly.HeadDim,
				DType: kvwire.BFloat16, Keys: k, Values: v})
		}
		if edit != nil {
			msgs = edit(msgs)
		}
		resp.Messages = append(msgs, &kvwire.Done{TotalTokens: len(req.TokenIDs) - req.StartPos})
		return resp
	})
}

// TestHybridExoServerToDuet: a duet decoder imports an exo-shaped server's states, sent in layer order between the
// chunks, exactly at start_pos 0 and > 0, also when the conv window comes in float32 and the state in float16;
// misplaced, duplicated, misshapen or missing states are refused with a reason and the decoder prefills locally
// from where its cache was, exactly.
func TestHybridExoServerToDuet(t *testing.T) {
	t.Parallel()
	ref, _ := stateNode(t, false, 0, 0)
	head := prompt(40, 91, stateVocab)
	full := append(slices.Clone(head), prompt(60, 92, stateVocab)...)
	want := ref.gen(t, full, 16, 1, nil, nil)
	run := func(t *testing.T, srv *kvwiretest.PlainServer, fallback string) {
		t.Helper()
		for _, start := range []int{0, 40} {
			d, _ := stateNode(t, false, 64<<20, 0)
			if start > 0 {
				d.gen(t, head, 1, 1, nil, nil)
			}
			got := d.gen(t, full, 16, 1, nil, d.remote(srv.Addr))
			rp := got.final.Timings.Remote
			switch {
			case fallback == "":
				wantRemote(t, "exo server", got)
			case rp == nil || !strings.Contains(rp.FallbackReason, fallback):
				t.Errorf("start %d: %+v, want a fallback naming %q", start, rp, fallback)
			}
			if c := got.final.Usage.CachedTokens; c != start {
				t.Errorf("start %d: %d cached tokens", start, c)
			}
			if !slices.Equal(got.tokens[0], want.tokens[0]) {
				t.Errorf("start %d: %v, want %v", start, got.tokens[0], want.tokens[0])
			}
		}
	}
	t.Run("LayerOrder", func(t *testing.T) { run(t, exoHybrid(t, kvwire.BFloat16, kvwire.Float32, nil), "") })
	t.Run("OtherDTypes", func(t *testing.T) { run(t, exoHybrid(t, kvwire.Float32, kvwire.Float16, nil), "") })
	states := func(msgs []kvwire.Message) (out []*kvwire.ArraysState) {
		for _, m := range msgs {
			if a, ok := m.(*kvwire.ArraysState); ok {
				out = append(out, a)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name, reason string
		edit         func([]kvwire.Message) []kvwire.Message
	}{
		{"ChunkForLinearLayer", "layer 0: a kv_chunk came for a linear-attention layer", func(msgs []kvwire.Message) []kvwire.Message {
			c := *msgs[1].(*kvwire.KVChunk)
			c.LayerIdx = 0
			return append(msgs, &c)
		}},
		{"StateForAttentionLayer", "layer 1: an arrays_state came for a full attention layer", func(msgs []kvwire.Message) []kvwire.Message {
			a := *states(msgs)[0]
			a.LayerIdx = 1
			return append(msgs, &a)
		}},
		{"SecondState", "layer 2: a second arrays_state", func(msgs []kvwire.Message) []kvwire.Message {
			return append(msgs, states(msgs)[1])
		}},
		{"OtherShape", "array 0 has shape [1 4 2], want [1 2 4]", func(msgs []kvwire.Message) []kvwire.Message {
			states(msgs)[0].Arrays[0].Shape = []int{1, 4, 2}
			return msgs
		}},
		{"ThreeArrays", "arrays_state holds 3 arrays, want 2", func(msgs []kvwire.Message) []kvwire.Message {
			a := states(msgs)[1]
			a.Arrays = append(a.Arrays, a.Arrays[0])
			return msgs
		}},
		{"MissingState", "layer 2: no arrays_state came", func(msgs []kvwire.Message) []kvwire.Message {
			return slices.DeleteFunc(msgs, func(m kvwire.Message) bool { a, ok := m.(*kvwire.ArraysState); return ok && a.LayerIdx == 2 })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, exoHybrid(t, kvwire.BFloat16, kvwire.Float32, tc.edit), tc.reason) })
	}
}

// TestHybridCancelledPrefill: a request cancelled while its prompt is prefilled leaves its cache in the prefix cache
// at a position it can cut (its live state), and a next prompt continues from there exactly.
func TestHybridCancelledPrefill(t *testing.T) {
	t.Parallel()
	ref, _ := stateNode(t, false, 0, 0)
	d, _ := stateNode(t, false, 64<<20, 0)
	long := prompt(300, 95, stateVocab)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := d.r.Generate(ctx, runner.Request{ID: "c", Prompt: long, MaxTokens: 1000}, func(ev engine.Event) error {
		if ev.Progress != nil {
			cancel() // at the first chunk: the loop ends the sequence at a step boundary
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := ref.gen(t, long, 12, 1, nil, nil)
	got := d.gen(t, long, 12, 1, nil, nil)
	if c := got.final.Usage.CachedTokens; c == 0 {
		t.Errorf("no cached tokens after a cancelled prefill")
	}
	if !slices.Equal(got.tokens[0], want.tokens[0]) {
		t.Errorf("after a cancelled prefill: %v, want %v", got.tokens[0], want.tokens[0])
	}
}
