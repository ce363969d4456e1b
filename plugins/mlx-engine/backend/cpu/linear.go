package cpu

import (
	"fmt"
	"math"
)

// The Gated DeltaNet ("linear attention") block of hybrid models (qwen3_next, qwen3_5; docs/hybrid-design.md
// §1.2 and §5.1), on plain slices: the layer plumbing (weights from package model, the cache's state, the
// regrouped projections) adapts to these types.
//
// The delta rule runs token by token, for prefill as well as decode: a token's result then depends only on
// the state before it, so a prompt processed in any split, with the state carried, gives the same bits as one
// call or as decoding it token by token (the chunked form, which HF and the MLX backend use, changes with where
// chunks start). Its cost is linear in the tokens, ≈4·Dk·Dv multiply-adds per token and value head. Work is
// parallel over channels (conv), heads (norms) and value heads (the rule, each head's tokens in order, its
// state in cache the whole time); every output is computed by one task in a fixed order, so the thread count
// never changes a bit.
//
// Kernel paths as for the matrix products (simd.go): the Go path rounds every product before adding it
// (kernels.go's rule, so no compiler fusion makes two builds differ) and takes math.Exp for SiLU; a vector path
// runs the delta rule with f32DeltaRows4/1 (internal/kernelgen: fused multiply-adds, the package's 8-lane
// reduction tree) and SiLU with its vector exponential. Each path is exact across splits and thread counts;
// paths differ at the rounding scale. On a vector path the rule takes about a seventh of a whole linear layer's
// prefill time at Qwen3-Next-80B's sizes, the Go row pass about half (BenchmarkLinearLayer, BenchmarkDeltaRule).

// deltaDims are the sizes of one linear block: Nk key heads (shared by the queries) and Nv value heads (a
// multiple of Nk; value head h reads key head h/(Nv/Nk)) of Dk and Dv dims, K conv taps, and the gated norm's
// eps (rms_norm_eps).
type deltaDims struct {
	Nk, Nv, Dk, Dv, K int
	Eps               float32
}

func (d deltaDims) keyDim() int   { return d.Nk * d.Dk }
func (d deltaDims) valueDim() int { return d.Nv * d.Dv }

// convDim is the conv's channels: [Q (Nk·Dk) | K (Nk·Dk) | V (Nv·Dv)].
func (d deltaDims) convDim() int { return 2*d.keyDim() + d.valueDim() }

func (d deltaDims) check() error {
	if d.Nk <= 0 || d.Nv <= 0 || d.Dk <= 0 || d.Dv <= 0 || d.K < 2 {
		return fmt.Errorf("linear attention sizes %+v: heads and dims must be positive and the conv at least 2 taps", d)
	}
	if d.Nv%d.Nk != 0 {
		return fmt.Errorf("linear attention: %d value heads are not a multiple of %d key heads", d.Nv, d.Nk)
	}
	return nil
}

// linearWeights are one linear block's weights, row-major float32, in the layout of docs/hybrid-design.md §2:
// the conv-input projection's rows regrouped into [Q | K | V] (each head-major), the conv weight tap-major.
// linearRule reads Conv, DtBias, ALog, Norm and Round; the projections are read only by linearPrefill.
type linearWeights struct {
	Hidden int
	QKV    []float32 // [convDim][Hidden]
	Z      []float32 // [valueDim][Hidden]: the gated norm's gate
	B, A   []float32 // [Nv][Hidden]: β = sigmoid(b); a feeds the decay's softplus
	Out    []float32 // [Hidden][valueDim]
	Conv   []float32 // [K][convDim]: tap K-1 multiplies the current position
	DtBias []float32 // [Nv]
	ALog   []float32 // [Nv]
	Norm   []float32 // [Dv]: the gated norm's plain weight, multiplied as stored (never 1+w)
	// Round rounds a pre-conv value to the dtype the cache keeps the conv window in (nil: float32). Rows of
	// the current call are rounded too before the conv reads them (docs/hybrid-design.md §3.1), so an output
	// never depends on whether its inputs came from the window or from the call.
	Round func(float32) float32
}

