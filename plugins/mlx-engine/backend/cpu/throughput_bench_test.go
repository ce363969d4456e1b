package cpu

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchmarkThroughput is the backend's figure of merit in one run: the machine's read bandwidth, then, for the
// ~100M-parameter model in float32, bfloat16, MLX 8-bit and MLX 4-bit (the last three kept as stored, so a
// decode step reads 2×, ~3.8× and ~6.4× fewer bytes), on every kernel path this CPU has and for each thread
// count: decode tok/s at batch 1 and 8 and prefill tok/s for a 512-token prompt.
//
// Decode at batch 1 streams every weight once per token, so its bound is read bandwidth / bytes per token.
// Each decode step is paired with a read of as many bytes, with the same threads, right before it, so both
// see the same load: of-bound is the median over steps of (read time / step time), the fraction of the
// bandwidth bound the step reaches, which holds on a machine whose load changes. Metrics: tok/s (time in
// Forward only); for batch 1 also of-bound, read-GB/s (the median of the paired reads), bound-tok/s (their
// bandwidth over bytes per token) and weights-MB; GMAC/cpu-s (matrix work per CPU-second, which a busy
// machine does not distort). Threads default to 1 and GOMAXPROCS; DUET_BENCH_THREADS=1,2,4 sets them, and DUET_BENCH_DTYPES
// and DUET_BENCH_KERNELS (comma-separated) pick dtypes and paths.
//
//	go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Throughput -benchtime 2s
func BenchmarkThroughput(b *testing.B) {
	threads := benchList(os.Getenv("DUET_BENCH_THREADS"), []string{"1", strconv.Itoa(runtime.GOMAXPROCS(0))})
	b.Run("read", func(b *testing.B) {
		for _, t := range threads {
			n, _ := strconv.Atoi(t)
			b.Run("threads="+t, func(b *testing.B) {
				var bw float64
				for range b.N {
					bw = readBandwidth(n)
				}
				b.ReportMetric(bw/1e9, "read-GB/s")
			})
		}
	})
	dtypes := map[string]func(*modelgen.Options){
		"f32":  func(*modelgen.Options) {},
		"bf16": func(o *modelgen.Options) { o.DType = dtype.BFloat16 },
		"q8g64": func(o *modelgen.Options) {
			o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 8, GroupSize: 64}
		},
		"q4g64": func(o *modelgen.Options) {
			o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 64}
		},
	}
	var paths []string
	for _, k := range kernelPaths() {
		paths = append(paths, k.String())
	}
	paths = benchList(os.Getenv("DUET_BENCH_KERNELS"), paths)
	for _, name := range benchList(os.Getenv("DUET_BENCH_DTYPES"), []string{"f32", "bf16", "q8g64", "q4g64"}) {
		mod, ok := dtypes[name]
		if !ok {
			b.Fatalf("DUET_BENCH_DTYPES: no dtype %q", name)
		}
		o := modelgen.Bench100M()
		mod(&o)
		m := backendtest.Generate(b, o)
		for _, path := range paths {
			for _, t := range threads {
				n, _ := strconv.Atoi(t)
				b.Run(fmt.Sprintf("%s/%s/threads=%s", name, path, t), func(b *testing.B) {
					b.Setenv(KernelsEnv, path)
					bm := backendtest.Load(b, Backend{}, m, backend.Options{Weights: backend.WeightsStored, Threads: n})
					cm := bm.(*cpuModel)
					weights := weightBytesPerToken(cm)
					macs := float64(macsPerToken(cm))
					bp := backendtest.BenchModel{Prefill: 512}
					p := bp.BenchPrompt(bm.VocabSize())
					b.Run("decode-batch1", func(b *testing.B) { benchDecodeVsRead(b, bm, p, n, weights, 0, macs, 0) })
					b.Run("decode-batch8", func(b *testing.B) {
						var cpu0 time.Duration
						backendtest.BenchDecode(b, bm, p, 8, func() { cpu0 = processCPUTime() })
						reportCPU(b, cpu0, float64(8*b.N)*macs)
					})
					b.Run("prefill-512", func(b *testing.B) {
						var cpu0 time.Duration
						backendtest.BenchPrefill(b, bm, p[:512], func() { cpu0 = processCPUTime() })
						reportCPU(b, cpu0, float64(512*b.N)*macs)
					})
				})
			}
		}
	}
}

