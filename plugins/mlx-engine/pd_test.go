package mlxengine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// The disaggregated-prefill tests run engines as real plugin subprocesses (this test binary re-executed, see
// TestMain) talking KV wire over loopback, and check the one property that matters: for greedy decoding, a
// request whose prompt was prefilled by another engine produces exactly the tokens of a local one.

// pdModels are generated once per test binary.
var (
	pdModelsOnce sync.Once
	pdModelsDir  string
	pdModelsErr  error
)

func pdModel(t testing.TB, name string) string {
	t.Helper()
	pdModelsOnce.Do(func() {
		pdModelsDir, pdModelsErr = os.MkdirTemp("", "duet-pd-models-")
		if pdModelsErr != nil {
			return
		}
		variants := map[string]modelgen.Options{}
		base := modelgen.Tiny()
		base.DType = dtype.BFloat16
		variants["llama-bf16"] = base
		q := modelgen.Tiny()
		q.Family, q.DType = model.Qwen3, dtype.BFloat16
		q.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		variants["qwen3-q4"] = q
		other := base
		other.Seed = 99
		variants["llama-other"] = other
		q8 := base // the same base model, quantized: same KVCompat, another fingerprint
		q8.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 32}
		variants["llama-q8"] = q8
		// A mixture of experts as mlx-community stores it: stacked 4-bit experts, 8 of them with 3 per token, a
		// routing tie in every token and a dense layer among the sparse ones.
		moe := modelgen.Tiny()
		moe.Family, moe.DType, moe.Layout = model.Qwen3MoE, dtype.BFloat16, modelgen.LayoutMLX
		moe.NumExperts, moe.TopK, moe.NormTopK, moe.RouterTies = 8, 3, true, true
		moe.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		variants["qwen3_moe-q4"] = moe
		// And one stored per expert (Hugging Face names), with qwen2_moe's gated shared expert.
		moe2 := modelgen.Tiny()
		moe2.Family, moe2.DType, moe2.SparseStep = model.Qwen2MoE, dtype.BFloat16, 1
		variants["qwen2_moe-bf16"] = moe2
		// Gemma 3 (windows of 8 on two layers in three): the multimodal family as mlx-community stores it, 4-bit,
		// and the text-only family in bfloat16 with Hugging Face names.
		g := modelgen.TinyFamily(model.Gemma3)
		g.DType, g.Layout = dtype.BFloat16, modelgen.LayoutMLX
		g.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		variants["gemma3-q4"] = g
		gt := modelgen.TinyFamily(model.Gemma3Text)
		gt.DType = dtype.BFloat16
		variants["gemma3_text-bf16"] = gt
		// gpt-oss as openai ships it (fused interleaved mxfp4 experts with biases, sinks, yarn), with windows
		// of 8 on every other layer: every prompt here is several windows long.
		oss := modelgen.TinyFamily(model.GptOSS)
		oss.DType, oss.ExpertsMXFP4 = dtype.BFloat16, true
		variants["gpt_oss-mxfp4"] = oss
		// The hybrids (Gated DeltaNet layers, two full-attention layers in six): qwen3_next in bfloat16 with Hugging
		// Face names, qwen3_5_moe 4-bit as mlx-community stores it.
		next := modelgen.TinyFamily(model.Qwen3Next)
		next.DType = dtype.BFloat16
		variants["qwen3_next-bf16"] = next
		q35 := modelgen.TinyFamily(model.Qwen35MoE)
		q35.DType, q35.Layout = dtype.BFloat16, modelgen.LayoutMLX
		q35.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		variants["qwen3_5_moe-q4"] = q35
		for name, o := range variants {
			if pdModelsErr = modelgen.Generate(filepath.Join(pdModelsDir, name), o); pdModelsErr != nil {
				return
			}
		}
	})
	if pdModelsErr != nil {
		t.Fatal(pdModelsErr)
	}
	return filepath.Join(pdModelsDir, name)
}

