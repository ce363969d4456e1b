package mlxengine_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// loadTiny loads a small generated model into a fresh in-process engine.
func loadTiny(t *testing.T, opts map[string]string) (*mlxengine.Engine, engine.Description) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	o := modelgen.Tiny()
	o.NumLayers, o.HiddenSize, o.IntermediateSize = 4, 128, 256
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: dir, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return e, d
}

type stamped struct {
	tokens []int32
	times  []time.Time
	final  *engine.Final
}

func run(ctx context.Context, t *testing.T, e engine.Engine, req engine.GenerateRequest) *stamped {
	t.Helper()
	var out stamped
	err := e.Generate(ctx, req, func(ev engine.Event) error {
		if ev.Token != nil {
			out.tokens = append(out.tokens, ev.Token.ID)
			out.times = append(out.times, time.Now())
		}
		if ev.Final != nil {
			out.final = ev.Final
		}
		return nil
	})
	if err != nil {
		t.Errorf("Generate: %v", err)
	}
	return &out
}

// TestStreamsInterleave runs several generations at once: each streams while the others do (continuous
// batching), and each produces exactly what it produces alone.
func TestStreamsInterleave(t *testing.T) {
	e, d := loadTiny(t, map[string]string{"prefix_cache_mb": "0"})
	ctx := context.Background()
	req := func(i int) engine.GenerateRequest {
		return engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(uint64(i), 40+10*i, d.VocabSize),
			Sampling: engine.Sampling{MaxTokens: 64, IgnoreEOS: true}}
	}
	const n = 4
	alone := make([]*stamped, n)
	for i := range n {
		alone[i] = run(ctx, t, e, req(i))
	}
	together := make([]*stamped, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); together[i] = run(ctx, t, e, req(i)) }()
	}
	wg.Wait()
	firstEnd := together[0].times[len(together[0].times)-1]
	for i := range n {
		sameTokens(t, "batched vs alone", together[i].tokens, alone[i].tokens)
		if end := together[i].times[len(together[i].times)-1]; end.Before(firstEnd) {
			firstEnd = end
		}
	}
	for i := range n {
		if !together[i].times[0].Before(firstEnd) {
			t.Errorf("stream %d got its first token only after another stream had finished: not interleaved", i)
		}
	}
}

// TestLongPromptDoesNotStallStreams: while a long prompt is prefilled, a running stream keeps getting tokens
// (prefill goes in chunks between decode steps).
func TestLongPromptDoesNotStallStreams(t *testing.T) {
	e, d := loadTiny(t, map[string]string{"prefix_cache_mb": "0", "prefill_chunk": "64"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var stream *stamped
	done := make(chan struct{})
	go func() {
		defer close(done)
		var once sync.Once
		stream = &stamped{}
		_ = e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(1, 16, d.VocabSize),
			Sampling: engine.Sampling{MaxTokens: 1500, IgnoreEOS: true}}, func(ev engine.Event) error {
			if ev.Token != nil {
				stream.times = append(stream.times, time.Now())
				once.Do(func() { close(started) })
			}
			return nil
		})
	}()
	<-started
	from := time.Now()
	long := run(context.Background(), t, e, engine.GenerateRequest{InstanceID: d.InstanceID,
		PromptTokens: randomPrompt(2, 1900, d.VocabSize), Sampling: engine.Sampling{MaxTokens: 1}})
	until := long.times[0]
	cancel()
	<-done
	during := 0
	for _, ts := range stream.times {
		if ts.After(from) && ts.Before(until) {
			during++
		}
	}
	t.Logf("the running stream got %d tokens during the %v prefill of a 1900-token prompt", during, until.Sub(from))
	if during < 5 {
		t.Errorf("only %d tokens streamed during the long prefill: the stream stalled", during)
	}
}

func kvBytes(t *testing.T, e engine.Engine, id string) (int64, int) {
	t.Helper()
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range st.Instances {
		if in.InstanceID == id {
			return in.KVBytes, in.InFlight
		}
	}
	return -1, -1
}