// benchDecodeVsRead measures decode at batch 1 (as backendtest.BenchDecode does: BenchContext positions of p,
// truncated back after each step) with every step paired with a read of weights+state bytes by threads
// goroutines: state is what a step reads besides the weights (the KV history, linear layers' states). It takes
// at least minSteps steps whatever b.N is, so a -benchtime 1x run for prefills still measures decode.
func benchDecodeVsRead(b *testing.B, m backend.Model, p []int32, threads int, weights, state int64, macs float64, minSteps int) {
	c := backendtest.NewCache(b, m)
	backendtest.Forward(b, m, c, p[:backendtest.BenchContext]...)
	seq := []backend.Seq{{Cache: c, Tokens: p[backendtest.BenchContext : backendtest.BenchContext+1], Logits: make([]float32, m.VocabSize())}}
	buf := make([]byte, (weights+state+127)&^127)
	for i := range buf {
		buf[i] = byte(i)
	}
	defer debug.FreeOSMemory()
	readAllParallel(buf, threads) // fault in, warm up
	var inForward time.Duration
	steps := max(b.N, minSteps)
	ratios, bws := make([]float64, 0, steps), make([]float64, 0, steps)
	cpu0 := processCPUTime()
	b.ResetTimer()
	for range steps {
		t0 := time.Now()
		readAllParallel(buf, threads)
		t1 := time.Now()
		if err := m.Forward(seq); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		c.Truncate(backendtest.BenchContext)
		inForward += t2.Sub(t1)
		ratios = append(ratios, t1.Sub(t0).Seconds()/t2.Sub(t1).Seconds())
		bws = append(bws, float64(len(buf))/t1.Sub(t0).Seconds())
	}
	b.StopTimer()
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		// The paired reads are CPU time too: count the steps' share only, as the step/read time split.
		share := inForward.Seconds() / b.Elapsed().Seconds()
		b.ReportMetric(float64(steps)*macs/(cpu.Seconds()*share)/1e9, "GMAC/cpu-s")
	}
	if steps != b.N {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/op")
	}
	bw := median(bws)
	b.ReportMetric(float64(steps)/inForward.Seconds(), "tok/s")
	b.ReportMetric(median(ratios), "of-bound")
	b.ReportMetric(bw/1e9, "read-GB/s")
	b.ReportMetric(bw/float64(weights+state), "bound-tok/s")
	b.ReportMetric(float64(weights)/1e6, "weights-MB")
	if state > 0 {
		b.ReportMetric(float64(state)/1e6, "state-MB")
	}
}

// readAllParallel reads b with threads goroutines, each a contiguous part.
func readAllParallel(b []byte, threads int) {
	threads = max(threads, 1)
	part := (len(b)/threads + 127) &^ 127
	var wg sync.WaitGroup
	for lo := 0; lo < len(b); lo += part {
		wg.Add(1)
		go func(p []byte) {
			defer wg.Done()
			readSink.Add(readAll(p))
		}(b[lo:min(lo+part, len(b))])
	}
	wg.Wait()
}

var readSink atomic.Uint64

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchList splits a comma-separated setting, or returns def when it is empty.
func benchList(s string, def []string) []string {
	if s = strings.TrimSpace(s); s == "" {
		return def
	}
	return strings.Split(s, ",")
}

// readBandwidth measures how many bytes per second threads goroutines read from a 256 MiB buffer (far beyond
// the caches; best of five) with vector loads: what a decode step, which reads every weight once and writes
// almost nothing, can reach at best (a copy moves each byte twice and so understates it). The buffer is
// returned to the OS afterwards.
func readBandwidth(threads int) float64 {
	defer debug.FreeOSMemory()
	const size = 256 << 20
	buf := make([]byte, size)
	for i := 0; i < size; i += 4096 {
		buf[i] = byte(i >> 12) // fault the pages in
	}
	threads = max(threads, 1)
	part := size / threads &^ 127
	best := 0.0
	var sink uint64
	var mu sync.Mutex
	for range 5 {
		start := time.Now()
		var wg sync.WaitGroup
		for t := range threads {
			wg.Add(1)
			go func(b []byte) {
				defer wg.Done()
				s := readAll(b)
				mu.Lock()
				sink ^= s
				mu.Unlock()
			}(buf[t*part : (t+1)*part])
		}
		wg.Wait()
		best = max(best, float64(part*threads)/time.Since(start).Seconds())
	}
	runtime.KeepAlive(sink)
	return best
}
