package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// The float64 reference of one Gated DeltaNet ("linear attention") block of qwen3_next and qwen3_5
// (docs/hybrid-design.md §1), restated from the Hugging Face definitions (modeling_qwen3_next.py:
// Qwen3NextGatedDeltaNet, torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule, l2norm,
// Qwen3NextRMSNormGated). It works on plain slices so that it can be checked, and backends checked against it,
// before and apart from the model package: the block's input is the layer's normalised hidden state x_t, its
// output what the decoder layer adds to the residual.
//
// Both forms of the delta rule are here, the recurrence (one token at a time) and the chunked form (what HF and
// the MLX backend run for prefill), so that each checks the other; the chunked form starts from any state,
// which HF never does but a continued prefill needs.

// LinearDims are the sizes of one linear-attention block (docs/hybrid-design.md §1.1).
type LinearDims struct {
	Hidden int
	// Nk key heads (queries share them) of Dk dims, Nv value heads of Dv dims; Nv is a multiple of Nk and value
	// head h reads key head h/(Nv/Nk).
	Nk, Nv, Dk, Dv int
	K              int     // conv taps
	Eps            float64 // rms_norm_eps, of the gated norm
}

// KeyDim, ValueDim and ConvDim are Nk·Dk, Nv·Dv and the conv's channels, 2·KeyDim + ValueDim.
func (d LinearDims) KeyDim() int   { return d.Nk * d.Dk }
func (d LinearDims) ValueDim() int { return d.Nv * d.Dv }
func (d LinearDims) ConvDim() int  { return 2*d.KeyDim() + d.ValueDim() }

// Check reports sizes a block cannot have.
func (d LinearDims) Check() error {
	if d.Hidden <= 0 || d.Nk <= 0 || d.Nv <= 0 || d.Dk <= 0 || d.Dv <= 0 || d.K < 2 {
		return fmt.Errorf("linear block sizes %+v: all must be positive and K at least 2", d)
	}
	if d.Nv%d.Nk != 0 {
		return fmt.Errorf("linear block: %d value heads are not a multiple of %d key heads", d.Nv, d.Nk)
	}
	return nil
}

// LinearWeights are one block's weights, row-major, in the layout a backend holds after load
// (docs/hybrid-design.md §2): the conv-input projection's rows already regrouped into [Q | K | V], each
// head-major, and the conv weight tap-major.
type LinearWeights struct {
	QKV    []float32 // [ConvDim][Hidden]
	Z      []float32 // [ValueDim][Hidden], the gate of the gated norm
	B, A   []float32 // [Nv][Hidden]: β = sigmoid(b), and a, the input of the decay's softplus
	Conv   []float32 // [K][ConvDim]; tap K-1 multiplies the current position
	DtBias []float32 // [Nv]
	ALog   []float32 // [Nv], float32 as every reference reads it
	Norm   []float32 // [Dv], the gated norm's plain weight (never 1+w)
	Out    []float32 // [Hidden][ValueDim]
}

// LinearState is what a sequence carries between calls: the conv window (the K-1 newest pre-conv rows, oldest
// first, [K-1][ConvDim]; zeros before the sequence starts) and the recurrent state S, [Nv][Dv][Dk]
// value-major (HF's tensor is its transpose per head).
type LinearState struct {
	Conv []float64
	S    []float64
}

// NewLinearState is the state before position 0: all zeros.
func NewLinearState(d LinearDims) *LinearState {
	return &LinearState{Conv: make([]float64, (d.K-1)*d.ConvDim()), S: make([]float64, d.Nv*d.Dv*d.Dk)}
}

// Clone returns a copy of s.
func (s *LinearState) Clone() *LinearState {
	return &LinearState{Conv: append([]float64(nil), s.Conv...), S: append([]float64(nil), s.S...)}
}

// Float32 returns the state as a backend holds it: the conv window and the recurrent state as float32, in the
// same layouts ([K-1][ConvDim] and [Nv][Dv][Dk]), rounded to nearest.
func (s *LinearState) Float32() (conv, state []float32) {
	return f32(s.Conv), f32(s.S)
}