// check reports weights whose lengths do not fit d (projections only when withProj).
func (w *linearWeights) check(d deltaDims, withProj bool) error {
	type part struct {
		name string
		v    []float32
		n    int
	}
	parts := []part{{"conv", w.Conv, d.K * d.convDim()}, {"dt_bias", w.DtBias, d.Nv}, {"A_log", w.ALog, d.Nv}, {"norm", w.Norm, d.Dv}}
	if withProj {
		h := w.Hidden
		parts = append(parts, part{"qkv", w.QKV, d.convDim() * h}, part{"z", w.Z, d.valueDim() * h},
			part{"b", w.B, d.Nv * h}, part{"a", w.A, d.Nv * h}, part{"out", w.Out, h * d.valueDim()})
	}
	for _, p := range parts {
		if len(p.v) != p.n {
			return fmt.Errorf("linear attention weights: %s has %d values, want %d", p.name, len(p.v), p.n)
		}
	}
	return nil
}

// linearState is what one sequence carries between calls for one linear layer: the conv window, the K-1
// newest pre-conv rows ([K-1][convDim], oldest first, already rounded by linearWeights.Round; zeros before
// the sequence starts), and the recurrent state S, [Nv][Dv][Dk] float32, value-major (mlx-lm's layout; HF's
// per-head tensor is its transpose).
type linearState struct {
	Conv []float32
	S    []float32
	next []float32 // scratch for the window being replaced
}

// newLinearState is the state before position 0.
func newLinearState(d deltaDims) *linearState {
	return &linearState{Conv: make([]float32, (d.K-1)*d.convDim()), S: make([]float32, d.Nv*d.Dv*d.Dk)}
}

// linearPrefill runs the T rows of x ([T][w.Hidden]) through the whole block, projections included (on kernel
// path k), from state st, which it advances, and writes the block's output rows into y ([T][w.Hidden]).
// Decode is T = 1. The projections give each row the same bits whatever T is, so the whole block does.
func linearPrefill(p *pool, k kernelPath, d deltaDims, w *linearWeights, st *linearState, x []float32, T int, y []float32) {
	if T <= 0 {
		return
	}
	h, cd, vd := w.Hidden, d.convDim(), d.valueDim()
	buf := make([]float32, T*(cd+2*vd+2*d.Nv))
	qkv, z, o := buf[:T*cd], buf[T*cd:T*(cd+vd)], buf[T*(cd+vd):T*(cd+2*vd)]
	b, a := buf[T*(cd+2*vd):T*(cd+2*vd+d.Nv)], buf[T*(cd+2*vd+d.Nv):]
	project := func(dst, wm []float32, in, out int, x []float32) {
		p.run(out, 32, func(_, lo, hi int) { matmulRows(k, dst, x, wm[lo*in:hi*in], T, in, out, lo, hi) })
	}
	project(qkv, w.QKV, h, cd, x)
	project(z, w.Z, h, vd, x)
	project(b, w.B, h, d.Nv, x)
	project(a, w.A, h, d.Nv, x)
	linearRule(p, k, d, w, st, qkv, z, b, a, o, T)
	project(y, w.Out, vd, h, o)
}

// linearRule is the block between its projections for T tokens: qkv ([T][convDim], the pre-conv rows in
// [Q|K|V] order), z ([T][valueDim]), b and a ([T][Nv]) in; the gated norm's output, the out projection's input,
// into out ([T][valueDim]). It advances st. qkv is overwritten (rounded, then replaced by the conv's output),
// and z by silu(z). Kernel path kp chooses the delta rule's kernel and SiLU's exponential.
func linearRule(p *pool, kp kernelPath, d deltaDims, w *linearWeights, st *linearState, qkv, z, b, a, out []float32, T int) {
	if T <= 0 {
		return
	}
	cd, kd, vd := d.convDim(), d.keyDim(), d.valueDim()
	_, _, _, _, _ = qkv[T*cd-1], z[T*vd-1], b[T*d.Nv-1], a[T*d.Nv-1], out[T*vd-1]
	st.next = grow(st.next, (d.K-1)*cd)
	const convChunk = 256 // channels per task
	p.run(cd, convChunk, func(_, c0, c1 int) {
		linearConv(kp, qkv, st.Conv, st.next, w.Conv, w.Round, d.K, cd, T, c0, c1)
	})
	copy(st.Conv, st.next)
	// q and k per (token, key head): q scaled by Dk^-½ too (the attention scale HF applies inside the rule).
	qScale := 1 / math.Sqrt(float64(d.Dk))
	p.run(2*T*d.Nk, 16, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			t, j := i/(2*d.Nk), i%(2*d.Nk) // j < Nk: query head j; else key head j-Nk
			scale := qScale
			if j >= d.Nk {
				scale = 1
			}
			l2normScale(qkv[t*cd+j*d.Dk:t*cd+(j+1)*d.Dk], scale)
		}
	})
	rep := d.Nv / d.Nk
	p.run(d.Nv, 1, func(_, lo, hi int) {
		for h := lo; h < hi; h++ {
			S := st.S[h*d.Dv*d.Dk : (h+1)*d.Dv*d.Dk]
			j := h / rep
			for t := range T {
				row := qkv[t*cd : (t+1)*cd]
				q, k := row[j*d.Dk:(j+1)*d.Dk], row[kd+j*d.Dk:kd+(j+1)*d.Dk]
				v := row[2*kd+h*d.Dv : 2*kd+(h+1)*d.Dv]
				alpha, beta := deltaGates(a[t*d.Nv+h], b[t*d.Nv+h], w.DtBias[h], w.ALog[h])
				o := out[t*vd+h*d.Dv : t*vd+(h+1)*d.Dv]
				deltaRows(kp, S, k, q, v, o, alpha, beta)
				gate := z[t*vd+h*d.Dv : t*vd+(h+1)*d.Dv]
				silu(kp, gate)
				gatedNorm(o, o, gate, w.Norm, d.Eps)
			}
		}
	})
}

