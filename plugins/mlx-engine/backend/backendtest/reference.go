package backendtest

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Reference is the naive model that backends are checked against: the forward pass of model.Arch's blocks
// written as directly as possible from their definitions (docs/models-design.md §1.2), in float64, over the
// whole history at every position, with no cache, no chunking, no parallelism and no code shared with a
// backend (only the weights, read through package model, and RopeSpec.InvFreq's frequencies). The one
// concession to the backends' semantics is that keys and values are rounded to the model's dtype, because
// that is what a KV cache in that dtype holds.
type Reference struct {
	arch   *model.Arch
	round  func(float64) float64
	embed  [][]float64
	head   [][]float64
	final  []float64
	layers []refLayer
	minGap float64 // MinRouterGap
}

type refLayer struct {
	spec                           *model.LayerSpec
	attnIn, attnOut, ffnIn, ffnOut []float64 // nil where the slot is absent
	qn, kn                         []float64
	sinks                          []float64
	q, k, v, o                     refLinear
	gate, up, down                 refLinear
	inv                            []float64 // rope frequencies
	attnFactor                     float64
	// moe is the layer's mixture of experts as a function of one row (FFNMoE layers).
	moe func(x []float64) []float64
	// lin is a linear layer's Gated DeltaNet block (LayerLinear), instead of the attention fields.
	lin *LinearReference
}

type refLinear struct {
	w    [][]float64
	bias []float64
}

// NewReference reads m's weights into float64 and its blocks from m.Config.Arch (through each layer's Spec).
func NewReference(t testing.TB, m *model.Model) *Reference {
	t.Helper()
	vec := func(ts *safetensors.Tensor) []float64 {
		if ts == nil {
			return nil
		}
		v, err := model.Vector(ts)
		if err != nil {
			t.Fatal(err)
		}
		return f64(v)
	}
	lin := func(l *model.Linear) refLinear {
		f := make([]float32, l.Out*l.In)
		l.Float32(f)
		out := refLinear{w: make([][]float64, l.Out), bias: vec(l.Bias)}
		for r := range out.w {
			out.w[r] = f64(f[r*l.In : (r+1)*l.In])
		}
		return out
	}
	r := &Reference{arch: &m.Config.Arch, minGap: math.Inf(1), round: func(x float64) float64 { return float64(m.DType.Round(float32(x))) }}
	r.embed, r.head, r.final = lin(m.Embed).w, lin(m.LMHead).w, vec(m.Norm)
	for i := range m.Layers {
		L := &m.Layers[i]
		s := L.Spec
		rl := refLayer{spec: s,
			attnIn: vec(L.AttnIn), attnOut: vec(L.AttnOut), ffnIn: vec(L.FFNIn), ffnOut: vec(L.FFNOut),
		}
		if s.Kind == model.LayerLinear {
			rl.lin = r.refLinearLayer(t, m, L)
		} else {
			rl.q, rl.k, rl.v, rl.o = lin(L.Attn.Q), lin(L.Attn.K), lin(L.Attn.V), lin(L.Attn.O)
			rl.qn, rl.kn = vec(L.Attn.QNorm), vec(L.Attn.KNorm)
			if s.Attn.Sinks {
				rl.sinks = vec(L.Attn.Sinks)
			}
			rl.inv, rl.attnFactor = s.Attn.Rope.InvFreq()
		}
		switch s.FFN.Kind {
		case model.FFNDense:
			rl.gate, rl.up, rl.down = lin(L.MLP.Gate), lin(L.MLP.Up), lin(L.MLP.Down)
		case model.FFNMoE:
			rl.moe = r.refMoE(t, L, vec, lin)
		}
		r.layers = append(r.layers, rl)
	}
	return r
}

