package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// linearShapes are the block sizes the CPU's linear block is checked on: the tiny model's (docs/hybrid-design.md
// §6.1), an odd one (head dims that leave tails in every unrolled loop, three taps), and a wider one (four value
// heads per key head, dims a multiple of the vector paths' lanes so the projections run their kernels).
var linearShapes = []struct {
	name string
	d    backendtest.LinearDims
}{
	{"tiny", backendtest.LinearDims{Hidden: 64, Nk: 2, Nv: 4, Dk: 16, Dv: 8, K: 4, Eps: 1e-6}},
	{"odd", backendtest.LinearDims{Hidden: 24, Nk: 1, Nv: 3, Dk: 7, Dv: 5, K: 3, Eps: 1e-5}},
	{"wide", backendtest.LinearDims{Hidden: 96, Nk: 2, Nv: 8, Dk: 32, Dv: 16, K: 4, Eps: 1e-6}},
}

// linearCase is a block and its float32 state, built from the reference's types.
type linearCase struct {
	d  deltaDims
	w  *linearWeights
	st *linearState
}

func newLinearCase(t testing.TB, bd backendtest.LinearDims, rw *backendtest.LinearWeights, st *backendtest.LinearState, round func(float32) float32) linearCase {
	t.Helper()
	d := deltaDims{Nk: bd.Nk, Nv: bd.Nv, Dk: bd.Dk, Dv: bd.Dv, K: bd.K, Eps: float32(bd.Eps)}
	w := &linearWeights{Hidden: bd.Hidden, QKV: rw.QKV, Z: rw.Z, B: rw.B, A: rw.A, Out: rw.Out, Conv: rw.Conv,
		DtBias: rw.DtBias, ALog: rw.ALog, Norm: rw.Norm, Round: round}
	if err := d.check(); err != nil {
		t.Fatal(err)
	}
	if err := w.check(d, true); err != nil {
		t.Fatal(err)
	}
	conv, state := st.Float32()
	return linearCase{d: d, w: w, st: &linearState{Conv: conv, S: state}}
}

// relErr is max |a−b| / max |b|.
func relErr(a []float32, b []float64) float64 { return maxAbsDiff(a, b) / maxAbs(b) }

// linearRounds are the conv window's dtypes the checks run with: float32 (no rounding) and bfloat16.
var linearRounds = []struct {
	name string
	dt   dtype.DType
}{{"f32", dtype.Float32}, {"bf16", dtype.BFloat16}}

func roundFuncs(dt dtype.DType) (func(float32) float32, func(float64) float64) {
	if dt == dtype.Float32 {
		return nil, nil
	}
	return dt.Round, func(x float64) float64 { return float64(dt.Round(float32(x))) }
}

// TestLinearMatchesReference runs a 300-token sequence through the CPU's linear block on every kernel path and
// compares its outputs, final state and conv window with the float64 reference's (the recurrence), from the
// zero state and from a random one, on weights that reach the pitfalls of docs/hybrid-design.md §1.4 (a head
// that forgets within a token, both branches of softplus, β near 0 and 1).
func TestLinearMatchesReference(t *testing.T) {
	t.Parallel()
	const n = 300
	for _, shape := range linearShapes {
		for _, rnd := range linearRounds {
			for _, start := range []string{"zero", "random"} {
				for _, path := range kernelPaths() {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", shape.name, rnd.name, start, path), func(t *testing.T) {
						t.Parallel()
						d := shape.d
						r32, r64 := roundFuncs(rnd.dt)
						rw := backendtest.RandomLinear(11, d)
						ref, err := backendtest.NewLinearReference(d, rw)
						if err != nil {
							t.Fatal(err)
						}
						ref.Round = r64
						st := backendtest.NewLinearState(d)
						if start == "random" {
							st = backendtest.RandomLinearState(12, d, r64)
						}
						c := newLinearCase(t, d, rw, st, r32)
						x := backendtest.RandomLinearInput(13, d, n)
						x64 := make([]float64, len(x))
						for i, v := range x {
							x64[i] = float64(v)
						}
						want := ref.Forward(st, x64, 0)
						got := make([]float32, n*d.Hidden)
						p := newPool(3)
						defer p.close()
						linearPrefill(p, path, c.d, c.w, c.st, x, n, got)
						eOut, eState, eConv := relErr(got, want), relErr(c.st.S, st.S), relErr(c.st.Conv, st.Conv)
						t.Logf("relative error: outputs %.3g, state %.3g, conv window %.3g", eOut, eState, eConv)
						// float32 against float64 over 300 tokens; bf16 windows add a rounding step that two
						// computations can take to neighbouring values.
						tol := 2e-5
						if rnd.dt != dtype.Float32 {
							tol = 2e-3
						}
						if !(eOut <= tol && eState <= tol && eConv <= tol) {
							t.Fatalf("relative error above %g: outputs %.3g, state %.3g, conv window %.3g", tol, eOut, eState, eConv)
						}
						g := ref.Ranges()
						if !(g.MinChunkGamma < -100 && g.MinSoftplusIn < -20 && g.MaxSoftplusIn > 20 && g.MinBeta < 0.05 && g.MaxBeta > 0.95) {
							t.Fatalf("inputs miss the hard cases: %+v", g)
						}
					})
				}
			}
		}
	}
}