// proc is an engine plugin subprocess with one loaded instance.
type proc struct {
	e    engine.Engine
	pid  int
	desc engine.Description
	kill func()
}

func startEngine(t testing.TB, modelDir string, opts map[string]string) *proc {
	t.Helper()
	return startEngineCmd(t, enginetest.PluginCommand(t), modelDir, opts)
}

// startEngineCmd is startEngine with the plugin's command given: another binary than this test's.
func startEngineCmd(t testing.TB, cmd *exec.Cmd, modelDir string, opts map[string]string) *proc {
	t.Helper()
	cfg := engine.ClientConfig()
	cfg.Cmd = cmd
	cfg.AutoMTLS = true
	cfg.Logger = hclog.NewNullLogger()
	e, pc, err := engine.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Kill)
	desc, err := e.Load(context.Background(), engine.LoadRequest{Model: modelDir, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return &proc{e: e, pid: pc.ReattachConfig().Pid, desc: desc, kill: pc.Kill}
}

func (p *proc) endpoint() engine.PrefillEndpoint {
	return engine.PrefillEndpoint{InstanceID: p.desc.InstanceID, Address: p.desc.PrefillEndpoint}
}

// gen runs a greedy generation and returns its tokens and final event.
func gen(t testing.TB, p *proc, prompt []int32, eps ...engine.PrefillEndpoint) ([]int32, *engine.Final) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var toks []int32
	var fin *engine.Final
	err := p.e.Generate(ctx, engine.GenerateRequest{InstanceID: p.desc.InstanceID, PromptTokens: prompt, PrefillEndpoints: eps,
		Sampling: engine.Sampling{MaxTokens: 24, IgnoreEOS: true}}, func(ev engine.Event) error {
		if ev.Token != nil {
			toks = append(toks, ev.Token.ID)
		}
		if ev.Final != nil {
			fin = ev.Final
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if fin.FinishReason == engine.FinishError {
		t.Fatalf("generation failed: %s", fin.Error)
	}
	return toks, fin
}

func randomPrompt(seed uint64, n, vocab int) []int32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(3 + rng.IntN(vocab-3))
	}
	return out
}

func sameTokens(t testing.TB, what string, got, want []int32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tokens, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: token %d is %d, want %d\n got %v\nwant %v", what, i, got[i], want[i], got, want)
		}
	}
}

func wantRemote(t testing.TB, f *engine.Final, endpoint string) {
	t.Helper()
	r := f.Timings.Remote
	if f.Timings.PrefillSource != engine.PrefillRemote || r == nil || r.Bytes == 0 || r.FallbackReason != "" {
		t.Fatalf("prefill source %q, remote %+v; want a remote prefill", f.Timings.PrefillSource, r)
	}
	if endpoint != "" && r.Endpoint != endpoint {
		t.Errorf("prefilled by %s, want %s", r.Endpoint, endpoint)
	}
}

func wantFallback(t testing.TB, f *engine.Final, reason string) {
	t.Helper()
	r := f.Timings.Remote
	if f.Timings.PrefillSource != engine.PrefillLocal || r == nil || r.FallbackReason == "" {
		t.Fatalf("prefill source %q, remote %+v; want a local fallback", f.Timings.PrefillSource, r)
	}
	if !strings.Contains(r.FallbackReason, reason) {
		t.Errorf("fallback reason %q does not mention %q", r.FallbackReason, reason)
	}
}

// decodeOpts are the options of a decode engine in these tests: remote prefill from 16 uncached tokens on.
func decodeOpts(extra ...string) map[string]string {
	o := map[string]string{"remote_prefill_threshold": "16", "kv_frame_timeout": "30s", "remote_prefill_timeout": "60s"}
	for i := 0; i+1 < len(extra); i += 2 {
		o[extra[i]] = extra[i+1]
	}
	return o
}

func prefillOpts(extra ...string) map[string]string {
	o := map[string]string{"kv_listen": "127.0.0.1:0"}
	for i := 0; i+1 < len(extra); i += 2 {
		o[extra[i]] = extra[i+1]
	}
	return o
}

