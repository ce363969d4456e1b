package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/serfcluster"
)

func TestSpeedsLearnFromTimings(t *testing.T) {
	t.Parallel()
	var published []serfcluster.Speed
	s := NewSpeeds(func(id string, sp serfcluster.Speed) {
		if id != "i" {
			t.Errorf("published %q", id)
		}
		published = append(published, sp)
	})
	kv := engine.KVLayout{NumLayers: 2, NumKVHeads: 2, HeadDim: 64, DType: "bfloat16"}
	local := func(prompt, cached, out int, prefill, decode, queue time.Duration) Sample {
		return Sample{Instance: "i", KV: kv, Usage: engine.Usage{PromptTokens: prompt, CachedTokens: cached, CompletionTokens: out},
			Timings: engine.Timings{Queue: queue, Prefill: prefill, Decode: decode, PrefillSource: engine.PrefillLocal}}
	}
	s.Observe(local(1000, 0, 65, 2*time.Second, 4*time.Second, 0)) // 500 tok/s in band 1, 16 tok/s
	sp, _ := s.Speed("i")
	if sp.PrefillTPS[1] != 500 || sp.DecodeTPS != 16 || sp.KVBytesPerToken != 2*2*64*2*2 || sp.Samples != 1 {
		t.Fatalf("after one request: %+v", sp)
	}
	// The running mean moves by alpha toward a new figure; a sample too short to measure a rate is ignored.
	s.Observe(local(1064, 64, 2, time.Second, time.Second, 100*time.Millisecond)) // 1000 tok/s; 1 token out: no decode figure
	sp, _ = s.Speed("i")
	if want := 500 + alpha*500; math.Abs(sp.PrefillTPS[1]-want) > 1e-9 || sp.DecodeTPS != 16 {
		t.Errorf("after two: prefill %v (want %v), decode %v (want 16)", sp.PrefillTPS[1], want, sp.DecodeTPS)
	}
	if want := time.Duration(alpha * float64(100*time.Millisecond)); sp.QueueWait != want {
		t.Errorf("queue wait %v, want %v", sp.QueueWait, want)
	}
	n := len(published)
	s.Observe(local(1000, 0, 65, time.Second, 4*time.Second, 30*time.Millisecond))
	if sp2, _ := s.Speed("i"); len(published) != n+1 || sp2.PrefillTPS[1] == sp.PrefillTPS[1] {
		t.Errorf("a change of the prefill figure was not published")
	}

	// A remote prefill measures the link from the prefill node and the ingest rate, not the local prefill.
	before, _ := s.Speed("i")
	s.Observe(Sample{Instance: "i", KV: kv, Usage: engine.Usage{PromptTokens: 2000, CompletionTokens: 1},
		Timings: engine.Timings{Prefill: 3 * time.Second, PrefillSource: engine.PrefillRemote,
			Remote: &engine.RemotePrefill{Tokens: 1999, Bytes: 10 << 20, Wait: time.Second, Transfer: 3 * time.Second, Ingest: 100 * time.Millisecond}},
		PrefillNode: "n2", RTT: time.Millisecond})
	sp, _ = s.Speed("i")
	if len(sp.Ingress) != 1 || sp.Ingress[0].From != "n2" || sp.Ingress[0].BytesPerSecond != float64(10<<20)/2 || sp.Ingress[0].RTT != time.Millisecond ||
		sp.Ingress[0].PrefillTPS[1] != 1999.0/3 || sp.Ingress[0].PrefillTPS[0] != 0 {
		t.Errorf("ingress %+v", sp.Ingress)
	}
	if sp.IngestBPS != float64(10<<20)/0.1 || sp.PrefillTPS[3] != before.PrefillTPS[3] {
		t.Errorf("ingest %v, prefill %v (was %v)", sp.IngestBPS, sp.PrefillTPS, before.PrefillTPS)
	}
	// A fallback measures nothing of the link.
	s.Observe(Sample{Instance: "i", Usage: engine.Usage{PromptTokens: 2000}, PrefillNode: "n3",
		Timings: engine.Timings{PrefillSource: engine.PrefillLocal, Remote: &engine.RemotePrefill{Bytes: 1 << 20, Wait: 1, Transfer: time.Second, FallbackReason: "busy"}}})
	if sp, _ = s.Speed("i"); len(sp.Ingress) != 1 {
		t.Errorf("a fallback added a link: %+v", sp.Ingress)
	}
}

