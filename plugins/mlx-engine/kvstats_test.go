package mlxengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

func instanceStats(t *testing.T, e engine.Engine, id string) engine.InstanceStats {
	t.Helper()
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range st.Instances {
		if in.InstanceID == id {
			return in
		}
	}
	t.Fatalf("no stats for instance %s", id)
	return engine.InstanceStats{}
}

// TestKVStatsReportWhatTheInstanceHolds: the KV memory an instance reports (duet_engine_kv_cache_bytes, the
// dashboard) is what its sequences and its prefix cache hold, at least the positions they hold at the KV
// layout's size, and never above the capacity it reports: MaxBatch caches of the whole context and the
// prefix cache's bound. Before, it counted generating sequences only, so an instance reported 0 B whenever
// a stats poll found it between requests, with its prefix cache full.
func TestKVStatsReportWhatTheInstanceHolds(t *testing.T) {
	const batch, prefixMB = 4, 64
	e, d := loadTiny(t, map[string]string{"max_batch": "4", "prefix_cache_mb": "64"})
	perPos := d.KV.BytesPerToken()
	idle := instanceStats(t, e, d.InstanceID)
	if want := batch*int64(d.ContextLength)*perPos + prefixMB<<20; idle.KVCapacityBytes != want {
		t.Errorf("capacity %d bytes, want %d (%d caches of %d positions at %d bytes, and %d MiB of prefix cache)",
			idle.KVCapacityBytes, want, batch, d.ContextLength, perPos, prefixMB)
	}
	if idle.KVBytes != 0 {
		t.Errorf("%d KV bytes before any request", idle.KVBytes)
	}

	const prompt, out = 300, 20
	var during engine.InstanceStats
	n := 0
	run(context.Background(), t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(5, prompt, d.VocabSize),
		Sampling: engine.Sampling{MaxTokens: out, IgnoreEOS: true}})
	// A second request, watched mid-stream: it holds its own cache beside the first one's in the prefix cache.
	// Its max_tokens fills the context, so it is still running when its fifth token arrives however slowly
	// this goroutine reads the events (the runner does not wait for them); it is stopped after `out` tokens,
	// and a stopped request's cache goes to the prefix cache as a finished one's does.
	errEnough := errors.New("enough tokens")
	err := e.Generate(context.Background(), engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(6, prompt, d.VocabSize),
		Sampling: engine.Sampling{MaxTokens: d.ContextLength - prompt, IgnoreEOS: true}}, func(ev engine.Event) error {
		if ev.Token != nil {
			if n++; n == 5 {
				during = instanceStats(t, e, d.InstanceID)
			}
			if n == out {
				return errEnough
			}
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("Generate: %v, want the callback's error", err)
	}
	// The stopped request leaves the runner asynchronously: wait until the stats say it has.
	deadline := time.Now().Add(10 * time.Second)
	for instanceStats(t, e, d.InstanceID).InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	after := instanceStats(t, e, d.InstanceID)

	held := int64(prompt+out-1) * perPos // positions of one finished request
	if during.InFlight != 1 || during.KVBytes < during.PrefixCache.Bytes+int64(prompt)*perPos || during.PrefixCache.Bytes < held {
		t.Errorf("mid-stream: %d KV bytes, %d in the prefix cache, %d in flight; want the prefix cache (at least %d) and %d positions of %d bytes",
			during.KVBytes, during.PrefixCache.Bytes, during.InFlight, held, prompt, perPos)
	}
	if after.InFlight != 0 || after.KVBytes != after.PrefixCache.Bytes || after.KVBytes < 2*held {
		t.Errorf("idle after two requests: %d KV bytes, %d in the prefix cache, %d in flight; want what the prefix cache holds, at least %d",
			after.KVBytes, after.PrefixCache.Bytes, after.InFlight, 2*held)
	}
	for _, s := range []engine.InstanceStats{during, after} {
		if s.KVBytes > s.KVCapacityBytes {
			t.Errorf("%d KV bytes, over the capacity of %d", s.KVBytes, s.KVCapacityBytes)
		}
	}
}
