//go:build mlx

package mlx

/*
#include "mlx/c/mlx.h"
*/
import "C"

import (
	"fmt"
	"math"
)

// The Gated DeltaNet ("linear attention") block of hybrid models (qwen3_next, qwen3_5; docs/hybrid-design.md
// §1 and §5.2) as MLX operations on arrays. The functions here take the block's sizes, its weights and a
// sequence batch's state as arrays and return the output and the new state; they know nothing of the model or
// the cache, so the layer wiring adapts to them.
//
// Decode runs the recurrence of §1.2 as operations on [B, Nv, Dv, Dk] (decay, prediction, rank-1 write,
// read-out); prefill runs the chunked form of §1.3 (chunks of linearChunk positions, the last one zero-padded),
// whose matrix products are what a GPU is fast at. Inside the rule everything is float32, as in HF and mlx-lm;
// the conv window keeps the dtype of the array it arrives in (the cache's), and the conv reads the rows
// rounded to it, so an output never depends on whether its inputs came from the window or from the call.

// linearChunk is the chunk length of the chunked form (HF's chunk_size).
const linearChunk = 64

// linearDims are the sizes of one linear block: Nk key heads (shared by the queries) and Nv value heads (a
// multiple of Nk; value head h reads key head h/(Nv/Nk)) of Dk and Dv dims, K conv taps, and the gated norm's
// eps (rms_norm_eps).
type linearDims struct {
	Nk, Nv, Dk, Dv, K int
	Eps               float32
}

func (d linearDims) keyDim() int   { return d.Nk * d.Dk }
func (d linearDims) valueDim() int { return d.Nv * d.Dv }

// convDim is the conv's channels: [Q (Nk·Dk) | K (Nk·Dk) | V (Nv·Dv)].
func (d linearDims) convDim() int { return 2*d.keyDim() + d.valueDim() }

func (d linearDims) check() error {
	if d.Nk <= 0 || d.Nv <= 0 || d.Dk <= 0 || d.Dv <= 0 || d.K < 2 {
		return fmt.Errorf("linear attention sizes %+v: heads and dims must be positive and the conv at least 2 taps", d)
	}
	if d.Nv%d.Nk != 0 {
		return fmt.Errorf("linear attention: %d value heads are not a multiple of %d key heads", d.Nv, d.Nk)
	}
	return nil
}

// linearAttn are one linear block's weights (docs/hybrid-design.md §2, after the load's regrouping).
type linearAttn struct {
	// The projections from the block's input: qkv's rows in [Q | K | V] order, each head-major; z is the gated
	// norm's gate, b feeds β = sigmoid(b), a the decay's softplus; out maps the gated norm's output back.
	qkv, z, b, a, out linear
	conv              C.mlx_array // [K, convDim] in the compute dtype; tap K-1 multiplies the current position
	dtBias, aLog      C.mlx_array // float32 [Nv]
	norm              C.mlx_array // float32 [Dv]: the gated norm's plain weight (never 1+w)
}

func (w *linearAttn) free() {
	for _, l := range []*linear{&w.qkv, &w.z, &w.b, &w.a, &w.out} {
		l.free()
	}
	for _, a := range []*C.mlx_array{&w.conv, &w.dtBias, &w.aLog, &w.norm} {
		free(a)
	}
}

// linearState is what a batch of B sequences carries between calls for one linear layer: the conv window, the
// K-1 newest pre-conv rows of each sequence ([B, K-1, convDim], oldest first, in the cache's dtype; zeros
// before a sequence starts), and the recurrent state S, float32 [B, Nv, Dv, Dk], value-major.
type linearState struct {
	conv, s C.mlx_array
}

// linearAttention runs the block on x ([B, T, hidden], the compute dtype) from state st and returns its output
// ([B, T, hidden], x's dtype) and the new state. chunk 0 runs the delta rule as the recurrence (decode, and
// short calls); chunk C > 0 as the chunked form with chunks of C positions (prefill: linearChunk).
func linearAttention(g *graph, d linearDims, w *linearAttn, x C.mlx_array, st linearState, chunk int) (C.mlx_array, linearState) {
	qkv := project(g, x, &w.qkv)
	z := project(g, x, &w.z)
	b := project(g, x, &w.b)
	a := project(g, x, &w.a)
	o, next := linearMix(g, d, w, qkv, z, b, a, st, chunk)
	return project(g, g.astype(o, arrayDType(x)), &w.out), next
}