// linearConv is the causal depthwise conv with SiLU (on path kp) over channels [c0, c1) of T rows, in place: x
// ([T][C] pre-conv rows) becomes y, y_t[c] = silu(Σ_τ w[τ][c]·row_{t−K+1+τ}[c]) with the rows before x taken
// from win ([K-1][C]). It rounds the channels' inputs first (round nil: none) and writes the channels' new
// window, the last K-1 rows of [win; x], into next. Taps are summed in order, so the channel range (the thread
// split) never changes a result.
func linearConv(kp kernelPath, x, win, next, w []float32, round func(float32) float32, K, C, T, c0, c1 int) {
	if round != nil {
		for t := range T {
			r := x[t*C+c0 : t*C+c1]
			for i, v := range r {
				r[i] = round(v)
			}
		}
	}
	// row i of [win; x]
	row := func(i int) []float32 {
		if i < K-1 {
			return win[i*C+c0 : i*C+c1]
		}
		i -= K - 1
		return x[i*C+c0 : i*C+c1]
	}
	for i := range K - 1 {
		copy(next[i*C+c0:i*C+c1], row(T+i))
	}
	// Last position first: y_t overwrites x_t, which no earlier position reads.
	for t := T - 1; t >= 0; t-- {
		y := x[t*C+c0 : t*C+c1]
		convTaps(y, row, w, K, C, t, c0, c1)
		silu(kp, y)
	}
}

// convTaps computes y[c] = Σ_{τ<K} w[τ][c]·row(t+τ)[c] for the channels of y, where row(t+K-1) is y itself
// (read before it is written, channel by channel).
func convTaps(y []float32, row func(int) []float32, w []float32, K, C, t, c0, c1 int) {
	n := c1 - c0
	var rows, taps [8][]float32 // K ≤ 8 (4 in every released model): the rows and taps as slices, checked once
	if K <= len(rows) {
		for tau := range K {
			rows[tau], taps[tau] = row(t + tau)[:n], w[tau*C+c0:tau*C+c1]
		}
		for c := range n {
			s := float32(taps[0][c] * rows[0][c])
			for tau := 1; tau < K; tau++ {
				s += float32(taps[tau][c] * rows[tau][c])
			}
			y[c] = s
		}
		return
	}
	for c := range n {
		s := float32(w[c0+c] * row(t)[c])
		for tau := 1; tau < K; tau++ {
			s += float32(w[tau*C+c0+c] * row(t + tau)[c])
		}
		y[c] = s
	}
}

// ones is siluMul's other operand when silu alone is wanted (x·1 is exact).
var ones = func() []float32 {
	o := make([]float32, 1024)
	for i := range o {
		o[i] = 1
	}
	return o
}()

// silu sets x[i] = x[i]/(1+exp(−x[i])) with path kp's exponential (siluMul). Which exponential an element gets
// depends only on its index in x, so callers keep their slices' bounds fixed (a head, a task's channels).
func silu(kp kernelPath, x []float32) {
	for len(x) > 0 {
		n := min(len(x), len(ones))
		siluMul(kp, x[:n], ones)
		x = x[n:]
	}
}

// l2normScale sets x to x / sqrt(Σx² + 1e-6) · scale (HF's l2norm, whose eps is fixed, not rms_norm_eps).
func l2normScale(x []float32, scale float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(scale / math.Sqrt(ss+1e-6))
	for i := range x {
		x[i] *= inv
	}
}