func TestPDExact(t *testing.T) {
	for _, name := range []string{"llama-bf16", "qwen3-q4", "qwen3_moe-q4", "qwen2_moe-bf16", "gemma3-q4", "gemma3_text-bf16", "gpt_oss-mxfp4", "qwen3_next-bf16", "qwen3_5_moe-q4"} {
		t.Run(name, func(t *testing.T) {
			dir := pdModel(t, name)
			ref := startEngine(t, dir, map[string]string{"prefix_cache_mb": "0"})
			p := startEngine(t, dir, prefillOpts())
			d := startEngine(t, dir, decodeOpts())
			vocab := d.desc.VocabSize

			t.Run("FreshPrompts", func(t *testing.T) {
				for i, n := range []int{17, 100, 700} {
					prompt := randomPrompt(uint64(i), n, vocab)
					want, _ := gen(t, ref, prompt)
					got, f := gen(t, d, prompt, p.endpoint())
					sameTokens(t, fmt.Sprintf("%d-token prompt", n), got, want)
					wantRemote(t, f, p.desc.PrefillEndpoint)
					if f.Timings.Remote.Tokens != n-1 {
						t.Errorf("%d tokens came over the wire, want %d", f.Timings.Remote.Tokens, n-1)
					}
				}
			})

			// A sliding layer's window moves on with its sequence, so a cached sequence serves only prefixes that
			// end inside its window ("where a window cannot be restored, a miss"): with windows, the cached
			// prompt is the shared prefix itself, whose snapshot holds the window at its end.
			windowed := strings.HasPrefix(name, "gemma3") || strings.HasPrefix(name, "gpt_oss")
			// A hybrid's cache cuts only at its snapshots (the grid of 256 here, a prompt's end): a decode-side hit
			// inside a cached prompt is one only at a prompt's end, so the cached prompt is the shared prefix too.
			hybrid := strings.HasPrefix(name, "qwen3_next") || strings.HasPrefix(name, "qwen3_5")

			t.Run("DecodeSidePrefixHit", func(t *testing.T) {
				a := randomPrompt(100, 400, vocab)
				if windowed || hybrid {
					a = a[:250]
				}
				gen(t, d, a) // local: d's prefix cache now holds a
				b := append(append([]int32{}, a[:250]...), randomPrompt(101, 300, vocab)...)
				want, _ := gen(t, ref, b)
				got, f := gen(t, d, b, p.endpoint())
				sameTokens(t, "prompt sharing 250 tokens with a cached one", got, want)
				wantRemote(t, f, "")
				cached := 250
				if f.Usage.CachedTokens != cached || f.Timings.Remote.Tokens != len(b)-1-cached {
					t.Errorf("cached %d, remote %d; want %d cached (start_pos) and the rest remote", f.Usage.CachedTokens, f.Timings.Remote.Tokens, cached)
				}
			})

			t.Run("PrefillSidePrefixHit", func(t *testing.T) {
				c := randomPrompt(200, 500, vocab)
				if windowed {
					// The positions the decoder asks for (c less its last token): a snapshot of c itself holds its
					// windows one position too far on to send [L-W, L) (TestWindowExportFromPrefixCache).
					gen(t, p, c[:len(c)-1])
				} else {
					gen(t, p, c) // p computes c locally: its prefix cache holds c
				}
				before := prefixHits(t, p)
				want, _ := gen(t, ref, c)
				got, f := gen(t, d, c, p.endpoint())
				sameTokens(t, "prompt cached on the prefill side", got, want)
				wantRemote(t, f, "")
				if prefixHits(t, p) <= before {
					t.Errorf("the prefill engine did not use its prefix cache")
				}
			})

			// A windowed model's prefill engine holding a longer prompt cannot cut its windows back: the request for
			// the prompt less its last token (the decoder's) is computed there, not taken from the cache, and its
			// KV still decodes exactly.
			t.Run("PrefillSideLongerEntry", func(t *testing.T) {
				if !windowed {
					t.Skip("full-attention layers cut back to any length (PrefillSidePrefixHit)")
				}
				c := randomPrompt(500, 300, vocab)
				gen(t, p, c)
				want, _ := gen(t, ref, c)
				got, f := gen(t, d, c, p.endpoint())
				sameTokens(t, "prompt held longer on the prefill side", got, want)
				wantRemote(t, f, p.desc.PrefillEndpoint)
			})

			// The grammar and the choices act on decode only: a constrained request for two seeded choices gives
			// the same tokens, choice by choice, whether its prompt was prefilled here or over the wire.
			t.Run("ConstrainedChoices", func(t *testing.T) {
				prompt := randomPrompt(400, 300, vocab)
				seed := int64(9)
				req := engine.GenerateRequest{PromptTokens: prompt, N: 2,
					ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: []byte(`{"type":"object","properties":{"a":{"type":"string","maxLength":20},"b":{"type":"array","items":{"type":"integer"},"maxItems":4}},"required":["a","b"]}`)},
					Sampling:       engine.Sampling{MaxTokens: 80, Temperature: 1, Seed: &seed}}
				run := func(p *proc, eps ...engine.PrefillEndpoint) ([2][]int32, []*engine.Final) {
					r := req
					r.InstanceID, r.PrefillEndpoints = p.desc.InstanceID, eps
					var toks [2][]int32
					finals := make([]*engine.Final, 2)
					err := p.e.Generate(context.Background(), r, func(ev engine.Event) error {
						if ev.Token != nil {
							toks[ev.Choice] = append(toks[ev.Choice], ev.Token.ID)
						}
						if ev.Final != nil {
							finals[ev.Choice] = ev.Final
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					return toks, finals
				}
				want, _ := run(ref)
				got, finals := run(d, p.endpoint())
				for i := range 2 {
					sameTokens(t, fmt.Sprintf("choice %d", i), got[i], want[i])
					if finals[i] == nil || finals[i].FinishReason != engine.FinishStop {
						t.Errorf("choice %d final %+v", i, finals[i])
					}
				}
				wantRemote(t, finals[0], p.desc.PrefillEndpoint)
			})

			// A prefill node short of memory keeps its weights as stored; the decode node expanded them. The
			// two compute the same bits, so the KV it sends decodes to the local tokens.
			t.Run("StoredWeightsOnThePrefillSide", func(t *testing.T) {
				if d.desc.Backend != "cpu" {
					t.Skipf("the decoder runs on %s; KV from the cpu backend decodes exactly only on cpu (TestPDAcrossBackends covers mixing)", d.desc.Backend)
				}
				ps := startEngine(t, dir, prefillOpts("backend", "cpu", "weights", "stored"))
				prompt := randomPrompt(300, 400, vocab)
				want, _ := gen(t, ref, prompt)
				got, f := gen(t, d, prompt, ps.endpoint())
				sameTokens(t, "KV from a weights=stored prefill engine", got, want)
				wantRemote(t, f, ps.desc.PrefillEndpoint)
			})
		})
	}
}

// TestPDApproximate links the same base model at two quantizations, as exo allows: an 8-bit prefill engine and
// a bf16 decoder share KVCompat but not Fingerprint. An exact endpoint refuses the KV (the decoder prefills
// locally); an approximate one takes it and says so. A model of another base is refused either way.
func TestPDApproximate(t *testing.T) {
	p := startEngine(t, pdModel(t, "llama-q8"), prefillOpts())
	d := startEngine(t, pdModel(t, "llama-bf16"), decodeOpts("prefix_cache_mb", "0"))
	other := startEngine(t, pdModel(t, "llama-other"), prefillOpts())
	if p.desc.KVCompat == "" || p.desc.KVCompat != d.desc.KVCompat || p.desc.Fingerprint == d.desc.Fingerprint {
		t.Fatalf("KVCompat %q and %q, fingerprints %q and %q: want the same KVCompat and other fingerprints",
			p.desc.KVCompat, d.desc.KVCompat, p.desc.Fingerprint, d.desc.Fingerprint)
	}
	if other.desc.KVCompat == d.desc.KVCompat {
		t.Fatalf("a model of another base has the same KVCompat %q", d.desc.KVCompat)
	}
	prompt := randomPrompt(7, 300, d.desc.VocabSize)
	_, f := gen(t, d, prompt, p.endpoint())
	wantFallback(t, f, "fingerprint")

	ep := p.endpoint()
	ep.Approximate = true
	_, f = gen(t, d, prompt, ep)
	wantRemote(t, f, p.desc.PrefillEndpoint)
	if !f.Timings.Remote.Approximate {
		t.Errorf("KV from another quantization is not marked approximate")
	}

	ep = other.endpoint()
	ep.Approximate = true
	_, f = gen(t, d, prompt, ep)
	wantFallback(t, f, "")

	// Exact pairs are never marked approximate.
	p2 := startEngine(t, pdModel(t, "llama-bf16"), prefillOpts())
	ep = p2.endpoint()
	ep.Approximate = true
	_, f = gen(t, d, prompt, ep)
	wantRemote(t, f, p2.desc.PrefillEndpoint)
	if f.Timings.Remote.Approximate {
		t.Errorf("KV from the same model is marked approximate")
	}
}

func prefixHits(t testing.TB, p *proc) int64 {
	t.Helper()
	st, err := p.e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range st.Instances {
		if in.InstanceID == p.desc.InstanceID {
			return in.PrefixCache.Hits
		}
	}
	return 0
}

// faultProxy forwards TCP connections to a target and injects faults into what the target sends back.
type faultProxy struct {
	addr   string
	target string
	// fault is consulted for every server-to-client chunk: it sees the bytes forwarded so far and the next
	// chunk, and may modify it, stall, or close.
	fault func(sent int64, b []byte) action
}

type action int

const (
	pass action = iota
	stall
	cut
)

func newFaultProxy(t testing.TB, target string, fault func(sent int64, b []byte) action) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{addr: l.Addr().String(), target: target, fault: fault}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go fp.handle(c, done)
		}
	}()
	return fp
}

