package cpu

import (
	"fmt"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// norm is one RMSNorm: x / sqrt(mean(x²) + eps) · w. Gemma's (1+w) form is folded into w at load (1+w rounded
// to float32 is what the float32 product multiplies by either way).
type norm struct {
	w   []float32
	eps float32
}

// newNorm prepares the weights t of a norm of kind spec; nil spec (an absent slot) gives nil, the identity.
func newNorm(spec *model.NormSpec, t []float32) *norm {
	if spec == nil {
		return nil
	}
	if spec.Kind == model.NormRMSPlusOne {
		w := make([]float32, len(t))
		for i, v := range t {
			w[i] = 1 + v
		}
		t = w
	}
	return &norm{w: t, eps: float32(spec.Eps)}
}

// apply writes the norm of x into dst (dst may be x).
func (n *norm) apply(dst, x []float32) { rmsNorm(dst, x, n.w, n.eps) }

// normRows writes the norm of every row of src into dst, or copies them when n is nil (an absent slot).
func (m *cpuModel) normRows(dst, src []float32, n *norm, rows int) {
	h := m.arch.Hidden
	if n == nil {
		copy(dst[:rows*h], src[:rows*h])
		return
	}
	m.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			n.apply(dst[r*h:(r+1)*h], src[r*h:(r+1)*h])
		}
	})
}

// rmsNorm writes x / sqrt(mean(x²) + eps) · w into dst (dst may be x).
func rmsNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w, dst = w[:len(x)], dst[:len(x)]
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

// activation is a gated MLP's elementwise step, g = act(g) ⊙ u, with its parameters.
type activation struct {
	act          model.Act
	alpha, limit float64 // ActClampedSwiGLU
}

func newActivation(f *model.FFNSpec) (activation, error) {
	switch f.Act {
	case model.ActSiLU, model.ActGELUTanh:
	case model.ActClampedSwiGLU:
		if !(f.Limit > 0) || f.Alpha == 0 {
			return activation{}, fmt.Errorf("clamped SwiGLU with alpha %g, limit %g", f.Alpha, f.Limit)
		}
	default:
		return activation{}, fmt.Errorf("activation %d not implemented", f.Act)
	}
	return activation{act: f.Act, alpha: f.Alpha, limit: f.Limit}, nil
}

// apply sets g to act(g) ⊙ u (len(u) ≥ len(g)), element by element, so a token's result never depends on the
// others in the step:
//
//   - SwiGLU: silu(g)·u with the path's exp (siluMul).
//   - GeGLU: gelu_tanh(g)·u, gelu_tanh(z) = 0.5·z·(1+tanh(√(2/π)·(z+0.044715·z³))) (gelu_pytorch_tanh).
//   - clamped SwiGLU (gpt-oss): g = min(g, limit), u = clamp(u, ±limit), (u+1)·g·σ(alpha·g).
//
// The last two compute each element in float64 and round once.
func (a activation) apply(k kernelPath, g, u []float32) {
	u = u[:len(g)]
	switch a.act {
	case model.ActSiLU:
		siluMul(k, g, u)
	case model.ActGELUTanh:
		for i, z := range g {
			g[i] = float32(geluTanh(float64(z)) * float64(u[i]))
		}
	case model.ActClampedSwiGLU:
		for i, z := range g {
			gv := min(float64(z), a.limit)
			uv := min(max(float64(u[i]), -a.limit), a.limit)
			g[i] = float32((uv + 1) * gv / (1 + math.Exp(-a.alpha*gv)))
		}
	}
}

func geluTanh(z float64) float64 {
	return 0.5 * z * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(z+0.044715*z*z*z)))
}

// mlp is layer L's dense feed-forward block over the rows of s.xn, into s.tmp (without down's bias, which
// addRows adds): down(act(gate·x + bg) ⊙ (up·x + bu)).
func (m *cpuModel) mlp(L *layer, rows int) {
	s := &m.scratch
	inter := L.gate.out
	m.matmul(s.xn, rows, mm{s.gate, &L.gate}, mm{s.up, &L.up})
	m.pool.run(rows, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			g, u := s.gate[r*inter:(r+1)*inter], s.up[r*inter:(r+1)*inter]
			addBias(g, L.gate.bias)
			addBias(u, L.up.bias)
			L.act.apply(m.kern, g, u)
		}
	})
	m.matmul(s.gate, rows, mm{s.tmp, &L.down})
}