// linearMix is the block between its projections: qkv ([B, T, convDim], pre-conv rows), z ([B, T, valueDim]),
// b and a ([B, T, Nv]) in; the gated norm's output, float32 [B, T, valueDim], and the new state out.
func linearMix(g *graph, d linearDims, w *linearAttn, qkv, z, b, a C.mlx_array, st linearState, chunk int) (C.mlx_array, linearState) {
	if g.err != nil {
		return qkv, st
	}
	sh := shape(qkv)
	B, T := sh[0], sh[1]
	y, conv := linearConv(g, d, w.conv, qkv, st.conv)
	y = g.astype(y, C.MLX_FLOAT32)
	kd := d.keyDim()
	q := g.reshape(g.slice(y, []int{0, 0, 0}, []int{B, T, kd}), B, T, d.Nk, d.Dk)
	k := g.reshape(g.slice(y, []int{0, 0, kd}, []int{B, T, 2 * kd}), B, T, d.Nk, d.Dk)
	v := g.reshape(g.slice(y, []int{0, 0, 2 * kd}, []int{B, T, d.convDim()}), B, T, d.Nv, d.Dv)
	q = valueHeads(g, d, l2norm(g, q, float32(1/math.Sqrt(float64(d.Dk)))), B, T)
	k = valueHeads(g, d, l2norm(g, k, 1), B, T)
	gl, beta := linearGates(g, w.dtBias, w.aLog, a, b)
	var o, s C.mlx_array
	if chunk > 0 {
		o, s = deltaChunked(g, q, k, v, gl, beta, st.s, chunk)
	} else {
		o, s = deltaRecurrent(g, q, k, v, gl, beta, st.s)
	}
	zf := g.reshape(g.astype(z, C.MLX_FLOAT32), B, T, d.Nv, d.Dv)
	n := g.multiply(g.rmsNorm(o, w.norm, d.Eps), silu(g, zf))
	return g.reshape(n, B, T, d.valueDim()), linearState{conv: conv, s: s}
}

// linearConv is the causal depthwise conv with SiLU over qkv ([B, T, C] pre-conv rows) with the K-1 rows
// before them taken from win ([B, K-1, C]), weights w [K, C]: y_t[c] = silu(Σ_τ w[τ][c]·row_{t−K+1+τ}[c]),
// taps summed in order, in w's dtype. The rows are rounded to win's dtype first (what the window stores), and
// the new window is the last K-1 rows of [win; qkv].
func linearConv(g *graph, d linearDims, w, qkv, win C.mlx_array) (y, next C.mlx_array) {
	if g.err != nil {
		return qkv, win
	}
	sh := shape(qkv)
	B, T, C := sh[0], sh[1], sh[2]
	ext := g.concat(1, win, g.astype(qkv, arrayDType(win))) // [B, T+K-1, C]
	next = g.slice(ext, []int{0, T, 0}, []int{B, T + d.K - 1, C})
	ext = g.astype(ext, arrayDType(w))
	for tau := range d.K {
		tap := g.multiply(g.slice(ext, []int{0, tau, 0}, []int{B, tau + T, C}), g.slice(w, []int{tau, 0}, []int{tau + 1, C}))
		if tau == 0 {
			y = tap
		} else {
			y = g.add(y, tap)
		}
	}
	return silu(g, y), next
}

// l2norm scales each vector along the last axis of x to x / sqrt(Σx² + 1e-6) · scale (HF's l2norm, whose eps
// is fixed, not rms_norm_eps).
func l2norm(g *graph, x C.mlx_array, scale float32) C.mlx_array {
	inv := g.rsqrt(g.add(g.sumAxis(g.multiply(x, x), -1), g.f32(1e-6)))
	if scale != 1 {
		inv = g.multiply(inv, g.f32(scale))
	}
	return g.multiply(x, inv)
}

// valueHeads maps key heads [B, T, Nk, D] onto value heads [B, T, Nv, D]: value head h reads key head
// h/(Nv/Nk) (HF's repeat_interleave).
func valueHeads(g *graph, d linearDims, x C.mlx_array, B, T int) C.mlx_array {
	r := d.Nv / d.Nk
	if r == 1 {
		return x
	}
	x = g.broadcastTo(g.reshape(x, B, T, d.Nk, 1, d.Dk), B, T, d.Nk, r, d.Dk)
	return g.reshape(x, B, T, d.Nv, d.Dk)
}