func (fp *faultProxy) handle(c net.Conn, done chan struct{}) {
	defer c.Close()
	s, err := net.Dial("tcp", fp.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c) }()
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := s.Read(buf)
		if n > 0 {
			switch fp.fault(sent, buf[:n]) {
			case stall:
				select {
				case <-done:
				case <-time.After(time.Minute):
				}
				return
			case cut:
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			sent += int64(n)
		}
		if err != nil {
			return
		}
	}
}

// refKV computes, in this process with the pure-Go backend, the KV of tokens and the layout it has: each layer's
// positions [from[i], len(tokens)), all of them for a full layer and the window at the end for a sliding one.
func refKV(t testing.TB, dir string, tokens []int32) (l backend.KVLayout, kv [][2][]byte, from []int) {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	bm, err := cpu.Backend{}.Load(m, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bm.Close()
	c, err := bm.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: tokens}}); err != nil {
		t.Fatal(err)
	}
	l = bm.KVLayout()
	n := len(tokens)
	for i, ly := range l.Layers {
		lo := 0
		if ly.Kind == backend.KVSliding {
			lo = max(0, n-ly.Window)
		}
		k, v := make([]byte, (n-lo)*l.LayerTokenBytes(i)), make([]byte, (n-lo)*l.LayerTokenBytes(i))
		if err := c.ExportKV(i, lo, n, k, v); err != nil {
			t.Fatal(err)
		}
		kv, from = append(kv, [2][]byte{k, v}), append(from, lo)
	}
	return l, kv, from
}

