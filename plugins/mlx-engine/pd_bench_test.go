package mlxengine_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
)

// The P/D benchmarks run a prefill engine and a decode engine as plugin subprocesses, each pinned to its own
// core with taskset (so "both sides equally fast" holds and they do not steal each other's CPU), on a generated
// model sized so that an 8k-token prefill takes seconds on one core of pure Go.
//
//	go test ./plugins/mlx-engine -run '^$' -bench 'PD' -benchtime 3x -timeout 60m

func pdBenchModel(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "pd-bench")
	if err := modelgen.Generate(dir, modelgen.PDBench()); err != nil {
		b.Fatal(err)
	}
	return dir
}

// pinnedEngine starts an engine subprocess on one CPU core.
func pinnedEngine(b *testing.B, core int, dir string, opts map[string]string) *proc {
	b.Helper()
	cmd := enginetest.PluginCommand(b)
	if ts, err := exec.LookPath("taskset"); err == nil {
		cmd.Args = append([]string{ts, "-c", fmt.Sprint(core)}, cmd.Args...)
		cmd.Path = ts
	} else {
		b.Logf("taskset not found: engines are not pinned")
	}
	cfg := engine.ClientConfig()
	cfg.Cmd = cmd
	cfg.AutoMTLS = true
	cfg.Logger = hclog.NewNullLogger()
	e, pc, err := engine.Connect(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pc.Kill)
	desc, err := e.Load(context.Background(), engine.LoadRequest{Model: dir, Options: opts})
	if err != nil {
		b.Fatal(err)
	}
	return &proc{e: e, pid: pc.ReattachConfig().Pid, desc: desc}
}

// ttft runs a one-token generation and returns the time to its token, measured by the caller, and the final
// event.
func ttft(b *testing.B, p *proc, prompt []int32, eps ...engine.PrefillEndpoint) (time.Duration, *engine.Final) {
	b.Helper()
	start := time.Now()
	var first time.Duration
	var fin *engine.Final
	err := p.e.Generate(context.Background(), engine.GenerateRequest{InstanceID: p.desc.InstanceID, PromptTokens: prompt,
		PrefillEndpoints: eps, Sampling: engine.Sampling{MaxTokens: 1, IgnoreEOS: true}}, func(ev engine.Event) error {
		if ev.Token != nil && first == 0 {
			first = time.Since(start)
		}
		if ev.Final != nil {
			fin = ev.Final
		}
		return nil
	})
	if err != nil || fin == nil || fin.FinishReason == engine.FinishError {
		b.Fatalf("generate: %v %+v", err, fin)
	}
	return first, fin
}

func BenchmarkPDTTFT(b *testing.B) {
	dir := pdBenchModel(b)
	for _, n := range []int{2048, 8000} {
		b.Run(fmt.Sprintf("%dtok", n), func(b *testing.B) {
			p := pinnedEngine(b, 0, dir, map[string]string{"kv_listen": "127.0.0.1:0", "prefix_cache_mb": "0"})
			d := pinnedEngine(b, 1, dir, map[string]string{"prefix_cache_mb": "0", "remote_prefill_threshold": "16"})
			var local, remote, transfer, wait time.Duration
			var bytes int64
			for i := range b.N {
				prompt := randomPrompt(uint64(1000+i), n, d.desc.VocabSize)
				tl, _ := ttft(b, p, prompt) // local on the prefill engine's core: what the prefill alone costs
				tr, f := ttft(b, d, randomPrompt(uint64(2000+i), n, d.desc.VocabSize), p.endpoint())
				if f.Timings.PrefillSource != engine.PrefillRemote {
					b.Fatalf("not prefilled remotely: %+v", f.Timings.Remote)
				}
				local += tl
				remote += tr
				transfer += f.Timings.Remote.Transfer
				wait += f.Timings.Remote.Wait
				bytes += f.Timings.Remote.Bytes
			}
			nb := float64(b.N)
			b.ReportMetric(float64(local.Milliseconds())/nb, "local-ttft-ms")
			b.ReportMetric(float64(remote.Milliseconds())/nb, "pd-ttft-ms")
			b.ReportMetric(float64(remote)/float64(local), "ttft-ratio")
			b.ReportMetric(float64(bytes)/nb/(1<<20), "MiB-moved")
			b.ReportMetric(float64(bytes)/(1<<20)/transfer.Seconds(), "MiB/s-over-prefill")
			// What the transfer adds beyond the prefill it overlaps: the decode side's TTFT minus the
			// prefill alone.
			b.ReportMetric(float64((remote-local).Milliseconds())/nb, "exposed-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkPDDecodeIsolation measures the inter-token latency of a running stream on the decode engine while
// a long prompt arrives: with the prompt prefilled locally (interleaved with the stream's decode steps) and
// with it prefilled by the other engine.
func BenchmarkPDDecodeIsolation(b *testing.B) {
	dir := pdBenchModel(b)
	const longPrompt = 4096
	p := pinnedEngine(b, 0, dir, map[string]string{"kv_listen": "127.0.0.1:0", "prefix_cache_mb": "0"})
	d := pinnedEngine(b, 1, dir, map[string]string{"prefix_cache_mb": "0", "remote_prefill_threshold": "16"})
	measure := func(i int, mode string) []time.Duration {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stamps []time.Time
		streaming := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = d.e.Generate(ctx, engine.GenerateRequest{InstanceID: d.desc.InstanceID, PromptTokens: randomPrompt(uint64(i), 32, d.desc.VocabSize),
				Sampling: engine.Sampling{MaxTokens: 10000, IgnoreEOS: true}}, func(ev engine.Event) error {
				if ev.Token != nil {
					stamps = append(stamps, time.Now())
					if len(stamps) == 20 {
						close(streaming)
					}
				}
				return nil
			})
		}()
		<-streaming
		from := time.Now()
		var until time.Time
		switch mode {
		case "idle":
			time.Sleep(2 * time.Second)
			until = time.Now()
		case "local":
			ttft(b, d, randomPrompt(uint64(5000+i), longPrompt, d.desc.VocabSize))
			until = time.Now()
		case "pd":
			ttft(b, d, randomPrompt(uint64(6000+i), longPrompt, d.desc.VocabSize), p.endpoint())
			until = time.Now()
		}
		cancel()
		<-done
		var itl []time.Duration
		for j := 1; j < len(stamps); j++ {
			if stamps[j].After(from) && stamps[j].Before(until) {
				itl = append(itl, stamps[j].Sub(stamps[j-1]))
			}
		}
		return itl
	}
	all := map[string][]time.Duration{}
	for i := range b.N {
		for _, mode := range []string{"idle", "local", "pd"} {
			all[mode] = append(all[mode], measure(i, mode)...)
		}
	}
	p99 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[min(len(ds)-1, len(ds)*99/100)].Microseconds()) / 1000
	}
	idle, local, pd := p99(all["idle"]), p99(all["local"]), p99(all["pd"])
	b.ReportMetric(idle, "idle-p99-itl-ms")
	b.ReportMetric(local, "local-prefill-p99-itl-ms")
	b.ReportMetric(pd, "pd-p99-itl-ms")
	b.ReportMetric(pd/idle, "pd/idle")
	b.ReportMetric(local/idle, "local/idle")
	b.ReportMetric(0, "ns/op")
}