// linearGates returns the log-decay g = −exp(A_log)·softplus(a + dt_bias) (≤ 0) and the write strength
// β = sigmoid(b), float32 [B, T, Nv]. softplus has torch's threshold: x itself above 20, log1p(exp(x))
// otherwise (exp may overflow there; where drops that branch without multiplying it).
func linearGates(g *graph, dtBias, aLog, a, b C.mlx_array) (gl, beta C.mlx_array) {
	x := g.add(g.astype(a, C.MLX_FLOAT32), dtBias)
	sp := g.where(g.greater(x, g.f32(20)), x, g.log1p(g.exp(x)))
	gl = g.multiply(g.negative(g.exp(aLog)), sp)
	return gl, g.sigmoid(g.astype(b, C.MLX_FLOAT32))
}

func silu(g *graph, x C.mlx_array) C.mlx_array { return g.multiply(x, g.sigmoid(x)) }

// deltaRecurrent runs the delta rule token by token (docs/hybrid-design.md §1.2 step 6) on q, k ([B, T, Nv,
// Dk]), v ([B, T, Nv, Dv]), log-decays gl and strengths beta ([B, T, Nv]) from state s ([B, Nv, Dv, Dk]) and
// returns the read-outs o ([B, T, Nv, Dv]) and the new state, everything float32. It is decode's form (T = 1):
// the graph holds a handle to every step's state until it is freed, so a long T holds T states, and each step
// reads and writes the whole state; prefill takes deltaChunked.
func deltaRecurrent(g *graph, q, k, v, gl, beta, s C.mlx_array) (o, next C.mlx_array) {
	if g.err != nil {
		return q, s
	}
	sh, vs := shape(q), shape(v)
	B, T, Nv, Dk, Dv := sh[0], sh[1], sh[2], sh[3], vs[3]
	alpha := g.exp(gl)
	// Position t of a [B, T, Nv, n] operand as shape; of a [B, T, Nv] one as [B, Nv, 1, 1].
	row := func(x C.mlx_array, t, n int, shape ...int) C.mlx_array {
		return g.reshape(g.slice(x, []int{0, t, 0, 0}, []int{B, t + 1, Nv, n}), shape...)
	}
	gate := func(x C.mlx_array, t int) C.mlx_array {
		return g.reshape(g.slice(x, []int{0, t, 0}, []int{B, t + 1, Nv}), B, Nv, 1, 1)
	}
	outs := make([]C.mlx_array, T)
	for t := range T {
		qt, kt := row(q, t, Dk, B, Nv, 1, Dk), row(k, t, Dk, B, Nv, 1, Dk)
		vt := row(v, t, Dv, B, Nv, Dv, 1)
		s = g.multiply(s, gate(alpha, t))
		u := g.sumAxis(g.multiply(s, kt), -1) // [B, Nv, Dv, 1]
		delta := g.multiply(gate(beta, t), g.subtract(vt, u))
		s = g.add(s, g.multiply(delta, kt))
		outs[t] = g.reshape(g.sumAxis(g.multiply(s, qt), -1), B, 1, Nv, Dv)
	}
	if T == 1 {
		return outs[0], s
	}
	return g.concat(1, outs...), s
}

// shapeOf is a's shape, or nil once the graph has failed (a is then a zero handle).
func shapeOf(g *graph, a C.mlx_array) []int {
	if g.err != nil || a.ctx == nil {
		return nil
	}
	return shape(a)
}

