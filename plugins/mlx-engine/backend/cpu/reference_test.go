package cpu

import (
	"math"
	"sort"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// refModel is the naive reference the backend is checked against: the forward pass written as directly as
// possible from the model definitions, in float64, one position at a time, with no caching tricks, no
// parallelism and no shared code with the backend (only the weights, read through package model). The one
// concession to the backend's semantics is that keys and values are rounded to the model's dtype, because that
// is what a KV cache in that dtype holds.
type refModel struct {
	cfg    model.Config
	round  func(float64) float64
	embed  [][]float64
	lm     [][]float64
	norm   []float64
	layers []refLayer
	// minGap is the smallest difference between a router's k-th and (k+1)-th probability over the positions
	// computed, exact ties left out: float32 routing can pick differently from float64 below about 1e-6.
	minGap float64
}

type refLayer struct {
	in, post, qn, kn    []float64
	q, k, v, o, g, u, d [][]float64
	qb, kb, vb, ob      []float64
	moe                 *refMoE
}

// refMoE is a sparse feed-forward block as the Hugging Face modeling files compute it (Qwen2MoeSparseMoeBlock,
// Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock): softmax over the router logits, the top k (ties to the
// lower expert index, duet's convention), optionally renormalised, Σ w_e·SwiGLU_e(x), plus a sigmoid-gated
// shared expert.
type refMoE struct {
	spec              model.MoESpec
	router            [][]float64
	gate, up, down    [][][]float64
	sg, su, sd, sgate [][]float64
}

func newRef(t *testing.T, m *model.Model) *refModel {
	t.Helper()
	mat := func(l *model.Linear) [][]float64 {
		f := make([]float32, l.Out*l.In)
		l.Float32(f)
		out := make([][]float64, l.Out)
		for r := range out {
			out[r] = make([]float64, l.In)
			for c := range out[r] {
				out[r][c] = float64(f[r*l.In+c])
			}
		}
		return out
	}
	bias := func(l *model.Linear) []float64 {
		if l.Bias == nil {
			return nil
		}
		v, err := model.Vector(l.Bias)
		if err != nil {
			t.Fatal(err)
		}
		return f64(v)
	}
	norm := func(v []float32, err error) []float64 {
		if err != nil {
			t.Fatal(err)
		}
		return f64(v)
	}
	r := &refModel{cfg: m.Config, minGap: math.Inf(1), round: func(x float64) float64 { return float64(m.DType.Round(float32(x))) }}
	r.embed, r.lm = mat(m.Embed), mat(m.LMHead)
	r.norm = norm(model.Vector(m.Norm))
	for i := range m.Layers {
		L := &m.Layers[i]
		rl := refLayer{
			in: norm(model.Vector(L.AttnIn)), post: norm(model.Vector(L.FFNIn)),
			q: mat(L.Attn.Q), k: mat(L.Attn.K), v: mat(L.Attn.V), o: mat(L.Attn.O),
			qb: bias(L.Attn.Q), kb: bias(L.Attn.K), vb: bias(L.Attn.V), ob: bias(L.Attn.O),
		}
		if L.MLP != nil {
			rl.g, rl.u, rl.d = mat(L.MLP.Gate), mat(L.MLP.Up), mat(L.MLP.Down)
		}
		if L.Attn.QNorm != nil {
			rl.qn, rl.kn = norm(model.Vector(L.Attn.QNorm)), norm(model.Vector(L.Attn.KNorm))
		}
		if e := L.MoE; e != nil {
			rm := &refMoE{spec: *L.Spec.FFN.MoE, router: mat(e.Router)}
			for x := range e.Gate.Each {
				rm.gate = append(rm.gate, mat(&e.Gate.Each[x]))
				rm.up = append(rm.up, mat(&e.Up.Each[x]))
				rm.down = append(rm.down, mat(&e.Down.Each[x]))
			}
			if s := e.Shared; s != nil {
				rm.sg, rm.su, rm.sd = mat(s.Gate), mat(s.Up), mat(s.Down)
			}
			if e.SharedGate != nil {
				rm.sgate = mat(e.SharedGate)
			}
			rl.moe = rm
		}
		r.layers = append(r.layers, rl)
	}
	return r
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func matVec(w [][]float64, x, bias []float64) []float64 {
	y := make([]float64, len(w))
	for r, row := range w {
		for c, v := range row {
			y[r] += v * x[c]
		}
		if bias != nil {
			y[r] += bias[r]
		}
	}
	return y
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i := range x {
		y[i] = x[i] * inv * w[i]
	}
	return y
}

// refInvFreq implements RoPE frequencies from the Llama 3.1 definition.
func refInvFreq(c *model.Config) []float64 {
	d := c.HeadDim
	f := make([]float64, d/2)
	for i := range f {
		f[i] = math.Pow(c.RopeTheta, -float64(2*i)/float64(d))
		if s := c.RopeScaling; s != nil {
			wl := 2 * math.Pi / f[i]
			lo, hi := float64(s.OriginalMaxPositionEmbeddings)/s.LowFreqFactor, float64(s.OriginalMaxPositionEmbeddings)/s.HighFreqFactor
			if wl > lo {
				f[i] /= s.Factor
			} else if wl >= hi {
				sm := (float64(s.OriginalMaxPositionEmbeddings)/wl - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[i] = (1-sm)*f[i]/s.Factor + sm*f[i]
			}
		}
	}
	return f
}

// refRope rotates each head: (x[i], x[i+d/2]) by angle pos·θ_i.
func refRope(x []float64, d, pos int, inv []float64) {
	for h := 0; h < len(x); h += d {
		for i := 0; i < d/2; i++ {
			a := float64(pos) * inv[i]
			x1, x2 := x[h+i], x[h+i+d/2]
			x[h+i] = x1*math.Cos(a) - x2*math.Sin(a)
			x[h+i+d/2] = x2*math.Cos(a) + x1*math.Sin(a)
		}
	}
}

// logits returns the logits after every position of tokens.
func (r *refModel) logits(tokens []int32) [][]float64 {
	c := &r.cfg
	d := c.HeadDim
	inv := refInvFreq(c)
	n := len(tokens)
	xs := make([][]float64, n)
	for p, t := range tokens {
		xs[p] = append([]float64(nil), r.embed[t]...)
	}
	for _, L := range r.layers {
		keys, vals := make([][]float64, n), make([][]float64, n)
		qs := make([][]float64, n)
		for p := range xs {
			xn := refRMSNorm(xs[p], L.in, c.RMSNormEps)
			q, k, v := matVec(L.q, xn, L.qb), matVec(L.k, xn, L.kb), matVec(L.v, xn, L.vb)
			if L.qn != nil {
				for h := 0; h < len(q); h += d {
					copy(q[h:h+d], refRMSNorm(q[h:h+d], L.qn, c.RMSNormEps))
				}
				for h := 0; h < len(k); h += d {
					copy(k[h:h+d], refRMSNorm(k[h:h+d], L.kn, c.RMSNormEps))
				}
			}
			refRope(q, d, p, inv)
			refRope(k, d, p, inv)
			for i := range k {
				k[i], v[i] = r.round(k[i]), r.round(v[i])
			}
			qs[p], keys[p], vals[p] = q, k, v
		}
		for p := range xs {
			att := make([]float64, c.NumHeads*d)
			for hq := 0; hq < c.NumHeads; hq++ {
				g := hq / (c.NumHeads / c.NumKVHeads)
				scores := make([]float64, p+1)
				mx := math.Inf(-1)
				for j := 0; j <= p; j++ {
					for i := 0; i < d; i++ {
						scores[j] += qs[p][hq*d+i] * keys[j][g*d+i]
					}
					scores[j] /= math.Sqrt(float64(d))
					mx = math.Max(mx, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := range scores {
					for i := 0; i < d; i++ {
						att[hq*d+i] += scores[j] / sum * vals[j][g*d+i]
					}
				}
			}
			o := matVec(L.o, att, L.ob)
			for i := range o {
				xs[p][i] += o[i]
			}
			xn := refRMSNorm(xs[p], L.post, c.RMSNormEps)
			var dn []float64
			if L.moe != nil {
				dn = r.moe(L.moe, xn)
			} else {
				dn = refSwiGLU(L.g, L.u, L.d, xn)
			}
			for i := range dn {
				xs[p][i] += dn[i]
			}
		}
	}
	out := make([][]float64, n)
	for p := range xs {
		out[p] = matVec(r.lm, refRMSNorm(xs[p], r.norm, c.RMSNormEps), nil)
	}
	return out
}

func refSwiGLU(gw, uw, dw [][]float64, x []float64) []float64 {
	g, u := matVec(gw, x, nil), matVec(uw, x, nil)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return matVec(dw, g, nil)
}

// moe is the sparse block L at one position.
func (r *refModel) moe(L *refMoE, x []float64) []float64 {
	logits := matVec(L.router, x, nil)
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, v)
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(v - mx)
		sum += p[i]
	}
	order := make([]int, len(p))
	for i := range order {
		p[i] /= sum
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] }) // stable: ties by index
	k := L.spec.TopK
	if k < len(p) {
		if gap := p[order[k-1]] - p[order[k]]; gap > 0 {
			r.minGap = math.Min(r.minGap, gap)
		}
	}
	chosen := append([]int(nil), order[:k]...)
	var total float64
	for _, e := range chosen {
		total += p[e]
	}
	sort.Ints(chosen)
	y := make([]float64, len(x))
	for _, e := range chosen {
		w := p[e]
		if L.spec.NormTopK {
			w /= total
		}
		for i, v := range refSwiGLU(L.gate[e], L.up[e], L.down[e], x) {
			y[i] += w * v
		}
	}
	if L.sg != nil {
		g := 1.0
		if L.sgate != nil {
			z := matVec(L.sgate, x, nil)[0]
			g = 1 / (1 + math.Exp(-z))
		}
		for i, v := range refSwiGLU(L.sg, L.su, L.sd, x) {
			y[i] += g * v
		}
	}
	return y
}
