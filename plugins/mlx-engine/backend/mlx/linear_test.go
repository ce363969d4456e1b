//go:build mlx

package mlx

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// linearShapes are the block sizes MLX's linear block is checked on, the cpu backend's: the tiny model's
// (docs/hybrid-design.md §6.1), an odd one (one key head for three value heads, three taps, dims of no power of
// two) and a wider one (four value heads per key head).
var linearShapes = []struct {
	name string
	d    backendtest.LinearDims
}{
	{"tiny", backendtest.LinearDims{Hidden: 64, Nk: 2, Nv: 4, Dk: 16, Dv: 8, K: 4, Eps: 1e-6}},
	{"odd", backendtest.LinearDims{Hidden: 24, Nk: 1, Nv: 3, Dk: 7, Dv: 5, K: 3, Eps: 1e-5}},
	{"wide", backendtest.LinearDims{Hidden: 96, Nk: 2, Nv: 8, Dk: 32, Dv: 16, K: 4, Eps: 1e-6}},
}

func newLinearHostFor(t testing.TB, bd backendtest.LinearDims, rw *backendtest.LinearWeights, window dtype.DType) *linearHost {
	t.Helper()
	d := linearDims{Nk: bd.Nk, Nv: bd.Nv, Dk: bd.Dk, Dv: bd.Dv, K: bd.K, Eps: float32(bd.Eps)}
	h, err := newLinearHost(d, &linearHostWeights{Hidden: bd.Hidden, QKV: rw.QKV, Z: rw.Z, B: rw.B, A: rw.A,
		Out: rw.Out, Conv: rw.Conv, DtBias: rw.DtBias, ALog: rw.ALog, Norm: rw.Norm}, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

// linearTolerance is the largest relative error (max |Δ| / max |reference|, over a whole 300-token sequence)
// of MLX's linear block against the float64 reference. The block computes in float32, like the cpu backend
// (whose bounds these are, 2e-5 and 2e-3): every quantity is a short dot product or a sum of K taps (relative
// rounding a few 1e-7), and the delta rule is a contraction (docs/hybrid-design.md §1.4), so errors add up at
// most linearly over the tokens and decay with the state; the chunked form reorders the same sums, within a
// chunk the triangular inverse T is a product of 5 squarings whose entries stay O(1) (|N_ij| < 1), and its
// decays come from segment sums, so a head with γ far below −100 loses no precision. A window kept in
// bfloat16 adds one rounding of 2^-9 that float32 computations can take to neighbouring values.
func linearTolerance(window dtype.DType) float64 {
	if window == dtype.Float32 {
		return 2e-5
	}
	return 2e-3
}

// linearPlans are the ways a 300-token sequence goes through the block: prefill in one call and in pieces of 3,
// 17, 64 and the rest (the chunked form, C = 64: the pieces start chunks elsewhere and leave partial ones), and
// decode token by token (the recurrence).
var linearPlans = []struct {
	name   string
	pieces []int
	chunk  int
}{
	{"prefill", []int{300}, linearChunk},
	{"pieces", []int{3, 17, 64, 216}, linearChunk},
	{"decode", nil, 0},
}

// TestLinearMatchesReference runs a 300-token sequence through MLX's linear block for two sequences at once
// (one from the zero state, one from a random state, each with its own input) and checks the outputs, the
// recurrent state and the conv window after every call against the float64 reference, on weights that reach the
// pitfalls of docs/hybrid-design.md §1.4 (a head that forgets within a token, so the cumulative log-decay of a
// chunk goes far below −100; both branches of softplus; β near 0 and 1), with the window in float32 and in
// bfloat16. A NaN or infinity anywhere fails the comparison.
func TestLinearMatchesReference(t *testing.T) {
	const n = 300
	for _, shape := range linearShapes {
		for _, window := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			for _, plan := range linearPlans {
				t.Run(fmt.Sprintf("%s/%s/%s", shape.name, window, plan.name), func(t *testing.T) {
					d := shape.d
					var round func(float64) float64
					if window != dtype.Float32 {
						round = func(x float64) float64 { return float64(window.Round(float32(x))) }
					}
					rw := backendtest.RandomLinear(11, d)
					h := newLinearHostFor(t, d, rw, window)
					refs := make([]*backendtest.LinearReference, 2)
					states := []*backendtest.LinearState{backendtest.NewLinearState(d), backendtest.RandomLinearState(12, d, round)}
					xs := make([][]float32, 2)
					for i := range refs {
						r, err := backendtest.NewLinearReference(d, rw)
						if err != nil {
							t.Fatal(err)
						}
						r.Round = round
						refs[i] = r
						xs[i] = backendtest.RandomLinearInput(13+uint64(i), d, n)
					}
					conv := make([]float32, 0, 2*len(states[0].Conv))
					s := make([]float32, 0, 2*len(states[0].S))
					for _, st := range states {
						c, v := st.Float32()
						conv, s = append(conv, c...), append(s, v...)
					}
					pieces := plan.pieces
					if pieces == nil {
						pieces = make([]int, n)
						for i := range pieces {
							pieces[i] = 1
						}
					}
					got, want := make([][]float32, 2), make([][]float64, 2)
					var eState, eConv float64
					pos := 0
					for _, T := range pieces {
						H := d.Hidden
						x := append(append([]float32(nil), xs[0][pos*H:(pos+T)*H]...), xs[1][pos*H:(pos+T)*H]...)
						y, nextConv, nextS, err := h.forward(x, 2, T, conv, s, plan.chunk)
						if err != nil {
							t.Fatal(err)
						}
						conv, s = nextConv, nextS
						for i, r := range refs {
							want[i] = append(want[i], r.Forward(states[i], f64s(xs[i][pos*H:(pos+T)*H]), 0)...)
							got[i] = append(got[i], y[i*T*H:(i+1)*T*H]...)
							rc, rs := states[i].Float32()
							cs, ss := len(rc), len(rs)
							eConv = math.Max(eConv, relErr(conv[i*cs:(i+1)*cs], f64s(rc)))
							eState = math.Max(eState, relErr(s[i*ss:(i+1)*ss], f64s(rs)))
						}
						pos += T
					}
					eOut := math.Max(relErr(got[0], want[0]), relErr(got[1], want[1]))
					t.Logf("relative error: outputs %.3g, state %.3g, conv window %.3g", eOut, eState, eConv)
					if tol := linearTolerance(window); !(eOut <= tol && eState <= tol && eConv <= tol) {
						t.Fatalf("relative error above %g: outputs %.3g, state %.3g, conv window %.3g", tol, eOut, eState, eConv)
					}
					for _, r := range refs {
						g := r.Ranges()
						if !(g.MinChunkGamma < -100 && g.MinSoftplusIn < -20 && g.MaxSoftplusIn > 20 && g.MinBeta < 0.05 && g.MaxBeta > 0.95) {
							t.Fatalf("inputs miss the hard cases: %+v", g)
						}
					}
				})
			}
		}
	}
}

// TestDeltaChunkedMatchesRecurrent checks the two forms of MLX's delta rule against each other, on every
// shape: the chunked form with chunks of 64 (one padded), 32 and 5 (many chunks, a padded tail) and the
// recurrence, from a random state, over 150 tokens. The odd shape's one key head of 7 dims is where keys point
// alike and the triangular inverse is hardest.
func TestDeltaChunkedMatchesRecurrent(t *testing.T) {
	const n = 150
	for _, shape := range linearShapes {
		t.Run(shape.name, func(t *testing.T) {
			d := shape.d
			rw := backendtest.RandomLinear(21, d)
			h := newLinearHostFor(t, d, rw, dtype.Float32)
			conv, s := backendtest.RandomLinearState(22, d, nil).Float32()
			x := backendtest.RandomLinearInput(23, d, n)
			yRec, _, sRec, err := h.forward(x, 1, n, conv, s, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []int{linearChunk, 32, 5} {
				y, _, st, err := h.forward(x, 1, n, conv, s, c)
				if err != nil {
					t.Fatal(err)
				}
				eOut, eState := backendtest.RelDiff(y, yRec), backendtest.RelDiff(st, sRec)
				t.Logf("C=%d: relative difference from the recurrence: outputs %.3g, state %.3g", c, eOut, eState)
				if tol := linearTolerance(dtype.Float32); !(eOut <= tol && eState <= tol) {
					t.Fatalf("C=%d: chunked form differs from the recurrence by %.3g (outputs), %.3g (state)", c, eOut, eState)
				}
			}
		})
	}
}

// BenchmarkLinearPrefill measures MLX's linear block between its projections (conv, norms, gates, delta rule,
// gated norm) at Qwen3-Next's sizes (16 key heads, 32 value heads of 128 dims) for one sequence of 512 and of
// 2048 tokens, as the chunked form and as the recurrence: ns/token staying flat from 512 to 2048 shows the cost
// is linear in the prompt.
//
//	go test -tags mlx ./backend/mlx/ -run '^$' -bench LinearPrefill
func BenchmarkLinearPrefill(b *testing.B) {
	bd := backendtest.LinearDims{Hidden: 64, Nk: 16, Nv: 32, Dk: 128, Dv: 128, K: 4, Eps: 1e-6}
	h := newLinearHostFor(b, bd, backendtest.RandomLinear(31, bd), dtype.BFloat16)
	for _, tc := range []struct {
		name   string
		tokens int
		chunk  int
	}{
		{"chunked-512", 512, linearChunk}, {"chunked-2048", 2048, linearChunk},
		{"recurrent-512", 512, 0}, {"recurrent-2048", 2048, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			run, free, err := h.mixBench(tc.tokens, tc.chunk, 32)
			if err != nil {
				b.Fatal(err)
			}
			defer free()
			if err := run(); err != nil { // warm-up
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*tc.tokens), "ns/token")
		})
	}
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// relErr is max |a−b| / max |b| (NaN when a holds a NaN).
func relErr(a []float32, b []float64) float64 {
	var d, m float64
	for i := range b {
		e := math.Abs(float64(a[i]) - b[i])
		if math.IsNaN(e) || math.IsInf(e, 0) {
			return math.NaN()
		}
		d = math.Max(d, e)
		m = math.Max(m, math.Abs(b[i]))
	}
	return d / m
}