// deltaChunked runs the delta rule in the chunked form of docs/hybrid-design.md §1.3 with chunks of c
// positions on the operands of deltaRecurrent, from state s, and returns the same results. The sequence is
// zero-padded to a multiple of c (k = 0 and β = 0 write nothing, g = 0 keeps the last real position's decay).
//
// Decays come from segment sums, Σ_{j<m≤i} g_m for each pair of a chunk (a masked cumulative sum), rather than
// from differences γ_i − γ_j of the chunk's running sum: a head that forgets fast drives γ to −10⁴ within a
// chunk, where float32's spacing is 10⁻³, and the difference of two such sums would carry that error into
// every decay after it. The mask comes before the exponential (where(mask, sum, −inf), then exp). T = (I − N)⁻¹
// comes from the product (I+N)(I+N²)(I+N⁴)… of the nilpotent N: log₂ c squarings and products of c×c
// matrices, batched over heads and chunks.
func deltaChunked(g *graph, q, k, v, gl, beta, s C.mlx_array, c int) (o, next C.mlx_array) {
	if g.err != nil {
		return q, s
	}
	sh, vs := shape(q), shape(v)
	B, T, Nv, Dk, Dv := sh[0], sh[1], sh[2], sh[3], vs[3]
	nc := (T + c - 1) / c
	pad := nc*c - T
	// [B, T, Nv, D] → [B, Nv, nc, c, D]; [B, T, Nv] → [B, Nv, nc, c].
	chunks := func(x C.mlx_array, dim int) C.mlx_array {
		if dim == 0 {
			if pad > 0 {
				x = g.concat(1, x, g.zeros([]int{B, pad, Nv}, C.MLX_FLOAT32))
			}
			return g.transpose(g.reshape(x, B, nc, c, Nv), 0, 3, 1, 2)
		}
		if pad > 0 {
			x = g.concat(1, x, g.zeros([]int{B, pad, Nv, dim}, C.MLX_FLOAT32))
		}
		return g.transpose(g.reshape(x, B, nc, c, Nv, dim), 0, 3, 1, 2, 4)
	}
	q, k, v = chunks(q, Dk), chunks(k, Dk), chunks(v, Dv)
	gl, beta = chunks(gl, 0), chunks(beta, 0)
	col := func(x C.mlx_array) C.mlx_array { return g.reshape(x, B, Nv, nc, c, 1) } // [.., c] → [.., c, 1]

	lower, strict, eye := g.chunkMasks(c)
	// seg[i][j] = Σ_{j<m≤i} g_m for i > j, 0 on and above the diagonal.
	seg := g.cumsum(g.where(strict, g.broadcastTo(col(gl), B, Nv, nc, c, c), g.f32(0)), -2)
	decay := g.exp(g.where(lower, seg, g.f32(float32(math.Inf(-1))))) // Γ, zero above the diagonal
	gamma := g.cumsum(gl, -1)                                         // γ_i from the chunk's start
	eGamma := col(g.exp(gamma))
	// e^{γ_last − γ_j}: the last row of seg, as a column.
	eRest := g.reshape(g.exp(g.slice(seg, []int{0, 0, 0, c - 1, 0}, []int{B, Nv, nc, c, c})), B, Nv, nc, c, 1)
	eLast := g.reshape(g.exp(g.slice(gamma, []int{0, 0, 0, c - 1}, []int{B, Nv, nc, c})), B, Nv, nc, 1, 1)

	kT := g.transpose(k, 0, 1, 2, 4, 3)
	bcol := col(beta)
	// N_ij = −β_i Γ_ij (k_i·k_j) below the diagonal.
	n := g.where(strict, g.negative(g.multiply(bcol, g.multiply(decay, g.matmul(k, kT)))), g.f32(0))
	tm := triangularInverse(g, n, c, eye)
	u := g.matmul(tm, g.multiply(bcol, v))                      // U = T(β⊙V)
	wk := g.matmul(tm, g.multiply(g.multiply(bcol, eGamma), k)) // W = T(β⊙e^γ⊙K)
	qk := g.multiply(g.matmul(q, kT), decay)                    // (QKᵀ)⊙Γ
	qd := g.multiply(eGamma, q)                                 // e^γ⊙Q
	kd := g.multiply(eRest, k)                                  // e^{γ_last−γ}⊙K
	part := func(x C.mlx_array, i int) C.mlx_array {            // chunk i of [B, Nv, nc, r, cols]: [B, Nv, r, cols]
		xs := shapeOf(g, x)
		if xs == nil {
			return x
		}
		return g.reshape(g.slice(x, []int{0, 0, i, 0, 0}, []int{B, Nv, i + 1, xs[3], xs[4]}), B, Nv, xs[3], xs[4])
	}
	outs := make([]C.mlx_array, nc)
	for i := range nc {
		sT := g.transpose(s, 0, 1, 3, 2)                        // [B, Nv, Dk, Dv]
		vp := g.subtract(part(u, i), g.matmul(part(wk, i), sT)) // V' = U − W S₀ᵀ
		outs[i] = g.add(g.matmul(part(qd, i), sT), g.matmul(part(qk, i), vp))
		s = g.add(g.multiply(part(eLast, i), s), g.matmul(g.transpose(vp, 0, 1, 3, 2), part(kd, i)))
	}
	o = outs[0]
	if nc > 1 {
		o = g.concat(2, outs...) // [B, Nv, nc·c, Dv]
	}
	if pad > 0 {
		o = g.slice(o, []int{0, 0, 0, 0}, []int{B, Nv, T, Dv})
	}
	return g.transpose(o, 0, 2, 1, 3), s
}