// LinearStateFrom is the state a backend's float32 conv window and recurrent state describe (the layouts of
// LinearState), e.g. to continue the reference from a backend's exported state. It copies both.
func LinearStateFrom(d LinearDims, conv, state []float32) (*LinearState, error) {
	if len(conv) != (d.K-1)*d.ConvDim() || len(state) != d.Nv*d.Dv*d.Dk {
		return nil, fmt.Errorf("linear state of %d and %d values, want %d ([K-1][ConvDim]) and %d ([Nv][Dv][Dk])",
			len(conv), len(state), (d.K-1)*d.ConvDim(), d.Nv*d.Dv*d.Dk)
	}
	return &LinearState{Conv: f64(conv), S: f64(state)}, nil
}

func f32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// LinearReference computes one block in float64.
type LinearReference struct {
	d                  LinearDims
	qkv, z, b, a, out  refLinear
	conv               [][]float64 // [K][ConvDim]
	dtBias, aLog, norm []float64
	// Round, when set, rounds a pre-conv row to the dtype the conv window is stored in, as a backend does
	// before the conv reads it (docs/hybrid-design.md §3.1). nil keeps float64.
	Round func(float64) float64
	// ranges seen so far, for LinearRanges.
	ranges LinearRanges
}

// LinearRanges are the extremes of the gates' inputs a reference has met, so that a test can check its inputs
// reach the numerically hard cases (docs/hybrid-design.md §1.4, §6.1).
type LinearRanges struct {
	MinSoftplusIn, MaxSoftplusIn float64 // a + dt_bias
	MinBeta, MaxBeta             float64
	// MinChunkGamma is the lowest cumulative log-decay γ_i inside a 64-position chunk (aligned to the call).
	MinChunkGamma float64
}

// NewLinearReference reads w (checked against d) into float64.
func NewLinearReference(d LinearDims, w *LinearWeights) (*LinearReference, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	cd, vd, h := d.ConvDim(), d.ValueDim(), d.Hidden
	for _, c := range []struct {
		name string
		v    []float32
		n    int
	}{
		{"QKV", w.QKV, cd * h}, {"Z", w.Z, vd * h}, {"B", w.B, d.Nv * h}, {"A", w.A, d.Nv * h},
		{"Conv", w.Conv, d.K * cd}, {"DtBias", w.DtBias, d.Nv}, {"ALog", w.ALog, d.Nv}, {"Norm", w.Norm, d.Dv},
		{"Out", w.Out, h * vd},
	} {
		if len(c.v) != c.n {
			return nil, fmt.Errorf("linear weights: %s has %d values, want %d", c.name, len(c.v), c.n)
		}
	}
	rows := func(v []float32, n int) refLinear {
		l := refLinear{w: make([][]float64, len(v)/n)}
		for r := range l.w {
			l.w[r] = f64(v[r*n : (r+1)*n])
		}
		return l
	}
	r := &LinearReference{d: d,
		qkv: rows(w.QKV, h), z: rows(w.Z, h), b: rows(w.B, h), a: rows(w.A, h), out: rows(w.Out, vd),
		conv: rows(w.Conv, cd).w, dtBias: f64(w.DtBias), aLog: f64(w.ALog), norm: f64(w.Norm),
	}
	r.ranges = LinearRanges{MinSoftplusIn: math.Inf(1), MaxSoftplusIn: math.Inf(-1), MinBeta: 1, MaxBeta: 0}
	return r, nil
}

// Ranges returns the extremes met by every call so far.
func (r *LinearReference) Ranges() LinearRanges { return r.ranges }

// linearSeq is one call's tokens after the conv, the norms and the gates: what the delta rule consumes.
type linearSeq struct {
	q, k    [][]float64 // [T][KeyDim], l2-normalised, q also scaled by Dk^-½
	v, z    [][]float64 // [T][ValueDim]
	g, beta [][]float64 // [T][Nv]: log-decay g ≤ 0 and β
}

// Forward runs the T = len(x)/Hidden rows of x (row-major) through the block from state st, which it advances,
// and returns the outputs, [T][Hidden]. chunk 0 computes the delta rule as the recurrence; chunk C > 0 as the
// chunked form with chunks of C positions, the last one zero-padded as HF pads it.
func (r *LinearReference) Forward(st *LinearState, x []float64, chunk int) []float64 {
	s := r.prepare(st, x)
	var o [][]float64
	if chunk > 0 {
		o = r.chunked(st.S, s, chunk)
	} else {
		o = r.recurrence(st.S, s)
	}
	return r.finish(o, s.z)
}