// TestCancelFreesKV cancels generations mid-stream and checks their KV is gone at once.
func TestCancelFreesKV(t *testing.T) {
	e, d := loadTiny(t, map[string]string{"prefix_cache_mb": "0"})
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		var final *engine.Final
		_ = e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(3, 300, d.VocabSize),
			Sampling: engine.Sampling{MaxTokens: 1000, IgnoreEOS: true}}, func(ev engine.Event) error {
			if ev.Token != nil {
				if n++; n == 5 {
					if b, _ := kvBytes(t, e, d.InstanceID); b <= 0 {
						t.Errorf("no KV held while generating")
					}
					cancel()
				}
			}
			if ev.Final != nil {
				final = ev.Final
			}
			return nil
		})
		if final == nil || final.FinishReason != engine.FinishCancelled {
			t.Fatalf("final %+v, want cancelled", final)
		}
		if b, inFlight := kvBytes(t, e, d.InstanceID); b != 0 || inFlight != 0 {
			t.Errorf("after cancel: %d KV bytes, %d in flight; want 0, 0", b, inFlight)
		}
	}
}

// TestPrefixCache: a request that shares a prefix with an earlier one reuses its KV, with the same output.
func TestPrefixCache(t *testing.T) {
	e, d := loadTiny(t, nil)
	ctx := context.Background()
	ref, rd := loadTiny(t, map[string]string{"prefix_cache_mb": "0"})
	prompt := randomPrompt(9, 500, d.VocabSize)
	turn := func(e engine.Engine, id string, p []int32) *stamped {
		return run(ctx, t, e, engine.GenerateRequest{InstanceID: id, PromptTokens: p, Sampling: engine.Sampling{MaxTokens: 20, IgnoreEOS: true}})
	}
	first := turn(e, d.InstanceID, prompt)
	if first.final.Usage.CachedTokens != 0 {
		t.Errorf("first request: %d cached tokens", first.final.Usage.CachedTokens)
	}
	// The next turn of a conversation: the first prompt, its answer, and more.
	next := append(append(append([]int32{}, prompt...), first.tokens...), randomPrompt(10, 50, d.VocabSize)...)
	second := turn(e, d.InstanceID, next)
	want := turn(ref, rd.InstanceID, next)
	sameTokens(t, "with the prefix cache", second.tokens, want.tokens)
	// Everything but the last generated token (whose KV was never computed) comes from the cache.
	if got, min := second.final.Usage.CachedTokens, len(prompt)+len(first.tokens)-1; got < min {
		t.Errorf("second request: %d cached tokens, want at least %d", got, min)
	}
	st, _ := e.Stats(ctx)
	if pc := st.Instances[0].PrefixCache; pc.Hits < 1 || pc.Misses < 1 || pc.Bytes <= 0 {
		t.Errorf("prefix cache stats %+v", pc)
	}
}

func TestContextLimits(t *testing.T) {
	e, d := loadTiny(t, nil)
	ctx := context.Background()
	noop := func(engine.Event) error { return nil }
	err := e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(1, d.ContextLength, d.VocabSize)}, noop)
	if engine.CodeOf(err) != engine.CodeContextLength {
		t.Errorf("prompt as long as the context: %v", err)
	}
	err = e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(1, 100, d.VocabSize),
		Sampling: engine.Sampling{MaxTokens: d.ContextLength}}, noop)
	if engine.CodeOf(err) != engine.CodeContextLength {
		t.Errorf("max_tokens past the context: %v", err)
	}
	err = e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: []int32{1, int32(d.VocabSize)}}, noop)
	if engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Errorf("token outside the vocabulary: %v", err)
	}
	// Without max_tokens, a generation ends at the context limit with "length".
	long := run(ctx, t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(2, d.ContextLength-10, d.VocabSize),
		Sampling: engine.Sampling{IgnoreEOS: true}})
	if long.final.FinishReason != engine.FinishLength || len(long.tokens) > 10 {
		t.Errorf("at the context limit: %d tokens, finish %q", len(long.tokens), long.final.FinishReason)
	}
}
