package runner_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/plugins/mlx-engine/sampling"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// The tests here run runners in-process on the pure-Go backend with a model whose windows are set by hand
// (backendtest.SetWindows), two of them different: windows of 8 and 5 on two of four layers, so 64-token prompts
// cross them. The engine's P/D tests run Gemma 3, a family with windows, between engine processes.
var windows = []int{8, 0, 5, 0}

const modelID = "windowed"

func windowedModel(t *testing.T) *model.Model {
	t.Helper()
	return backendtest.GenerateWindowed(t, backendtest.Tiny(func(o *modelgen.Options) {
		o.NumLayers, o.DType = 4, dtype.BFloat16
	}), windows...)
}

type nopTokenizer struct{}

func (nopTokenizer) NewStream(bool) runner.TextStream { return nopStream{} }
func (nopTokenizer) TokenText(int32) (string, []byte) { return "", nil }

type nopStream struct{}

func (nopStream) Add(int32) string { return "" }
func (nopStream) Flush() string    { return "" }

// node is one engine: a runner over its own copy of the model, with a KV wire server when it prefills for
// others.
type node struct {
	r    *runner.Runner
	m    backend.Model
	fp   string
	addr string
}

func newNode(t *testing.T, mod *model.Model, chunk int, prefixBytes int64, serve bool) *node {
	t.Helper()
	bm := backendtest.Load(t, cpu.Backend{}, mod, backend.Options{PrefillChunk: chunk})
	return newModelNode(t, bm, mod.Fingerprint(), serve,
		runner.Config{PrefillChunk: chunk, PrefillChunkIdle: chunk, PrefixCacheBytes: prefixBytes})
}