// triangularInverse is T = (I − N)⁻¹ for the strictly lower n ([..., c, c]) by recursive doubling: with T
// block-diagonal in blocks of b (at first the identity), T + T (N ⊙ M_b) T, where M_b keeps the lower-left
// b×b block of each diagonal 2b-block, is T block-diagonal in blocks of 2b (the block rule
// [[A, 0], [C, D]]⁻¹ = [[A⁻¹, 0], [−D⁻¹CA⁻¹, D⁻¹]]). ⌈log₂ c⌉ levels of two products of c×c matrices,
// batched over heads and chunks. It is the error behaviour of forward substitution: the nilpotent product
// (I+N)(I+N²)(I+N⁴)… computes the same matrix from powers of N whose entries, for keys of few dims that point
// alike, grow far beyond T's, and at c = 64 loses two more digits in float32 (TestLinearMatchesReference's
// odd shape: 1e-4 against 3e-6).
func triangularInverse(g *graph, n C.mlx_array, c int, eye C.mlx_array) C.mlx_array {
	t := eye
	for b := 1; b < c; b *= 2 {
		m := make([]byte, 4*c*c)
		for i := range c {
			for j := range c {
				if i/(2*b) == j/(2*b) && (i/b)%2 == 1 && (j/b)%2 == 0 {
					putF32(m[4*(i*c+j):], 1)
				}
			}
		}
		off := g.multiply(n, g.data(m, []int{c, c}, C.MLX_FLOAT32))
		t = g.add(t, g.matmul(g.matmul(t, off), t))
	}
	return t
}

// chunkMasks returns for a chunk of c positions the masks j ≤ i and j < i (bool [c, c]) and the identity
// (float32 [c, c]).
func (g *graph) chunkMasks(c int) (lower, strict, eye C.mlx_array) {
	lo, st, id := make([]byte, c*c), make([]byte, c*c), make([]byte, 4*c*c)
	for i := range c {
		for j := 0; j <= i; j++ {
			lo[i*c+j] = 1
			if j < i {
				st[i*c+j] = 1
			}
		}
		putF32(id[4*(i*c+i):], 1)
	}
	return g.data(lo, []int{c, c}, C.MLX_BOOL), g.data(st, []int{c, c}, C.MLX_BOOL), g.data(id, []int{c, c}, C.MLX_FLOAT32)
}

// project is x·Wᵀ (+ bias) for a dense or quantized l: the same product as (*mlxModel).linear, which reads
// nothing of the model, here without one so that the block's functions stand alone.
func project(g *graph, x C.mlx_array, l *linear) C.mlx_array {
	if l.quant != nil {
		y := g.quantizedMatmul(x, l.w, l.scales, l.biases, l.quant)
		if l.bias.ctx != nil {
			y = g.add(y, l.bias)
		}
		return y
	}
	if l.bias.ctx != nil {
		return g.addmm(l.bias, x, l.wT)
	}
	return g.matmul(x, l.wT)
}

// arrayDType is a's element type (float32 for a zero handle, which only a failed graph holds).
func arrayDType(a C.mlx_array) C.mlx_dtype {
	if a.ctx == nil {
		return C.MLX_FLOAT32
	}
	return C.mlx_array_dtype(a)
}

// f32 is a float32 scalar owned by the graph.
func (g *graph) f32(v float32) C.mlx_array {
	var b [4]byte
	putF32(b[:], v)
	return g.data(b[:], nil, C.MLX_FLOAT32)
}

func (g *graph) exp(a C.mlx_array) C.mlx_array {
	return g.op("exp", func(r *C.mlx_array) C.int { return C.mlx_exp(r, a, g.s) })
}

func (g *graph) log1p(a C.mlx_array) C.mlx_array {
	return g.op("log1p", func(r *C.mlx_array) C.int { return C.mlx_log1p(r, a, g.s) })
}

func (g *graph) rsqrt(a C.mlx_array) C.mlx_array {
	return g.op("rsqrt", func(r *C.mlx_array) C.int { return C.mlx_rsqrt(r, a, g.s) })
}