// TestLinearSplitsAndThreadsAreExact checks that the CPU's linear block gives the same bits whatever the split
// of the sequence into calls (1, 3, 64 or 300 tokens per call, the state carried) and whatever the number of
// threads, on every kernel path.
func TestLinearSplitsAndThreadsAreExact(t *testing.T) {
	t.Parallel()
	const n = 300
	for _, shape := range linearShapes {
		for _, path := range kernelPaths() {
			t.Run(shape.name+"/"+path.String(), func(t *testing.T) {
				t.Parallel()
				d := shape.d
				r32, r64 := roundFuncs(dtype.BFloat16)
				rw := backendtest.RandomLinear(21, d)
				st := backendtest.RandomLinearState(22, d, r64)
				x := backendtest.RandomLinearInput(23, d, n)
				var want []float32
				var wantState *linearState
				for _, threads := range []int{1, 2, 5} {
					for _, split := range []int{300, 64, 3, 1} {
						c := newLinearCase(t, d, rw, st, r32)
						p := newPool(threads)
						got := make([]float32, n*d.Hidden)
						for at := 0; at < n; at += split {
							m := min(split, n-at)
							linearPrefill(p, path, c.d, c.w, c.st, x[at*d.Hidden:(at+m)*d.Hidden], m, got[at*d.Hidden:(at+m)*d.Hidden])
						}
						p.close()
						if want == nil {
							want, wantState = got, c.st
							continue
						}
						if !slices.Equal(got, want) || !slices.Equal(c.st.S, wantState.S) || !slices.Equal(c.st.Conv, wantState.Conv) {
							t.Fatalf("%d threads, %d tokens per call: not the bits of 1 thread and one call", threads, split)
						}
					}
				}
			})
		}
	}
}

// TestDeltaRow checks the fused row pass against its definition in float64, at lengths that leave every tail of
// its unrolled loops.
func TestDeltaRow(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 4, 7, 16, 130} {
		row, k, q := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range n {
			row[i] = float32(math.Sin(float64(3*i + 1)))
			k[i] = float32(math.Cos(float64(5*i+2))) / float32(math.Sqrt(float64(n)))
			q[i] = float32(math.Sin(float64(7*i + 3)))
		}
		const alpha, beta, v = 0.9, 0.3, 0.75
		want := make([]float64, n)
		var u float64
		for i := range n {
			want[i] = float64(row[i]) * alpha
			u += want[i] * float64(k[i])
		}
		delta := beta * (v - u)
		var o float64
		for i := range n {
			want[i] += delta * float64(k[i])
			o += want[i] * float64(q[i])
		}
		got := deltaRow(row, k, q, alpha, beta, v)
		if e := math.Abs(float64(got) - o); e > 1e-5*(1+math.Abs(o)) {
			t.Errorf("n=%d: read-out %g, want %g", n, got, o)
		}
		if e := maxAbsDiff(row, want); e > 1e-6 {
			t.Errorf("n=%d: row differs from the definition by %g", n, e)
		}
	}
}