func wireDType(t testing.TB, d dtype.DType) kvwire.DType {
	t.Helper()
	w, err := kvwire.ParseDType(string(d))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPDExoPeers checks both directions against exo-shaped peers (plain frames, no duet extensions), on a model
// of full layers and on a sliding-window one (Gemma 3), whose sliding layers travel as the positions their
// windows hold at the end of the prompt: what exo's RotatingKVCache sends.
func TestPDExoPeers(t *testing.T) {
	for _, name := range []string{"llama-bf16", "gemma3-q4"} {
		t.Run(name, func(t *testing.T) { testPDExoPeers(t, name) })
	}
}

func testPDExoPeers(t *testing.T, name string) {
	dir := pdModel(t, name)
	ref := startEngine(t, dir, map[string]string{"prefix_cache_mb": "0"})
	vocab := ref.desc.VocabSize
	prompt := randomPrompt(300, 300, vocab)
	L := len(prompt) - 1
	layout, kv, lo := refKV(t, dir, prompt[:L])

	t.Run("ExoServerToDuetDecoder", func(t *testing.T) {
		// An exo prefill server sends each layer whole, after its prefill; a sliding layer as its window.
		srv := kvwiretest.NewPlainServer(t, func(req kvwire.Request) kvwiretest.Response {
			resp := kvwiretest.Response{Header: kvwire.Header{RequestID: req.RequestID, ModelID: req.ModelID,
				NumLayers: layout.NumLayers(), DType: wireDType(t, layout.DType), StartPos: req.StartPos}}
			for l := range layout.NumLayers() {
				from := max(req.StartPos, lo[l])
				if layout.Layers[l].Kind == backend.KVSliding {
					from = lo[l]
				}
				tb := layout.LayerTokenBytes(l)
				resp.Messages = append(resp.Messages, &kvwire.KVChunk{LayerIdx: l, NumTokens: len(req.TokenIDs) - from, NHeads: layout.Layers[l].KVHeads,
					HeadDim: layout.Layers[l].HeadDim, DType: wireDType(t, layout.DType),
					Keys: kv[l][0][(from-lo[l])*tb:], Values: kv[l][1][(from-lo[l])*tb:]})
			}
			resp.Messages = append(resp.Messages, &kvwire.Done{TotalTokens: len(req.TokenIDs) - req.StartPos})
			return resp
		})
		d := startEngine(t, dir, decodeOpts())
		want, _ := gen(t, ref, prompt)
		got, f := gen(t, d, prompt, engine.PrefillEndpoint{Address: srv.Addr})
		sameTokens(t, "KV from an exo-shaped server", got, want)
		wantRemote(t, f, srv.Addr)
	})

	t.Run("ExoClientFromDuetServer", func(t *testing.T) {
		p := startEngine(t, dir, prefillOpts())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := kvwiretest.PlainFetch(ctx, p.desc.PrefillEndpoint, kvwire.Request{
			RequestID: "exo-1", ModelID: p.desc.ModelID, TokenIDs: prompt[:L], StartPos: 40})
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		if h.NumLayers != layout.NumLayers() || h.StartPos != 40 || h.DType != wireDType(t, layout.DType) {
			t.Fatalf("header %+v", h)
		}
		// A full layer sends [40, L); a sliding one the positions its window holds at the end, [L-W, L).
		next := make([]int, layout.NumLayers())
		for i := range next {
			next[i] = max(40, lo[i])
		}
		for _, m := range resp.Messages {
			switch m := m.(type) {
			case *kvwire.KVChunk:
				pos, tb, from := next[m.LayerIdx], layout.LayerTokenBytes(m.LayerIdx), lo[m.LayerIdx]
				wantK := kv[m.LayerIdx][0][(pos-from)*tb : (pos-from+m.NumTokens)*tb]
				wantV := kv[m.LayerIdx][1][(pos-from)*tb : (pos-from+m.NumTokens)*tb]
				// The reference is the pure-Go backend's: bit for bit on it; another backend (MLX) may round a
				// 16-bit element one unit in the last place apart.
				exact := p.desc.Backend == "cpu"
				if !kvClose(m.Keys, wantK, layout.DType, exact) || !kvClose(m.Values, wantV, layout.DType, exact) {
					t.Fatalf("layer %d positions [%d, %d): KV differs from the reference", m.LayerIdx, pos, pos+m.NumTokens)
				}
				next[m.LayerIdx] += m.NumTokens
			case *kvwire.Done:
				// exo counts the positions sent per layer: the prompt less start_pos.
				if m.TotalTokens != L-40 {
					t.Errorf("done says %d tokens, want %d (positions sent per layer)", m.TotalTokens, L-40)
				}
			case *kvwire.Error:
				t.Fatalf("error %d: %s", m.Code, m.Message)
			}
		}
		for l, p := range next {
			if p != L {
				t.Errorf("layer %d: received up to %d, want %d", l, p, L)
			}
		}
		// A request for another model is refused with 400.
		_, err = kvwiretest.PlainFetch(ctx, p.desc.PrefillEndpoint, kvwire.Request{ModelID: "someone/else", TokenIDs: prompt[:10]})
		var re *kvwire.RemoteError
		if !errors.As(err, &re) || re.Code != kvwire.CodeBadRequest {
			t.Errorf("another model: %v, want a remote 400", err)
		}
	})
}

func rss(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestPDFaults injects every failure the decode side must survive: each request still completes, with the
// tokens of a local prefill, within its deadline.
func TestPDFaults(t *testing.T) {
	dir := pdModel(t, "llama-bf16")
	ref := startEngine(t, dir, map[string]string{"prefix_cache_mb": "0"})
	p := startEngine(t, dir, prefillOpts())
	other := startEngine(t, pdModel(t, "llama-other"), prefillOpts())
	// The decode engine keeps no prefix cache, so every request goes to the wire.
	d := startEngine(t, dir, decodeOpts("prefix_cache_mb", "0", "kv_checksum", "true"))
	// A stall is noticed by the frame deadline; this engine's is short.
	dStall := startEngine(t, dir, decodeOpts("prefix_cache_mb", "0", "kv_frame_timeout", "1s"))
	vocab := d.desc.VocabSize
	prompt := randomPrompt(400, 600, vocab)
	want, _ := gen(t, ref, prompt)

	busy := kvwiretest.NewPlainServer(t, func(kvwire.Request) kvwiretest.Response {
		return kvwiretest.ErrorResponse(kvwire.CodeBusy, "busy")
	})
	layout := d.desc.KV
	badHeads := kvwiretest.NewPlainServer(t, func(req kvwire.Request) kvwiretest.Response {
		s := kvwiretest.Shape{NumLayers: layout.NumLayers, StartPos: req.StartPos, EndPos: len(req.TokenIDs), ChunkTokens: 64,
			NHeads: layout.NumKVHeads + 1, HeadDim: layout.HeadDim, DType: kvwire.BFloat16}
		return s.Response(req)
	})
	stalled := newFaultProxy(t, p.desc.PrefillEndpoint, func(sent int64, b []byte) action {
		if sent > 2000 {
			return stall
		}
		return pass
	})
	corrupt := newFaultProxy(t, p.desc.PrefillEndpoint, func(sent int64, b []byte) action {
		if sent < 5000 && sent+int64(len(b)) > 5000 {
			b[5000-sent] ^= 0x40 // a bit flip inside tensor bytes: only the checksum can tell
		}
		return pass
	})
	dead := freeAddr(t)

	cases := []struct {
		name   string
		eps    []engine.PrefillEndpoint
		reason string
		d      *proc
	}{
		{"Busy503", []engine.PrefillEndpoint{{Address: busy.Addr}}, "503", nil},
		{"CorruptChunkShape", []engine.PrefillEndpoint{{Address: badHeads.Addr}}, "heads", nil},
		{"CorruptBytes", []engine.PrefillEndpoint{{Address: corrupt.addr}}, "crc32c", nil},
		{"Stalled", []engine.PrefillEndpoint{{Address: stalled.addr}}, "time", dStall},
		{"OtherModel", []engine.PrefillEndpoint{other.endpoint()}, "fingerprint", nil},
		{"NothingListening", []engine.PrefillEndpoint{{Address: dead}}, "refused", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			de := d
			if c.d != nil {
				de = c.d
			}
			got, f := gen(t, de, prompt, c.eps...)
			sameTokens(t, c.name, got, want)
			wantFallback(t, f, c.reason)
			t.Logf("%s: fell back after %v: %s", c.name, time.Since(start).Round(time.Millisecond), f.Timings.Remote.FallbackReason)
		})
	}

	t.Run("NextEndpointFirst", func(t *testing.T) {
		got, f := gen(t, d, prompt, engine.PrefillEndpoint{Address: busy.Addr}, engine.PrefillEndpoint{Address: dead}, p.endpoint())
		sameTokens(t, "third endpoint", got, want)
		wantRemote(t, f, p.desc.PrefillEndpoint)
		if f.Timings.Remote.Attempts != 3 {
			t.Errorf("%d attempts, want 3", f.Timings.Remote.Attempts)
		}
	})

	t.Run("KilledMidTransfer", func(t *testing.T) {
		victim := startEngine(t, dir, prefillOpts())
		var killed atomic.Bool
		proxy := newFaultProxy(t, victim.desc.PrefillEndpoint, func(sent int64, b []byte) action {
			if sent > 3000 && killed.CompareAndSwap(false, true) {
				_ = syscall.Kill(victim.pid, syscall.SIGKILL)
				return cut
			}
			return pass
		})
		got, f := gen(t, d, prompt, engine.PrefillEndpoint{Address: proxy.addr})
		sameTokens(t, "after the prefill engine died", got, want)
		wantFallback(t, f, "")
		if !killed.Load() {
			t.Errorf("the prefill engine was never killed")
		}
	})

	t.Run("MemoryAfter100Failures", func(t *testing.T) {
		prompt := prompt[:300]
		want, _ := gen(t, ref, prompt)
		faults := [][]engine.PrefillEndpoint{
			{{Address: busy.Addr}}, {{Address: badHeads.Addr}}, {{Address: corrupt.addr}}, {other.endpoint()}, {{Address: dead}},
		}
		for i := range 5 { // warm up: every path once, so the baseline includes what they allocate
			gen(t, d, prompt, faults[i]...)
		}
		gen(t, d, prompt, p.endpoint())
		base := rss(t, d.pid)
		for i := range 100 {
			got, _ := gen(t, d, prompt, faults[i%len(faults)]...)
			if i%20 == 0 {
				sameTokens(t, "under repeated faults", got, want)
			}
		}
		after := rss(t, d.pid)
		t.Logf("decode engine RSS: %d KiB before, %d KiB after 100 failures (%+.1f%%)", base>>10, after>>10, 100*float64(after-base)/float64(base))
		if float64(after) > 1.10*float64(base) {
			t.Errorf("RSS grew from %d to %d bytes, more than 10%%", base, after)
		}
	})
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// kvClose compares wire KV: byte for byte when exact; otherwise (another backend, e.g. MLX, computes in a
// different order) each 16-bit element within one unit in its last place, that is 2^-7 of its magnitude for
// bfloat16 and 2^-10 for float16, or 1e-6 absolute near zero. float32 elements must agree exactly.
func kvClose(got, want []byte, dt dtype.DType, exact bool) bool {
	if len(got) != len(want) {
		return false
	}
	if exact || dt == dtype.Float32 {
		return string(got) == string(want)
	}
	rel := 1.0 / 128
	if dt == dtype.Float16 {
		rel = 1.0 / 1024
	}
	a, b := make([]float32, len(got)/2), make([]float32, len(want)/2)
	if dtype.Decode(dt, a, got) != nil || dtype.Decode(dt, b, want) != nil {
		return false
	}
	for i := range a {
		d := math.Abs(float64(a[i] - b[i]))
		if d > rel*math.Max(math.Abs(float64(a[i])), math.Abs(float64(b[i])))+1e-6 {
			return false
		}
	}
	return true
}