// deltaGates returns one value head's decay α = exp(g), g = −exp(A_log)·softplus(a + dt_bias), and its
// write strength β = sigmoid(b), in float32 as HF casts them; softplus has torch's threshold (x above 20 is
// x). A head that forgets within the token gets α = 0, and so does one whose α would be subnormal (below
// 2^-126, g < −87.3): the state's old part then weighs less than float32 resolves next to the new write, and
// multiplying a whole state by a subnormal would make every element subnormal, which x86 computes with
// microcode assists, many times slower.
func deltaGates(a, b, dtBias, aLog float32) (alpha, beta float32) {
	x := a + dtBias
	sp := x
	if !(x > 20) {
		sp = float32(math.Log1p(math.Exp(float64(x))))
	}
	g := -float32(math.Exp(float64(aLog))) * sp
	alpha = float32(math.Exp(float64(g)))
	if alpha < 0x1p-126 {
		alpha = 0
	}
	return alpha, float32(1 / (1 + math.Exp(-float64(b))))
}

// deltaRows runs the delta rule of one token on a value head's state S ([len(o)][len(k)]): row dv reads v[dv]
// and writes o[dv]. A vector path runs its kernel when the rows are a multiple of 8 long (every released
// model's 128), the Go path and other lengths deltaRow; either way each row is computed alone, the same way
// whichever rows share a call.
func deltaRows(kp kernelPath, S, k, q, v, o []float32, alpha, beta float32) {
	n, rows := len(k), len(o)
	if s := &simdKernels[kp]; kp != pathGo && s.delta4 != nil && n%8 == 0 && rows > 0 {
		// The kernels read and write through pointers: check the extent of every operand once.
		_, _, _ = S[rows*n-1], q[n-1], v[rows-1]
		j := 0
		for ; j+4 <= rows; j += 4 {
			s.delta4(&S[j*n], &k[0], &q[0], &v[j], &o[j], n, alpha, beta)
		}
		for ; j < rows; j++ {
			s.delta1(&S[j*n], &k[0], &q[0], &v[j], &o[j], n, alpha, beta)
		}
		return
	}
	for dv := range o {
		o[dv] = deltaRow(S[dv*n:(dv+1)*n], k, q, alpha, beta, v[dv])
	}
}

// deltaRow is the delta rule of one token on one row of a value head's state (row dv, Dk long): it decays the
// row by α, predicts u = row·k, writes δ = β·(v − u) along k, and returns the read-out row·q. Each dot product
// keeps four accumulators (element i in accumulator i mod 4, the tail in the first), summed as (0+1)+(2+3).
func deltaRow(row, k, q []float32, alpha, beta, v float32) float32 {
	n := len(row)
	k, q = k[:n], q[:n]
	var u0, u1, u2, u3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		r, kk := row[i:i+4:i+4], k[i:i+4:i+4]
		r[0] *= alpha
		r[1] *= alpha
		r[2] *= alpha
		r[3] *= alpha
		u0 += float32(r[0] * kk[0])
		u1 += float32(r[1] * kk[1])
		u2 += float32(r[2] * kk[2])
		u3 += float32(r[3] * kk[3])
	}
	for ; i < n; i++ {
		row[i] *= alpha
		u0 += float32(row[i] * k[i])
	}
	delta := beta * (v - ((u0 + u1) + (u2 + u3)))
	var o0, o1, o2, o3 float32
	i = 0
	for ; i+4 <= n; i += 4 {
		r, kk, qq := row[i:i+4:i+4], k[i:i+4:i+4], q[i:i+4:i+4]
		r[0] += float32(delta * kk[0])
		r[1] += float32(delta * kk[1])
		r[2] += float32(delta * kk[2])
		r[3] += float32(delta * kk[3])
		o0 += float32(r[0] * qq[0])
		o1 += float32(r[1] * qq[1])
		o2 += float32(r[2] * qq[2])
		o3 += float32(r[3] * qq[3])
	}
	for ; i < n; i++ {
		row[i] += float32(delta * k[i])
		o0 += float32(row[i] * q[i])
	}
	return (o0 + o1) + (o2 + o3)
}

// gatedNorm writes w ⊙ (o / sqrt(mean(o²) + eps)) ⊙ gate into dst (dst may be o), gate being silu(z):
// Qwen3NextRMSNormGated, with its plain weight.
func gatedNorm(dst, o, gate, w []float32, eps float32) {
	n := len(o)
	gate, w, dst = gate[:n], w[:n], dst[:n]
	var ss float64
	for _, v := range o {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
	for i, v := range o {
		dst[i] = w[i] * (v * inv) * gate[i]
	}
}