// newModelNode is newNode for a loaded model (fingerprint fp) and a runner configured by cfg.
func newModelNode(t *testing.T, bm backend.Model, fp string, serve bool, cfg runner.Config) *node {
	t.Helper()
	cfg.Model, cfg.Tokenizer = bm, nopTokenizer{}
	n := &node{m: bm, fp: fp, r: runner.New(cfg)}
	t.Cleanup(n.r.Close)
	if serve {
		srv, err := kvwire.NewServer(kvwire.ServerConfig{Dispatch: func(j *kvwire.Job) {
			if !n.r.SubmitExport(j, n.fp, "") {
				_ = j.Reject(kvwire.CodeBusy, "busy")
			}
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
		n.addr = ln.Addr().String()
	}
	return n
}

func (n *node) remote(addrs ...string) *runner.Remote {
	rm := &runner.Remote{Threshold: 1, ModelID: modelID, Fingerprint: n.fp, Timeout: 30 * time.Second, FrameTimeout: 10 * time.Second}
	for _, a := range addrs {
		rm.Endpoints = append(rm.Endpoints, engine.PrefillEndpoint{Address: a})
	}
	return rm
}

type result struct {
	tokens [][]int32 // per choice
	final  *engine.Final
}

// gen generates up to max tokens for prompt: greedily, or with seed when it is not nil.
func (n *node) gen(t *testing.T, prompt []int32, max, choices int, seed *int64, rm *runner.Remote) result {
	t.Helper()
	res := result{tokens: make([][]int32, choices)}
	p := sampling.Params{}
	if seed != nil {
		p.Temperature, p.Seed = 1, seed
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := n.r.Generate(ctx, runner.Request{ID: "w", Prompt: prompt, Sampling: p, MaxTokens: max, N: choices, Remote: rm},
		func(ev engine.Event) error {
			if ev.Token != nil {
				res.tokens[ev.Choice] = append(res.tokens[ev.Choice], ev.Token.ID)
			}
			if ev.Final != nil {
				if ev.Final.FinishReason == engine.FinishError {
					t.Errorf("choice %d failed: %s", ev.Choice, ev.Final.Error)
				}
				if ev.Choice == 0 {
					res.final = ev.Final
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func prompt(n, seed int, vocab int) []int32 { return backendtest.Prompt(n, vocab, seed) }

// pdExactAtStarts checks what a decode node d fetching from a prefill node p computes against ref, a node that
// prefills locally: long remote at start_pos 0, then head answered locally with one token (so d's prefix cache
// ends at len(head)) and head+tail remote at start_pos len(head); the greedy tokens (steps of them) are ref's.
func pdExactAtStarts(t *testing.T, ref, p, d *node, long, head, tail []int32, steps int) {
	t.Helper()
	want := ref.gen(t, long, steps, 1, nil, nil)
	got := d.gen(t, long, steps, 1, nil, d.remote(p.addr))
	wantRemote(t, "start_pos 0", got)
	if !slices.Equal(got.tokens[0], want.tokens[0]) {
		t.Errorf("start_pos 0: %v, want %v", got.tokens[0], want.tokens[0])
	}
	d.gen(t, head, 1, 1, nil, nil)
	next := append(slices.Clone(head), tail...)
	s := len(head)
	want = ref.gen(t, next, steps, 1, nil, nil)
	got = d.gen(t, next, steps, 1, nil, d.remote(p.addr))
	wantRemote(t, fmt.Sprintf("start_pos %d", s), got)
	if c := got.final.Usage.CachedTokens; c != s {
		t.Errorf("start_pos %d: %d cached tokens, want %d", s, c, s)
	}
	if !slices.Equal(got.tokens[0], want.tokens[0]) {
		t.Errorf("start_pos %d: %v, want %v", s, got.tokens[0], want.tokens[0])
	}
}

func wantRemote(t *testing.T, name string, r result) {
	t.Helper()
	rp := r.final.Timings.Remote
	if rp == nil || rp.FallbackReason != "" {
		t.Errorf("%s: not prefilled remotely: %+v", name, rp)
	}
}

// TestWindowPDExact: remote prefill of a sliding-window model gives the tokens of a local prefill, with prefill
// chunks shorter and longer than the windows on either side, at start_pos 0 and > 0 (a prefix the decode side
// holds).
func TestWindowPDExact(t *testing.T) {
	t.Parallel()
	mod := windowedModel(t)
	ref := newNode(t, mod, 64, 0, false)
	vocab := mod.Config.VocabSize
	for _, tc := range []struct {
		name                   string
		prefillChunk, decChunk int
	}{
		{"chunks shorter than the windows", 3, 4},
		{"chunks longer than the windows", 32, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newNode(t, mod, tc.prefillChunk, 0, true)
			d := newNode(t, mod, tc.decChunk, 64<<20, false)
			// The decode side holds the first 40 positions (a prompt it answered with one token, so its cache
			// ends there): the next prompt extends it and fetches [40, L).
			pdExactAtStarts(t, ref, p, d, prompt(100, 21, vocab), prompt(40, 22, vocab), prompt(60, 23, vocab), 16)
		})
	}
}

// TestWindowPrefixCache: a cached sequence whose windows have moved past the shared prefix is no hit; the
// snapshot of a prompt's KV taken after its prefill is, for a next prompt that shares the prompt but not the
// answer; the longest restorable prefix wins over a longer unrestorable one; every case gives a local
// prefill's tokens. n > 1 choices fork from the prefilled prompt exactly.
func TestWindowPrefixCache(t *testing.T) {
	t.Parallel()
	mod := windowedModel(t)
	vocab := mod.Config.VocabSize
	ref := newNode(t, mod, 64, 0, false)
	d := newNode(t, mod, 16, 64<<20, false)
	a := prompt(40, 31, vocab)
	// Cached: a's snapshot (windows at 40) and a with 15 generated tokens (windows at 55).
	answer := d.gen(t, a, 16, 1, nil, nil).tokens[0]
	for _, tc := range []struct {
		name   string
		prompt []int32
		cached int
	}{
		// 38 shared: a query at 38 sees [31, 38], which the snapshot's window of 8, [32, 40), lacks.
		{"inside the prompt's windows", append(slices.Clone(a[:38]), prompt(30, 32, vocab)...), 0},
		{"the prompt, another answer", append(slices.Clone(a), prompt(30, 33, vocab)...), 40},
		// 45 shared with the generation's entry, whose windows are at 55: the snapshot's 40 instead.
		{"part of the answer", append(append(slices.Clone(a), answer[:5]...), prompt(30, 34, vocab)...), 40},
		{"the whole sequence", append(append(slices.Clone(a), answer[:15]...), prompt(30, 35, vocab)...), 55},
	} {
		want := ref.gen(t, tc.prompt, 12, 1, nil, nil)
		got := d.gen(t, tc.prompt, 12, 1, nil, nil)
		if c := got.final.Usage.CachedTokens; c != tc.cached {
			t.Errorf("%s: %d cached tokens, want %d", tc.name, c, tc.cached)
		}
		if !slices.Equal(got.tokens[0], want.tokens[0]) {
			t.Errorf("%s: %v, want %v", tc.name, got.tokens[0], want.tokens[0])
		}
	}
	b := append(slices.Clone(a), prompt(30, 33, vocab)...)
	// n > 1: choice i draws with seed+i from a copy of the prompt's KV, as a single request with that seed does.
	forks := newNode(t, mod, 16, 0, false)
	seed := int64(7)
	all := forks.gen(t, b, 12, 3, &seed, nil)
	for i := range 3 {
		s := seed + int64(i)
		one := ref.gen(t, b, 12, 1, &s, nil)
		if !slices.Equal(all.tokens[i], one.tokens[0]) {
			t.Errorf("choice %d: %v, want %v", i, all.tokens[i], one.tokens[0])
		}
	}
}

// refKV computes the KV of tokens on a cache of its own and exports what every layer holds at the end: [0, n)
// for full layers, the last W for sliding ones, with the position each starts at.
func refKV(t *testing.T, mod *model.Model, tokens []int32) (l backend.KVLayout, kv [][2][]byte, from []int) {
	t.Helper()
	bm := backendtest.Load(t, cpu.Backend{}, mod, backend.Options{})
	c := backendtest.NewCache(t, bm)
	backendtest.Forward(t, bm, c, tokens...)
	l = bm.KVLayout()
	n := len(tokens)
	for i, ly := range l.Layers {
		lo := 0
		if ly.Kind == backend.KVSliding {
			lo = max(0, n-ly.Window)
		}
		tb := l.LayerTokenBytes(i)
		k, v := make([]byte, (n-lo)*tb), make([]byte, (n-lo)*tb)
		if err := c.ExportKV(i, lo, n, k, v); err != nil {
			t.Fatal(err)
		}
		kv, from = append(kv, [2][]byte{k, v}), append(from, lo)
	}
	return l, kv, from
}

// TestWindowExoPeers: an exo-shaped server, which sends a sliding layer as the buffer its RotatingKVCache holds
// (the window at the end of the prompt, whatever start_pos asked), feeds a duet decoder exactly, at start_pos 0
// and > 0; one that sends less than the next query sees is refused and the decoder prefills locally, exactly;
// and an exo-shaped client reads a duet server's sliding layers as the positions their windows hold at the end.
func TestWindowExoPeers(t *testing.T) {
	t.Parallel()
	mod := windowedModel(t)
	vocab := mod.Config.VocabSize
	ref := newNode(t, mod, 64, 0, false)
	full := prompt(90, 41, vocab)
	L := len(full) - 1
	layout, kv, lo := refKV(t, mod, full[:L])
	// short is how many positions fewer than its window a sliding layer sends.
	exo := func(short int) *kvwiretest.PlainServer {
		return kvwiretest.NewPlainServer(t, func(req kvwire.Request) kvwiretest.Response {
			resp := kvwiretest.Response{Header: kvwire.Header{RequestID: req.RequestID, ModelID: req.ModelID,
				NumLayers: layout.NumLayers(), DType: kvwire.BFloat16, StartPos: req.StartPos}}
			for i, ly := range layout.Layers {
				from := req.StartPos
				if ly.Kind == backend.KVSliding {
					from = lo[i] + short
				}
				tb := layout.LayerTokenBytes(i)
				k, v := kv[i][0][(from-lo[i])*tb:], kv[i][1][(from-lo[i])*tb:]
				// exo sends each layer after its prefill, here in two chunks to exercise the receiver's buffering.
				half := (len(k) / tb / 2) * tb
				for _, part := range [][2]int{{0, half}, {half, len(k)}} {
					resp.Messages = append(resp.Messages, &kvwire.KVChunk{LayerIdx: i, NumTokens: (part[1] - part[0]) / tb,
						NHeads: ly.KVHeads, HeadDim: ly.HeadDim, DType: kvwire.BFloat16,
						Keys: k[part[0]:part[1]], Values: v[part[0]:part[1]]})
				}
			}
			resp.Messages = append(resp.Messages, &kvwire.Done{TotalTokens: len(req.TokenIDs) - req.StartPos})
			return resp
		})
	}
	want := ref.gen(t, full, 16, 1, nil, nil)

	t.Run("ExoServerToDuetDecoder", func(t *testing.T) {
		srv := exo(0)
		d := newNode(t, mod, 16, 0, false)
		got := d.gen(t, full, 16, 1, nil, d.remote(srv.Addr))
		wantRemote(t, "exo server", got)
		if !slices.Equal(got.tokens[0], want.tokens[0]) {
			t.Errorf("KV from an exo-shaped server: %v, want %v", got.tokens[0], want.tokens[0])
		}
		// start_pos > 0: the decoder holds the first 86 positions, so exo's windows reach below start_pos and
		// overwrite what it holds; the full layers bring [86, L).
		d = newNode(t, mod, 16, 64<<20, false)
		d.gen(t, full[:86], 1, 1, nil, nil)
		got = d.gen(t, full, 16, 1, nil, d.remote(srv.Addr))
		wantRemote(t, "exo server at start_pos 86", got)
		if got.final.Usage.CachedTokens != 86 || !slices.Equal(got.tokens[0], want.tokens[0]) {
			t.Errorf("exo server at start_pos 86: %d cached, %v, want %v", got.final.Usage.CachedTokens, got.tokens[0], want.tokens[0])
		}
	})

	t.Run("ShortWindowFallsBack", func(t *testing.T) {
		// Two positions short: the first decode query at L sees [L-W+1, L], one of which is missing.
		srv := exo(2)
		d := newNode(t, mod, 16, 0, false)
		got := d.gen(t, full, 16, 1, nil, d.remote(srv.Addr))
		rp := got.final.Timings.Remote
		if rp == nil || !strings.Contains(rp.FallbackReason, "window") {
			t.Errorf("a window short of the next query: %+v, want a fallback naming the window", rp)
		}
		if !slices.Equal(got.tokens[0], want.tokens[0]) {
			t.Errorf("after the fallback: %v, want %v", got.tokens[0], want.tokens[0])
		}
	})

	t.Run("ExoClientFromDuetServer", func(t *testing.T) {
		for _, chunk := range []int{3, 32} {
			p := newNode(t, mod, chunk, 0, true)
			for _, start := range []int{0, 40, 85} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := kvwiretest.PlainFetch(ctx, p.addr, kvwire.Request{RequestID: "exo", ModelID: modelID, TokenIDs: full[:L], StartPos: start})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if h := resp.Header; h.NumLayers != layout.NumLayers() || h.StartPos != start {
					t.Fatalf("header %+v", h)
				}
				got := make([][2][]byte, layout.NumLayers())
				for _, m := range resp.Messages {
					switch m := m.(type) {
					case *kvwire.KVChunk:
						got[m.LayerIdx][0] = append(got[m.LayerIdx][0], m.Keys...)
						got[m.LayerIdx][1] = append(got[m.LayerIdx][1], m.Values...)
					case *kvwire.Done:
						if m.TotalTokens != L-start {
							t.Errorf("chunk %d start %d: done.total_tokens %d, want %d (exo's: the prompt less start_pos)", chunk, start, m.TotalTokens, L-start)
						}
					case *kvwire.Error:
						t.Fatalf("error %d: %s", m.Code, m.Message)
					}
				}
				for i, ly := range layout.Layers {
					from := start
					if ly.Kind == backend.KVSliding {
						from = max(start, L-ly.Window)
					}
					tb := layout.LayerTokenBytes(i)
					wantK, wantV := kv[i][0][(from-lo[i])*tb:], kv[i][1][(from-lo[i])*tb:]
					if !slices.Equal(got[i][0], wantK) || !slices.Equal(got[i][1], wantV) {
						t.Errorf("chunk %d start %d layer %d: got %d positions, want [%d, %d) of the reference", chunk, start, i, len(got[i][0])/tb, from, L)
					}
				}
			}
		}
	})
}

// TestWindowExportFromPrefixCache: a prefill server's prefix cache serves an export of a sliding-window model
// only where it still holds the W positions each sliding layer sends, [L-W, L): its snapshot of the prompt
// itself does, a snapshot one position further on (the prompt the decoder sent, whose token_ids lack its last
// token) does not and is a miss, and a hit short of L computes the rest; every case sends the reference's KV.
func TestWindowExportFromPrefixCache(t *testing.T) {
	t.Parallel()
	mod := windowedModel(t)
	vocab := mod.Config.VocabSize
	full := prompt(90, 51, vocab)
	L := len(full) - 1
	layout, kv, lo := refKV(t, mod, full[:L])
	for _, tc := range []struct {
		name   string
		cached []int32 // the prompt the server answered first
		hit    bool
	}{
		{"snapshot one position past the export", full, false},
		{"snapshot at the export's end", full[:L], true},
		{"snapshot short of the export's end", full[:L-3], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newNode(t, mod, 16, 64<<20, true)
			p.gen(t, tc.cached, 1, 1, nil, nil)
			before := p.r.Stats().PrefixCache.Hits
			for _, start := range []int{0, 60} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := kvwiretest.PlainFetch(ctx, p.addr, kvwire.Request{RequestID: "exo", ModelID: modelID, TokenIDs: full[:L], StartPos: start})
				cancel()
				if err != nil {
					t.Fatalf("start %d: %v", start, err)
				}
				got := make([][2][]byte, layout.NumLayers())
				for _, m := range resp.Messages {
					if c, ok := m.(*kvwire.KVChunk); ok {
						got[c.LayerIdx][0] = append(got[c.LayerIdx][0], c.Keys...)
						got[c.LayerIdx][1] = append(got[c.LayerIdx][1], c.Values...)
					}
				}
				for i, ly := range layout.Layers {
					from := start
					if ly.Kind == backend.KVSliding {
						from = max(start, L-ly.Window)
					}
					tb := layout.LayerTokenBytes(i)
					if !slices.Equal(got[i][0], kv[i][0][(from-lo[i])*tb:]) || !slices.Equal(got[i][1], kv[i][1][(from-lo[i])*tb:]) {
						t.Errorf("start %d layer %d: %d positions, want [%d, %d) of the reference", start, i, len(got[i][0])/tb, from, L)
					}
				}
			}
			if hits := p.r.Stats().PrefixCache.Hits - before; (hits > 0) != tc.hit {
				t.Errorf("%d prefix-cache hits, want hits %v", hits, tc.hit)
			}
		})
	}
}