// refLinearLayer is layer L's Gated DeltaNet block as a LinearReference: the projections read whole through
// package model's row views, the pre-conv rows rounded to the model's dtype as a cache in that dtype holds its
// conv window.
func (r *Reference) refLinearLayer(t testing.TB, m *model.Model, L *model.Layer) *LinearReference {
	t.Helper()
	s, dn := L.Spec.DeltaNet, L.DeltaNet
	d := LinearDims{Hidden: m.Config.Arch.Hidden, Nk: s.KeyHeads, Nv: s.ValueHeads, Dk: s.KeyDim, Dv: s.ValueDim, K: s.ConvKernel, Eps: s.Eps}
	proj := func(p *model.Projection) []float32 {
		f := make([]float32, p.Out*p.In)
		p.Float32(f)
		return f
	}
	vec := func(ts *safetensors.Tensor) []float32 {
		v, err := model.Vector(ts)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	w := &LinearWeights{QKV: proj(dn.QKV), Z: proj(dn.Z), B: proj(dn.B), A: proj(dn.A),
		Conv: vec(dn.Conv), DtBias: vec(dn.DtBias), ALog: vec(dn.ALog), Norm: vec(dn.Norm)}
	w.Out = make([]float32, dn.Out.Out*dn.Out.In)
	dn.Out.Float32(w.Out)
	lr, err := NewLinearReference(d, w)
	if err != nil {
		t.Fatal(err)
	}
	if m.DType != dtype.Float32 {
		lr.Round = r.round
	}
	return lr
}

// refMoE is the float64 mixture of experts of layer L as the Hugging Face modeling files compute it
// (Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock, GptOssMLP; docs/models-design.md
// §1.2): router logits, softmax then top k (optionally renormalised) or top k then softmax over those k, ties
// to the lower expert index (duet's convention), the chosen experts' outputs summed in ascending expert order,
// plus a sigmoid-gated shared expert. It records in r.minGap how close the k-th and (k+1)-th candidates came.
func (r *Reference) refMoE(t testing.TB, L *model.Layer, vec func(*safetensors.Tensor) []float64, lin func(*model.Linear) refLinear) func(x []float64) []float64 {
	t.Helper()
	spec, ffn := *L.Spec.FFN.MoE, L.Spec.FFN
	e := L.MoE
	router := lin(e.Router)
	expert := func(x *model.Experts, i int) refLinear {
		l := lin(&x.Each[i])
		if x.Bias != nil {
			b := vec(x.Bias)
			l.bias = b[i*x.Out : (i+1)*x.Out]
		}
		return l
	}
	gate, up, down := make([]refLinear, spec.Experts), make([]refLinear, spec.Experts), make([]refLinear, spec.Experts)
	for i := range spec.Experts {
		down[i] = expert(e.Down, i)
		if e.GateUp == nil {
			gate[i], up[i] = expert(e.Gate, i), expert(e.Up, i)
			continue
		}
		// Fused rows: gate, up, gate, up, ... when interleaved (gate_up[..., ::2] and [..., 1::2]), else all
		// gate rows then all up rows.
		gu := expert(e.GateUp, i)
		n := len(gu.w) / 2
		for j := range n {
			gi, ui := j, n+j
			if e.Interleaved {
				gi, ui = 2*j, 2*j+1
			}
			gate[i].w, up[i].w = append(gate[i].w, gu.w[gi]), append(up[i].w, gu.w[ui])
			if gu.bias != nil {
				gate[i].bias, up[i].bias = append(gate[i].bias, gu.bias[gi]), append(up[i].bias, gu.bias[ui])
			}
		}
	}
	var shared [3]refLinear
	var sharedGate *refLinear
	if s := e.Shared; s != nil {
		shared = [3]refLinear{lin(s.Gate), lin(s.Up), lin(s.Down)}
	}
	if e.SharedGate != nil {
		g := lin(e.SharedGate)
		sharedGate = &g
	}
	mlp := func(f *model.FFNSpec, g, u, d refLinear, x []float64) []float64 {
		gv, uv := g.apply(x), u.apply(x)
		for i := range gv {
			gv[i] = refAct(f, gv[i], uv[i])
		}
		return d.apply(gv)
	}
	swiglu := model.FFNSpec{Act: model.ActSiLU}
	return func(x []float64) []float64 {
		logits := router.apply(x)
		order := make([]int, len(logits))
		for i := range order {
			order[i] = i
		}
		score := logits
		if spec.Order == model.SoftmaxThenTopK {
			score = softmax(logits)
		}
		sort.SliceStable(order, func(a, b int) bool { return score[order[a]] > score[order[b]] }) // ties: lower index
		k := spec.TopK
		if k < len(score) {
			if gap := score[order[k-1]] - score[order[k]]; gap > 0 {
				r.minGap = math.Min(r.minGap, gap)
			}
		}
		chosen := append([]int(nil), order[:k]...)
		w := make(map[int]float64, k)
		switch spec.Order {
		case model.SoftmaxThenTopK:
			var total float64
			for _, c := range chosen {
				total += score[c]
			}
			for _, c := range chosen {
				w[c] = score[c]
				if spec.NormTopK {
					w[c] /= total
				}
			}
		case model.TopKThenSoftmax:
			top := make([]float64, k)
			for i, c := range chosen {
				top[i] = logits[c]
			}
			for i, p := range softmax(top) {
				w[chosen[i]] = p
			}
		}
		sort.Ints(chosen)
		y := make([]float64, len(x))
		for _, c := range chosen {
			for i, v := range mlp(&ffn, gate[c], up[c], down[c], x) {
				y[i] += w[c] * v
			}
		}
		if shared[0].w != nil {
			g := 1.0
			if sharedGate != nil {
				g = 1 / (1 + math.Exp(-sharedGate.apply(x)[0]))
			}
			for i, v := range mlp(&swiglu, shared[0], shared[1], shared[2], x) {
				y[i] += g * v
			}
		}
		return y
	}
}

func softmax(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	p := make([]float64, len(x))
	var sum float64
	for i, v := range x {
		p[i] = math.Exp(v - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// MinRouterGap is the smallest difference between a router's k-th and (k+1)-th candidate (probability or
// logit, by the router's order) over the positions computed so far, exact ties left out: a backend that routes
// in float32 can choose differently from float64 below about 1e-6, so a test should pick another seed when
// this is small.
func (r *Reference) MinRouterGap() float64 { return r.minGap }

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func (l refLinear) apply(x []float64) []float64 {
	y := make([]float64, len(l.w))
	for r, row := range l.w {
		for c, v := range row {
			y[r] += v * x[c]
		}
		if l.bias != nil {
			y[r] += l.bias[r]
		}
	}
	return y
}

// refNorm is norm s with weight w: x·(mean(x²)+eps)^-½·w, or ·(1+w) for NormRMSPlusOne; the identity when s
// is nil (an absent slot).
func refNorm(s *model.NormSpec, x, w []float64) []float64 {
	y := append([]float64(nil), x...)
	if s == nil {
		return y
	}
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+s.Eps)
	for i := range y {
		g := w[i]
		if s.Kind == model.NormRMSPlusOne {
			g = 1 + w[i]
		}
		y[i] = x[i] * inv * g
	}
	return y
}

// refRope rotates the first len(inv)·2 dims of each head of x (head dim d) by angle pos·θ_i, pairing i with
// i+len(inv) (rotate_half), and scales them by af; the other dims pass through.
func refRope(x []float64, d, pos int, inv []float64, af float64) {
	half := len(inv)
	for h := 0; h < len(x); h += d {
		for i := 0; i < half; i++ {
			a := float64(pos) * inv[i]
			c, s := math.Cos(a)*af, math.Sin(a)*af
			x1, x2 := x[h+i], x[h+i+half]
			x[h+i] = x1*c - x2*s
			x[h+i+half] = x2*c + x1*s
		}
	}
}

func refAct(f *model.FFNSpec, g, u float64) float64 {
	switch f.Act {
	case model.ActSiLU:
		return g / (1 + math.Exp(-g)) * u
	case model.ActGELUTanh:
		return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))) * u
	case model.ActClampedSwiGLU:
		g = math.Min(g, f.Limit)
		u = math.Max(math.Min(u, f.Limit), -f.Limit)
		return (u + 1) * g / (1 + math.Exp(-f.Alpha*g))
	}
	panic(fmt.Sprintf("backendtest: activation %d", f.Act))
}

