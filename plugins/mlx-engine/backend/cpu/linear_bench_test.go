package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
)

// benchLinearDims are Qwen3-Next-80B-A3B's linear layers (docs/hybrid-design.md §3.1): 16 key heads, 32 value
// heads, 128 dims each, 4 taps.
var benchLinearDims = backendtest.LinearDims{Hidden: 64, Nk: 16, Nv: 32, Dk: 128, Dv: 128, K: 4, Eps: 1e-6}

// BenchmarkDeltaRule measures one linear layer's work between its projections (conv, norms, gates, the delta
// rule token by token, gated norm) over a sequence of 512, 2048 and 8192 tokens, fed in calls of 512 with the
// state carried, on GOMAXPROCS threads, on each kernel path. Its time per token must stay flat across the lengths: the rule's cost
// is linear in the sequence. cpu-ns/token (the process's CPU time per token, all threads) is the figure to
// read on a shared machine; ns/token is the wall clock's.
//
//	flock /tmp/duet-heavy.lock go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench DeltaRule -benchtime 1x
func BenchmarkDeltaRule(b *testing.B) {
	bd := benchLinearDims
	rw := backendtest.RandomLinear(31, bd)
	c := newLinearCase(b, bd, rw, backendtest.NewLinearState(bd), nil)
	d := c.d
	// Gates of a trained model's range rather than the tests' extremes: a + dt_bias around 0 and A up to 16,
	// so α stays in (0, 1) and no head is flushed every token.
	for h := range d.Nv {
		c.w.DtBias[h] = 0
		c.w.ALog[h] = float32(h%16) / 4
	}
	p := newPool(runtime.GOMAXPROCS(0))
	defer p.close()
	for _, kp := range kernelPaths() {
		for _, n := range []int{512, 2048, 8192} {
			b.Run(fmt.Sprintf("%s/tokens=%d", kp, n), func(b *testing.B) { benchRule(b, p, kp, d, c.w, n, 512) })
		}
	}
}

// benchRule measures linearRule over n tokens of random inputs, fed in calls of call tokens with the state
// carried, and reports and returns the time per token (as reportPerToken).
func benchRule(b *testing.B, p *pool, kp kernelPath, d deltaDims, w *linearWeights, n, call int) (ns, cpuNs float64) {
	r := rand.New(rand.NewPCG(32, 0))
	in := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	cd, vd := d.convDim(), d.valueDim()
	qkv0, z, bb, a := in(call*cd), in(call*vd), in(call*d.Nv), in(call*d.Nv)
	qkv, out := make([]float32, call*cd), make([]float32, call*vd)
	cpu0 := processCPUTime()
	for b.Loop() {
		st := newLinearState(d)
		for at := 0; at < n; at += call {
			copy(qkv, qkv0)
			linearRule(p, kp, d, w, st, qkv, z, bb, a, out, call)
		}
	}
	return reportPerToken(b, n, cpu0)
}

// reportPerToken reports the wall-clock and CPU time per token of b's loop over n tokens, the CPU time counted
// from cpu0 (processCPUTime), and returns them (cpuNs 0 where the CPU time is not known).
func reportPerToken(b *testing.B, n int, cpu0 time.Duration) (ns, cpuNs float64) {
	ns = float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
	b.ReportMetric(ns, "ns/token")
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		cpuNs = float64(cpu.Nanoseconds()) / float64(b.N*n)
		b.ReportMetric(cpuNs, "cpu-ns/token")
	}
	return ns, cpuNs
}

// BenchmarkLinearLayer puts the rule in context: one whole linear layer of Qwen3-Next-80B-A3B (hidden 2048,
// float32 projections on the fastest kernel path, 512-token calls) against the part between the projections
// (linearRule), per token. Their ratio is the share of a linear layer's prefill time that a faster delta-rule
// kernel could save.
//
//	flock /tmp/duet-heavy.lock go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench LinearLayer -benchtime 3x
func BenchmarkLinearLayer(b *testing.B) {
	bd := benchLinearDims
	bd.Hidden = 2048
	rw := backendtest.RandomLinear(41, bd)
	c := newLinearCase(b, bd, rw, backendtest.NewLinearState(bd), nil)
	d := c.d
	for h := range d.Nv {
		c.w.DtBias[h] = 0
		c.w.ALog[h] = float32(h%16) / 4
	}
	const n = 512
	x := backendtest.RandomLinearInput(42, bd, n)
	y := make([]float32, n*bd.Hidden)
	k, err := chooseKernels("")
	if err != nil {
		b.Fatal(err)
	}
	p := newPool(runtime.GOMAXPROCS(0))
	defer p.close()
	b.Run("layer/"+k.String(), func(b *testing.B) {
		cpu0 := processCPUTime()
		for b.Loop() {
			linearPrefill(p, k, d, c.w, newLinearState(d), x, n, y)
		}
		reportPerToken(b, n, cpu0)
	})
	b.Run("rule/"+k.String(), func(b *testing.B) {
		cd, vd := d.convDim(), d.valueDim()
		qkv, z, o := make([]float32, n*cd), make([]float32, n*vd), make([]float32, n*vd)
		ab := make([]float32, 2*n*d.Nv)
		for i := range qkv {
			qkv[i] = x[i%len(x)]
		}
		for i := range z {
			z[i] = x[(i+7)%len(x)]
		}
		for i := range ab {
			ab[i] = x[(i+11)%len(x)]
		}
		work := make([]float32, len(qkv))
		cpu0 := processCPUTime()
		for b.Loop() {
			copy(work, qkv)
			linearRule(p, k, d, c.w, newLinearState(d), work, z, ab[:n*d.Nv], ab[n*d.Nv:], o, n)
		}
		reportPerToken(b, n, cpu0)
	})
}