// TestSpeedsHybridKV: a hybrid's speed publishes the bytes per token of its attention layers alone and its
// linear layers' state bytes beside them, and routers get both.
func TestSpeedsHybridKV(t *testing.T) {
	var published []serfcluster.Speed
	s := NewSpeeds(func(_ string, sp serfcluster.Speed) { published = append(published, sp) })
	kv := engine.KVLayout{NumLayers: 48, NumKVHeads: 2, HeadDim: 256, DType: "bfloat16", LinearLayers: 36, StateBytes: 77266944}
	s.Observe(Sample{Instance: "i", KV: kv, Usage: engine.Usage{PromptTokens: 10, CompletionTokens: 1}})
	sp, _ := s.Speed("i")
	if sp.KVBytesPerToken != 2*12*2*256*2 || sp.KVStateBytes != 77266944 {
		t.Fatalf("speed %+v", sp)
	}
	if len(published) != 1 || published[0].KVStateBytes != 77266944 {
		t.Errorf("published %+v", published)
	}
	if rs := RouterSpeed(&sp); rs.KVBytesPerToken != sp.KVBytesPerToken || rs.KVStateBytes != sp.KVStateBytes {
		t.Errorf("router speed %+v", rs)
	}
}

func TestEstimateErrors(t *testing.T) {
	t.Parallel()
	s := NewSpeeds(nil)
	var hooked []float64
	s.OnEstimateError(func(kind, phase string, e float64) { hooked = append(hooked, e) })
	s.ObserveEstimate(PlacementRemote, 1, 10, engine.Timings{FirstToken: 1500 * time.Millisecond, Total: 8 * time.Second})
	s.ObserveEstimate(PlacementRemote, 0, 10, engine.Timings{Total: time.Second}) // no estimate: ignored
	e := s.EstimateErrors()[PlacementRemote]
	if e.Count != 1 || math.Abs(e.LastTotal+0.2) > 1e-9 || math.Abs(e.LastFirstToken-0.5) > 1e-9 || math.Abs(e.MeanAbsTotal-0.2) > 1e-9 {
		t.Errorf("error %+v", e)
	}
	if len(hooked) != 2 {
		t.Errorf("hook got %v", hooked)
	}
}

// TestSpeedsProbe: a probe seeds an unmeasured link (published like any figure) and is wanted again only once
// it is older than the interval; the first real transfer replaces the probe's goodput rather than averaging
// with it, and from then on no probe is wanted nor taken.
func TestSpeedsProbe(t *testing.T) {
	t.Parallel()
	published := 0
	s := NewSpeeds(func(string, serfcluster.Speed) { published++ })
	const every = time.Minute
	if !s.NeedsProbe("i", "n2", every) {
		t.Fatal("an unknown instance's link does not want a probe")
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		s.ObserveProbe("i", "n2", bad, time.Millisecond)
	}
	if !s.NeedsProbe("i", "n2", every) || published != 0 {
		t.Fatalf("a bad goodput counted (published %d)", published)
	}
	s.ObserveProbe("i", "n2", 12.5e6, 800*time.Microsecond) // 100 Mbit/s
	sp, _ := s.Speed("i")
	if len(sp.Ingress) != 1 || sp.Ingress[0].From != "n2" || sp.Ingress[0].BytesPerSecond != 12.5e6 || sp.Ingress[0].RTT != 800*time.Microsecond ||
		sp.Ingress[0].Samples != 1 || published != 1 {
		t.Fatalf("after a probe: %+v (published %d)", sp.Ingress, published)
	}
	if s.NeedsProbe("i", "n2", every) || !s.NeedsProbe("i", "n2", 0) || !s.NeedsProbe("i", "n3", every) {
		t.Error("a fresh probe is wanted again, or a stale one or another node's is not")
	}
	s.ObserveProbe("i", "n2", 25e6, 0) // a second probe averages with the first; no RTT keeps the last
	if sp, _ = s.Speed("i"); sp.Ingress[0].BytesPerSecond != 12.5e6+alpha*12.5e6 || sp.Ingress[0].RTT != 800*time.Microsecond {
		t.Errorf("after two probes: %+v", sp.Ingress)
	}

	kv := engine.KVLayout{NumLayers: 2, NumKVHeads: 2, HeadDim: 64, DType: "bfloat16"}
	s.Observe(Sample{Instance: "i", KV: kv, Usage: engine.Usage{PromptTokens: 2000, CompletionTokens: 1},
		Timings: engine.Timings{Prefill: 3 * time.Second, PrefillSource: engine.PrefillRemote,
			Remote: &engine.RemotePrefill{Tokens: 2000, Bytes: 10 << 20, Wait: time.Second, Transfer: 3 * time.Second}},
		PrefillNode: "n2"})
	sp, _ = s.Speed("i")
	if sp.Ingress[0].BytesPerSecond != float64(10<<20)/2 || sp.Ingress[0].Samples != 1 {
		t.Errorf("a real transfer after probes: %+v, want its own goodput alone", sp.Ingress)
	}
	s.ObserveProbe("i", "n2", 1e9, 0)
	if sp, _ = s.Speed("i"); sp.Ingress[0].BytesPerSecond != float64(10<<20)/2 || s.NeedsProbe("i", "n2", 0) {
		t.Errorf("a probe after a real transfer counted, or one is wanted: %+v", sp.Ingress)
	}
}