// ffn adds layer L's feed-forward block of row x to x.
func (r *Reference) ffn(L *refLayer, x []float64) {
	in := refNorm(L.spec.FFNIn, x, L.ffnIn)
	var f []float64
	if L.moe != nil {
		f = L.moe(in)
	} else {
		g, u := L.gate.apply(in), L.up.apply(in)
		for i := range g {
			g[i] = refAct(&L.spec.FFN, g[i], u[i])
		}
		f = L.down.apply(g)
	}
	f = refNorm(L.spec.FFNOut, f, L.ffnOut)
	for i := range f {
		x[i] += f[i]
	}
}

// Logits returns the logits after every position of tokens.
func (r *Reference) Logits(tokens []int32) [][]float64 {
	n := len(tokens)
	xs := make([][]float64, n)
	for p, t := range tokens {
		xs[p] = append([]float64(nil), r.embed[t]...)
		if s := r.arch.EmbedScale; s != 0 {
			for i := range xs[p] {
				xs[p][i] *= s
			}
		}
	}
	for li := range r.layers {
		L := &r.layers[li]
		if L.lin != nil {
			// The whole sequence through the block from the zero state, as the recurrence.
			h := r.arch.Hidden
			in := make([]float64, 0, n*h)
			for p := range xs {
				in = append(in, refNorm(L.spec.AttnIn, xs[p], L.attnIn)...)
			}
			y := L.lin.Forward(NewLinearState(L.lin.d), in, 0)
			for p := range xs {
				a := refNorm(L.spec.AttnOut, y[p*h:(p+1)*h], L.attnOut)
				for i := range a {
					xs[p][i] += a[i]
				}
				r.ffn(L, xs[p])
			}
			continue
		}
		at := &L.spec.Attn
		d, group := at.HeadDim, at.Heads/at.KVHeads
		keys, vals, qs, gates := make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range xs {
			x := refNorm(L.spec.AttnIn, xs[p], L.attnIn)
			q, k, v := L.q.apply(x), L.k.apply(x), L.v.apply(x)
			if at.OutputGate {
				// Each head's rows of q_proj are [query | gate]; the gates wait in gates[p].
				query, gate := make([]float64, 0, at.Heads*d), make([]float64, 0, at.Heads*d)
				for h := 0; h < at.Heads; h++ {
					query = append(query, q[2*h*d:(2*h+1)*d]...)
					gate = append(gate, q[(2*h+1)*d:(2*h+2)*d]...)
				}
				q, gates[p] = query, gate
			}
			if at.QKNorm != nil {
				for h := 0; h < len(q); h += d {
					copy(q[h:h+d], refNorm(at.QKNorm, q[h:h+d], L.qn))
				}
				for h := 0; h < len(k); h += d {
					copy(k[h:h+d], refNorm(at.QKNorm, k[h:h+d], L.kn))
				}
			}
			refRope(q, d, p, L.inv, L.attnFactor)
			refRope(k, d, p, L.inv, L.attnFactor)
			for i := range k {
				k[i], v[i] = r.round(k[i]), r.round(v[i])
			}
			qs[p], keys[p], vals[p] = q, k, v
		}
		for p := range xs {
			att := make([]float64, at.Heads*d)
			for hq := 0; hq < at.Heads; hq++ {
				g := hq / group
				// Positions j ≤ p, and j > p-W with a window W.
				lo := 0
				if at.Window > 0 {
					lo = max(0, p-at.Window+1)
				}
				scores := make([]float64, p+1-lo)
				mx := math.Inf(-1)
				for j := lo; j <= p; j++ {
					var dot float64
					for i := 0; i < d; i++ {
						dot += qs[p][hq*d+i] * keys[j][g*d+i]
					}
					scores[j-lo] = at.Scale * dot
					mx = math.Max(mx, scores[j-lo])
				}
				var sink float64
				if L.sinks != nil {
					mx = math.Max(mx, L.sinks[hq])
					sink = math.Exp(L.sinks[hq] - mx)
				}
				sum := sink
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := range scores {
					for i := 0; i < d; i++ {
						att[hq*d+i] += scores[j] / sum * vals[lo+j][g*d+i]
					}
				}
			}
			if at.OutputGate {
				for i, g := range gates[p] {
					att[i] *= 1 / (1 + math.Exp(-g))
				}
			}
			a := refNorm(L.spec.AttnOut, L.o.apply(att), L.attnOut)
			for i := range a {
				xs[p][i] += a[i]
			}
			r.ffn(L, xs[p])
		}
	}
	out := make([][]float64, n)
	for p := range xs {
		out[p] = refLinear{w: r.head}.apply(refNorm(&r.arch.FinalNorm, xs[p], r.final))
	}
	return out
}