// TestDeltaRowsKernels checks each vector path's delta-rule kernel against the Go row pass (to rounding: the
// kernels fuse their multiply-adds) and checks that a row's bits do not depend on how many rows share the call.
func TestDeltaRowsKernels(t *testing.T) {
	t.Parallel()
	const n, rows = 128, 7 // one call of four rows, then three of one
	r := rand.New(rand.NewPCG(51, 0))
	vec := func(m int, scale float64) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	S0, k, q, v := vec(rows*n, 0.3), vec(n, 1/math.Sqrt(n)), vec(n, 1/math.Sqrt(n)), vec(rows, 1)
	wantS, want := slices.Clone(S0), make([]float32, rows)
	deltaRows(pathGo, wantS, k, q, v, want, 0.9, 0.4)
	for _, kp := range kernelPaths()[1:] {
		S, o := slices.Clone(S0), make([]float32, rows)
		deltaRows(kp, S, k, q, v, o, 0.9, 0.4)
		for j := range rows {
			if d := math.Abs(float64(o[j] - want[j])); d > 1e-5 {
				t.Errorf("%s: row %d reads %g, the Go pass %g", kp, j, o[j], want[j])
			}
		}
		for i := range S {
			if d := math.Abs(float64(S[i] - wantS[i])); d > 1e-5 {
				t.Fatalf("%s: state element %d is %g, the Go pass's %g", kp, i, S[i], wantS[i])
			}
		}
		// Row by row, one kernel call each: the same bits.
		S1, o1 := slices.Clone(S0), make([]float32, rows)
		for j := range rows {
			deltaRows(kp, S1[j*n:(j+1)*n], k, q, v[j:j+1], o1[j:j+1], 0.9, 0.4)
		}
		if !slices.Equal(S1, S) || !slices.Equal(o1, o) {
			t.Errorf("%s: rows computed one per call differ from rows computed four per call", kp)
		}
	}
}

// TestDeltaGates checks the gates at their edges: softplus's threshold (torch's: above 20 it is the identity),
// a decay so fast that α underflows to 0 (not NaN), one that would be subnormal (flushed to 0), A_log = −∞ (no decay at all), and β's range.
func TestDeltaGates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		a, b, dtBias, aLog  float32
		wantAlpha, wantBeta float64
	}{
		{"softplus at threshold", 20, 0, 0, 0, math.Exp(-math.Log1p(math.Exp(20))), 0.5},
		{"softplus above threshold", 20.5, 0, 0, 0, math.Exp(-20.5), 0.5},
		{"softplus far below", -25, 0, 0, 0, math.Exp(-math.Log1p(math.Exp(-25))), 0.5},
		{"bias added", 1, 0, -3, float32(math.Log(2)), math.Exp(-2 * math.Log1p(math.Exp(-2))), 0.5},
		{"forgets within a token", 10, 0, 15, float32(math.Log(16)), 0, 0.5},
		{"subnormal decay flushed", 95, 0, 0, 0, 0, 0.5},
		{"smallest normal decay kept", 87, 0, 0, 0, math.Exp(-87), 0.5},
		{"no decay", 5, 0, 0, float32(math.Inf(-1)), 1, 0.5},
		{"beta high", 0, 3.9, 0, 0, math.Exp(-math.Log1p(1)), 1 / (1 + math.Exp(-3.9))},
		{"beta low", 0, -3.9, 0, 0, math.Exp(-math.Log1p(1)), 1 / (1 + math.Exp(3.9))},
	} {
		alpha, beta := deltaGates(tc.a, tc.b, tc.dtBias, tc.aLog)
		if math.Abs(float64(alpha)-tc.wantAlpha) > 1e-6*math.Max(tc.wantAlpha, 1e-30) || math.Abs(float64(beta)-tc.wantBeta) > 1e-6 {
			t.Errorf("%s: α %g β %g, want %g %g", tc.name, alpha, beta, tc.wantAlpha, tc.wantBeta)
		}
	}
}

// TestLinearChecks checks the sizes and weights the block refuses.
func TestLinearChecks(t *testing.T) {
	t.Parallel()
	for _, d := range []deltaDims{
		{Nk: 2, Nv: 3, Dk: 4, Dv: 4, K: 4},
		{Nk: 1, Nv: 1, Dk: 4, Dv: 4, K: 1},
		{Nk: 0, Nv: 1, Dk: 4, Dv: 4, K: 4},
	} {
		if d.check() == nil {
			t.Errorf("%+v accepted", d)
		}
	}
	bd := linearShapes[0].d
	rw := backendtest.RandomLinear(1, bd)
	c := newLinearCase(t, bd, rw, backendtest.NewLinearState(bd), nil)
	c.w.Conv = c.w.Conv[1:]
	if c.w.check(c.d, false) == nil {
		t.Error("a short conv weight was accepted")
	}
	c = newLinearCase(t, bd, rw, backendtest.NewLinearState(bd), nil)
	c.w.Out = nil
	if c.w.check(c.d, false) != nil || c.w.check(c.d, true) == nil {
		t.Error("projections checked when not asked for, or not when asked")
	}
}
