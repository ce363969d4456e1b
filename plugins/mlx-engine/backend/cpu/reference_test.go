package cpu

import (
	"math"
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
}

type refLayer struct {
	in, post, qn, kn    []float64
	q, k, v, o, g, u, d [][]float64
	qb, kb, vb, ob      []float64
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
	r := &refModel{cfg: m.Config, round: func(x float64) float64 { return float64(m.DType.Round(float32(x))) }}
	r.embed, r.lm = mat(m.Embed), mat(m.LMHead)
	r.norm = norm(model.Vector(m.Norm))
	for i := range m.Layers {
		L := &m.Layers[i]
		rl := refLayer{
			in: norm(model.Vector(L.AttnIn)), post: norm(model.Vector(L.FFNIn)),
			q: mat(L.Attn.Q), k: mat(L.Attn.K), v: mat(L.Attn.V), o: mat(L.Attn.O), g: mat(L.MLP.Gate), u: mat(L.MLP.Up), d: mat(L.MLP.Down),
			qb: bias(L.Attn.Q), kb: bias(L.Attn.K), vb: bias(L.Attn.V), ob: bias(L.Attn.O),
		}
		if L.Attn.QNorm != nil {
			rl.qn, rl.kn = norm(model.Vector(L.Attn.QNorm)), norm(model.Vector(L.Attn.KNorm))
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
	for li, L := range r.layers {
		// A sliding layer's query at p sees [p-W+1, p] (transformers' sliding_window_overlay).
		window := 0
		if li < len(c.Arch.Layers) {
			window = c.Arch.Layers[li].Attn.Window
		}
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
				lo := 0
				if window > 0 {
					lo = max(0, p-window+1)
				}
				mx := math.Inf(-1)
				for j := lo; j <= p; j++ {
					for i := 0; i < d; i++ {
						scores[j] += qs[p][hq*d+i] * keys[j][g*d+i]
					}
					scores[j] /= math.Sqrt(float64(d))
					mx = math.Max(mx, scores[j])
				}
				var sum float64
				for j := lo; j <= p; j++ {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := lo; j <= p; j++ {
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
			g, u := matVec(L.g, xn, nil), matVec(L.u, xn, nil)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			dn := matVec(L.d, g, nil)
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