func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// softplus64 is torch's softplus with its threshold: x itself above 20.
func softplus64(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// prepare computes the projections, the causal conv (advancing st.Conv), the l2 norms and the gates.
func (r *LinearReference) prepare(st *LinearState, x []float64) linearSeq {
	d := r.d
	cd, kd, n := d.ConvDim(), d.KeyDim(), len(x)/d.Hidden
	// ext holds the window's K-1 rows, then this call's pre-conv rows.
	ext := make([][]float64, 0, d.K-1+n)
	for i := range d.K - 1 {
		ext = append(ext, append([]float64(nil), st.Conv[i*cd:(i+1)*cd]...))
	}
	s := linearSeq{}
	for t := range n {
		xt := x[t*d.Hidden : (t+1)*d.Hidden]
		c := r.qkv.apply(xt)
		if r.Round != nil {
			for i := range c {
				c[i] = r.Round(c[i])
			}
		}
		ext = append(ext, c)
		s.z = append(s.z, r.z.apply(xt))
		b, a := r.b.apply(xt), r.a.apply(xt)
		g, beta := make([]float64, d.Nv), make([]float64, d.Nv)
		for h := range d.Nv {
			in := a[h] + r.dtBias[h]
			g[h] = -math.Exp(r.aLog[h]) * softplus64(in)
			beta[h] = 1 / (1 + math.Exp(-b[h]))
			r.ranges.MinSoftplusIn, r.ranges.MaxSoftplusIn = math.Min(r.ranges.MinSoftplusIn, in), math.Max(r.ranges.MaxSoftplusIn, in)
			r.ranges.MinBeta, r.ranges.MaxBeta = math.Min(r.ranges.MinBeta, beta[h]), math.Max(r.ranges.MaxBeta, beta[h])
		}
		s.g, s.beta = append(s.g, g), append(s.beta, beta)
	}
	for h := range d.Nv {
		var gamma float64
		for t := range n {
			if t%64 == 0 {
				gamma = 0
			}
			gamma += s.g[t][h]
			r.ranges.MinChunkGamma = math.Min(r.ranges.MinChunkGamma, gamma)
		}
	}
	for t := range n {
		y := make([]float64, cd)
		for c := range y {
			var sum float64
			for tau := range d.K {
				sum += r.conv[tau][c] * ext[t+tau][c]
			}
			y[c] = silu64(sum)
		}
		q, k, v := y[:kd], y[kd:2*kd], y[2*kd:]
		l2norm64(q, d.Dk, 1/math.Sqrt(float64(d.Dk)))
		l2norm64(k, d.Dk, 1)
		s.q, s.k, s.v = append(s.q, q), append(s.k, k), append(s.v, v)
	}
	for i := range d.K - 1 {
		copy(st.Conv[i*cd:(i+1)*cd], ext[n+i])
	}
	return s
}

// l2norm64 scales each head of x (dh dims) to x / sqrt(Σx² + 1e-6) · scale (HF's l2norm, with its fixed eps).
func l2norm64(x []float64, dh int, scale float64) {
	for h := 0; h < len(x); h += dh {
		var ss float64
		for _, v := range x[h : h+dh] {
			ss += v * v
		}
		inv := scale / math.Sqrt(ss+1e-6)
		for i := h; i < h+dh; i++ {
			x[i] *= inv
		}
	}
}

// recurrence runs the delta rule token by token (docs/hybrid-design.md §1.2 step 6) from state S, which it
// advances, and returns o, [T][ValueDim].
func (r *LinearReference) recurrence(S []float64, s linearSeq) [][]float64 {
	d := r.d
	rep := d.Nv / d.Nk
	o := make([][]float64, len(s.q))
	for t := range s.q {
		o[t] = make([]float64, d.ValueDim())
		for h := range d.Nv {
			j := h / rep
			q, k := s.q[t][j*d.Dk:(j+1)*d.Dk], s.k[t][j*d.Dk:(j+1)*d.Dk]
			alpha, beta := math.Exp(s.g[t][h]), s.beta[t][h]
			for dv := range d.Dv {
				row := S[(h*d.Dv+dv)*d.Dk : (h*d.Dv+dv+1)*d.Dk]
				var u float64
				for i := range row {
					row[i] *= alpha
					u += row[i] * k[i]
				}
				delta := beta * (s.v[t][h*d.Dv+dv] - u)
				var out float64
				for i := range row {
					row[i] += delta * k[i]
					out += row[i] * q[i]
				}
				o[t][h*d.Dv+dv] = out
			}
		}
	}
	return o
}

// chunked runs the delta rule in chunks of c positions (docs/hybrid-design.md §1.3, HF's
// torch_chunk_gated_delta_rule with an initial state) from state S, which it advances, and returns o.
func (r *LinearReference) chunked(S []float64, s linearSeq, c int) [][]float64 {
	d := r.d
	rep, n := d.Nv/d.Nk, len(s.q)
	o := make([][]float64, n)
	for t := range o {
		o[t] = make([]float64, d.ValueDim())
	}
	dot := func(a, b []float64) (sum float64) {
		for i := range a {
			sum += a[i] * b[i]
		}
		return sum
	}
	zk, zv := make([]float64, d.Dk), make([]float64, d.Dv)
	for h := range d.Nv {
		j := h / rep
		Sh := S[h*d.Dv*d.Dk : (h+1)*d.Dv*d.Dk] // [Dv][Dk]
		for c0 := 0; c0 < n; c0 += c {
			// The chunk's rows; past the end, HF's zero padding (q, k, v, β and g all 0).
			q, k, v := make([][]float64, c), make([][]float64, c), make([][]float64, c)
			beta, gamma := make([]float64, c), make([]float64, c)
			var acc float64
			for i := range c {
				q[i], k[i], v[i] = zk, zk, zv
				if t := c0 + i; t < n {
					q[i], k[i], v[i] = s.q[t][j*d.Dk:(j+1)*d.Dk], s.k[t][j*d.Dk:(j+1)*d.Dk], s.v[t][h*d.Dv:(h+1)*d.Dv]
					beta[i] = s.beta[t][h]
					acc += s.g[t][h]
				}
				gamma[i] = acc
			}
			// Γ_ij = exp(γ_i − γ_j) for j ≤ i only: the mask comes before the exponential, whose argument is
			// positive (and may overflow) above the diagonal.
			decay := make([][]float64, c)
			for i := range c {
				decay[i] = make([]float64, c)
				for jj := 0; jj <= i; jj++ {
					decay[i][jj] = math.Exp(gamma[i] - gamma[jj])
				}
			}
			// T = (I − N)^-1 with N_ij = −β_i Γ_ij (k_i·k_j), j < i, by forward substitution: row i of X = T − I is
			// N_i + Σ_{m<i} N_im X_m.
			nm := make([][]float64, c)
			for i := range c {
				nm[i] = make([]float64, c)
				for jj := 0; jj < i; jj++ {
					nm[i][jj] = -beta[i] * decay[i][jj] * dot(k[i], k[jj])
				}
			}
			tm := make([][]float64, c)
			for i := range c {
				tm[i] = make([]float64, c)
				for jj := 0; jj < i; jj++ {
					x := nm[i][jj]
					for m := jj + 1; m < i; m++ {
						x += nm[i][m] * tm[m][jj]
					}
					tm[i][jj] = x
				}
				tm[i][i] = 1
			}
			// U = T(β⊙V), W = T(β⊙e^γ⊙K); V' = U − W S₀ᵀ.
			vp := make([][]float64, c)
			for i := range c {
				u, w := make([]float64, d.Dv), make([]float64, d.Dk)
				for jj := 0; jj <= i; jj++ {
					f := tm[i][jj] * beta[jj]
					fw := f * math.Exp(gamma[jj])
					for dv := range u {
						u[dv] += f * v[jj][dv]
					}
					for dk := range w {
						w[dk] += fw * k[jj][dk]
					}
				}
				for dv := range u {
					u[dv] -= dot(w, Sh[dv*d.Dk:(dv+1)*d.Dk])
				}
				vp[i] = u
			}
			// O_i = e^{γ_i} S₀ q_i + Σ_{j≤i} (q_i·k_j) Γ_ij V'_j.
			for i := range c {
				t := c0 + i
				if t >= n {
					break
				}
				eg := math.Exp(gamma[i])
				out := o[t][h*d.Dv : (h+1)*d.Dv]
				for dv := range out {
					out[dv] = eg * dot(Sh[dv*d.Dk:(dv+1)*d.Dk], q[i])
				}
				for jj := 0; jj <= i; jj++ {
					f := dot(q[i], k[jj]) * decay[i][jj]
					for dv := range out {
						out[dv] += f * vp[jj][dv]
					}
				}
			}
			// S₁ = e^{γ_last} S₀ + Σ_j V'_j (e^{γ_last − γ_j} k_j)ᵀ.
			last := gamma[c-1]
			el := math.Exp(last)
			for i := range Sh {
				Sh[i] *= el
			}
			for jj := range c {
				f := math.Exp(last - gamma[jj])
				for dv := range d.Dv {
					a := vp[jj][dv] * f
					row := Sh[dv*d.Dk : (dv+1)*d.Dk]
					for dk := range row {
						row[dk] += a * k[jj][dk]
					}
				}
			}
		}
	}
	return o
}

// finish applies the gated RMSNorm per value head, w ⊙ o/sqrt(mean(o²)+eps) ⊙ silu(z), and the out
// projection.
func (r *LinearReference) finish(o, z [][]float64) []float64 {
	d := r.d
	y := make([]float64, 0, len(o)*d.Hidden)
	for t := range o {
		n := make([]float64, d.ValueDim())
		for h := 0; h < d.ValueDim(); h += d.Dv {
			oh := o[t][h : h+d.Dv]
			var ss float64
			for _, v := range oh {
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(d.Dv)+d.Eps)
			for i, v := range oh {
				n[h+i] = r.norm[i] * v * inv * silu64(z[t][h+i])
			}
		}
		y = append(y, r.out.apply(n)...)
	}
	return y
}

// RandomLinear returns weights for d that drive the block into the numerically hard cases of
// docs/hybrid-design.md §6.1 for inputs from RandomLinearInput: A_log spread over the heads from log(1e-3) to
// log(16) (from a head that hardly decays to one that forgets within a token, so the cumulative log-decay of a
// 64-chunk goes far below −100); dt_bias and the a projection such that a + dt_bias spans about [−25, 25]
// (both branches of softplus); the b projection such that β spans about [0.02, 0.98]; conv weights N(0, 0.5);
// the gated norm's weight 1 + N(0, 0.1).
func RandomLinear(seed uint64, d LinearDims) *LinearWeights {
	r := rand.New(rand.NewPCG(seed, 0x11ea))
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		return v
	}
	cd, vd, h := d.ConvDim(), d.ValueDim(), d.Hidden
	sh := 1 / math.Sqrt(float64(h))
	w := &LinearWeights{
		QKV: normal(cd*h, sh), Z: normal(vd*h, sh),
		// With inputs N(0, 1), b has std 1.2 (β mostly in [0.02, 0.98]) and a std 5.
		B: normal(d.Nv*h, 1.2*sh), A: normal(d.Nv*h, 5*sh),
		Conv: normal(d.K*cd, 0.5), Out: normal(h*vd, 1/math.Sqrt(float64(vd))),
		DtBias: make([]float32, d.Nv), ALog: make([]float32, d.Nv), Norm: normal(d.Dv, 0.1),
	}
	for i := range w.Norm {
		w.Norm[i]++
	}
	lo, hi := math.Log(1e-3), math.Log(16)
	for i := range d.Nv {
		f := 0.5
		if d.Nv > 1 {
			f = float64(i) / float64(d.Nv-1)
		}
		w.ALog[i] = float32(lo + f*(hi-lo))
		// From −15 on the slowest head (α ≈ 1) to +15 on the fastest (γ below −200 after one token).
		w.DtBias[i] = float32((2*f - 1) * 15)
	}
	return w
}

// RandomLinearInput returns n rows of d.Hidden inputs, N(0, 1).
func RandomLinearInput(seed uint64, d LinearDims, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x1a7e))
	x := make([]float32, n*d.Hidden)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// RandomLinearState returns a non-zero state of the size d asks for: a conv window N(0, 1) and a recurrent
// state N(0, 0.3), every value a float32 (so a float32 backend can hold it exactly), the window's also
// rounded by round when it is set.
func RandomLinearState(seed uint64, d LinearDims, round func(float64) float64) *LinearState {
	r := rand.New(rand.NewPCG(seed, 0x57a7e))
	st := NewLinearState(d)
	for i := range st.Conv {
		st.Conv[i] = float64(float32(r.NormFloat64()))
		if round != nil {
			st.Conv[i] = round(st.Conv[i])
		}
	}
	for i := range st.S {
		st.S[i] = float64(float32(r.NormFloat64() * 0.3))
	}
	return st
}
