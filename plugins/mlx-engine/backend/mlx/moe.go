//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"errors"
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Mixture of experts (docs/models-design.md §1.2, §5.3). Routing runs in the graph, in float32: the router's
// logits, softmax then top k (or top k then softmax), with a deterministic top k: the k-th largest score v is
// found with topk (its values do not depend on how ties were broken), every expert above v is chosen, and the
// experts equal to v fill the rest in ascending index order (a cumulative count). The chosen experts come out
// in ascending order (an argsort of distinct keys), and their weighted outputs are added in that order, as the
// cpu backend and the reference do. Each expert's matrices are stacked [E, Out, In] once at load, so gather_mm
// (gather_qmm for quantized experts) runs every row's k experts in one product per matrix.

// experts are E matrices [Out, In] stacked in one array, with optional per-expert biases.
type experts struct {
	e, out, in int
	w          C.mlx_array // dense: [E, Out, In]; quantized: packed uint32 [E, Out, In*bits/32]
	wT         C.mlx_array // dense: the view [E, In, Out] that gather_mm multiplies by
	scales     C.mlx_array // quantized: [E, Out, In/group] (uint8 exponents for mxfp4)
	biases     C.mlx_array // affine only
	bias       C.mlx_array // optional [E, Out]
	quant      *model.QuantParams
}

func (x *experts) free() {
	for _, a := range []*C.mlx_array{&x.w, &x.wT, &x.scales, &x.biases, &x.bias} {
		free(a)
	}
}

// moeLayer is a sparse feed-forward block's weights.
type moeLayer struct {
	spec   model.MoESpec
	router linear
	// gateUp, when the checkpoint fuses them, is [E, 2I, H] with rows gate, up, gate, up... when interleaved,
	// else I gate rows then I up rows; otherwise gate and up are separate.
	gate, up, gateUp, down experts
	interleaved            bool
	shared                 *[3]linear // gate, up, down of the shared expert
	sharedGate             *linear
	// order holds the expert indices 0..E-1 and later E..2E-1 (int32), the keys that sort the chosen experts
	// first; k is TopK as an int32 scalar.
	order, later, k C.mlx_array
}

func (l *moeLayer) free() {
	l.router.free()
	for _, x := range []*experts{&l.gate, &l.up, &l.gateUp, &l.down} {
		x.free()
	}
	if l.shared != nil {
		for i := range l.shared {
			l.shared[i].free()
		}
	}
	if l.sharedGate != nil {
		l.sharedGate.free()
	}
	for _, a := range []*C.mlx_array{&l.order, &l.later, &l.k} {
		free(a)
	}
}

// loadMoE loads a sparse block; it runs on the MLX thread.
func (m *mlxModel) loadMoE(src *model.MoE, spec *model.MoESpec) (*moeLayer, error) {
	if src == nil {
		return nil, errors.New("a mixture-of-experts spec without expert weights")
	}
	l := &moeLayer{spec: *spec, interleaved: src.Interleaved}
	var err error
	if l.router, err = m.loadLinear(src.Router); err != nil {
		return l, err
	}
	if src.GateUp != nil {
		if l.gateUp, err = m.loadExperts(src.GateUp); err != nil {
			return l, err
		}
	} else {
		if src.Gate == nil || src.Up == nil {
			return l, fmt.Errorf("%s: experts without gate or up projections", src.Router.Name)
		}
		if l.gate, err = m.loadExperts(src.Gate); err != nil {
			return l, err
		}
		if l.up, err = m.loadExperts(src.Up); err != nil {
			return l, err
		}
	}
	if l.down, err = m.loadExperts(src.Down); err != nil {
		return l, err
	}
	if s := src.Shared; s != nil {
		l.shared = &[3]linear{}
		for i, p := range []*model.Linear{s.Gate, s.Up, s.Down} {
			if l.shared[i], err = m.loadLinear(p); err != nil {
				return l, err
			}
		}
	}
	if src.SharedGate != nil {
		g, err := m.loadLinear(src.SharedGate)
		l.sharedGate = &g
		if err != nil {
			return l, err
		}
	}
	E := spec.Experts
	b := make([]byte, 8*E)
	for i := 0; i < E; i++ {
		putU32(b[4*i:], uint32(i))
		putU32(b[4*(E+i):], uint32(E+i))
	}
	if l.order, err = newArray(b[:4*E], []int{E}, C.MLX_INT32); err != nil {
		return l, err
	}
	if l.later, err = newArray(b[4*E:], []int{E}, C.MLX_INT32); err != nil {
		return l, err
	}
	putU32(b, uint32(spec.TopK))
	l.k, err = newArray(b[:4], nil, C.MLX_INT32)
	return l, err
}

// loadExperts stacks x's matrices into [E, Out, In] arrays: the file's stacked tensor when it has one, else
// the per-expert tensors joined once here.
func (m *mlxModel) loadExperts(x *model.Experts) (experts, error) {
	out := experts{e: x.E, out: x.Out, in: x.In}
	parts := []*model.Linear{x.Stacked}
	if x.Stacked == nil {
		parts = parts[:0]
		for i := range x.Each {
			parts = append(parts, &x.Each[i])
		}
	}
	if len(parts) == 0 {
		return out, fmt.Errorf("%s: no expert weights", x.Name)
	}
	q := parts[0].Quant
	for _, p := range parts {
		if (p.Quant == nil) != (q == nil) || (q != nil && p.Quant.QuantParams != q.QuantParams) {
			return out, fmt.Errorf("%s: experts quantized differently", x.Name)
		}
	}
	if q != nil {
		p := q.QuantParams
		out.quant = &p
	}
	var err error
	stack := func(get func(*model.Linear) C.mlx_array) C.mlx_array {
		g := newGraph()
		defer g.free()
		as := make([]C.mlx_array, len(parts))
		for i, p := range parts {
			as[i] = get(p)
		}
		a := as[0]
		if len(as) > 1 {
			a = g.concat(0, as...)
		}
		n := 1
		for _, d := range shape(a) {
			n *= d
		}
		a = g.reshape(a, x.E, x.Out, n/(x.E*x.Out)) // the file may keep a stacked tensor 2-D or 3-D

		if g.err == nil {
			g.err = evalArrays(a)
		}
		if g.err != nil && err == nil {
			err = g.err
		}
		if err != nil {
			return C.mlx_array{}
		}
		return g.keep(a)
	}
	// Each part's tensors are loaded, joined and freed one matrix kind at a time.
	loadAll := func(d C.mlx_dtype, t func(*model.Linear) *safetensors.Tensor) C.mlx_array {
		loaded := make(map[*model.Linear]C.mlx_array, len(parts))
		defer func() {
			for _, a := range loaded {
				free(&a)
			}
		}()
		for _, p := range parts {
			if err != nil {
				return C.mlx_array{}
			}
			a, e := m.loadTensor(t(p), d)
			if e != nil {
				err = e
				return C.mlx_array{}
			}
			loaded[p] = a
		}
		return stack(func(p *model.Linear) C.mlx_array { return loaded[p] })
	}
	if q != nil {
		out.w = loadAll(C.MLX_UINT32, func(p *model.Linear) *safetensors.Tensor { return p.Weight })
		if q.Mode == model.ModeMXFP4 {
			out.scales = loadAll(C.MLX_UINT8, func(p *model.Linear) *safetensors.Tensor { return p.Quant.Scales })
		} else {
			out.scales = loadAll(m.compute, func(p *model.Linear) *safetensors.Tensor { return p.Quant.Scales })
			out.biases = loadAll(m.compute, func(p *model.Linear) *safetensors.Tensor { return p.Quant.Biases })
		}
	} else {
		out.w = loadAll(m.compute, func(p *model.Linear) *safetensors.Tensor { return p.Weight })
		if err == nil {
			g := newGraph()
			t := g.transpose(out.w, 0, 2, 1)
			if g.err == nil {
				g.err = evalArrays(t)
			}
			if g.err != nil {
				err = g.err
			} else {
				out.wT = g.keep(t)
			}
			g.free()
		}
	}
	if err == nil && x.Bias != nil {
		out.bias, err = m.loadTensor(x.Bias, m.compute)
	}
	if err != nil {
		out.free()
		return experts{}, fmt.Errorf("%s: %w", x.Name, err)
	}
	return out, nil
}

// sortedPairs is the number of (row, expert) pairs from which a step sorts them by expert before the expert
// products (docs/models-design.md §5.2): a prefill chunk's; decoding calls unsorted.
const sortedPairs = 64

// moe computes the sparse block L over h ([rows, H], normalised) and returns [rows, H].
func (m *mlxModel) moe(g *graph, L *layer, h C.mlx_array, rows int) C.mlx_array {
	e := L.moe
	sp := &e.spec
	k := sp.TopK
	logits := g.astype(m.linear(g, h, &e.router), C.MLX_FLOAT32)
	score := logits
	if sp.Order == model.SoftmaxThenTopK {
		score = g.softmax(logits)
	}
	// The chosen experts: above the k-th largest score, then those equal to it in ascending index order.
	vk := g.minAxis(g.topk(score, k), -1) // [rows, 1]
	above := g.greater(score, vk)
	tied := g.equal(score, vk)
	need := g.subtract(e.k, g.sumAxis(g.astype(above, C.MLX_INT32), -1))
	fill := g.lessEqual(g.cumsum(g.astype(tied, C.MLX_INT32), -1), need)
	chosen := g.logicalOr(above, g.logicalAnd(tied, fill))
	ids := g.slice(g.argsort(g.where(chosen, e.order, e.later), -1), []int{0, 0}, []int{rows, k}) // ascending
	var w C.mlx_array
	switch sp.Order {
	case model.SoftmaxThenTopK:
		w = g.takeAlong(score, ids, -1)
		if sp.NormTopK {
			w = g.divide(w, g.sumAxis(w, -1))
		}
	default:
		w = g.softmax(g.takeAlong(logits, ids, -1))
	}
	w = g.astype(w, m.compute)

	// The (row, slot) pairs, each its row's input and one expert: [N, 1, H] and [N]. A prefill's pairs are
	// sorted by expert first (as mlx-lm's SwitchGLU does), so that gather_mm / gather_qmm read each chosen
	// expert once for all its rows, and put back in order after the down projection.
	H, n := m.arch.Hidden, rows*k
	pairIDs := g.reshape(ids, n)
	xs := g.reshape(g.broadcastTo(g.reshape(h, rows, 1, H), rows, k, H), n, 1, H)
	sorted := n >= sortedPairs
	var unsort C.mlx_array
	if sorted {
		order := g.argsort(pairIDs, 0)
		unsort = g.argsort(order, 0)
		pairIDs, xs = g.take(pairIDs, order), g.take(xs, order)
	}
	var gate, up C.mlx_array
	if e.gateUp.e > 0 {
		gu := m.expertsMatmul(g, xs, &e.gateUp, pairIDs, n, sorted) // [N, 1, 2I]
		inter := e.gateUp.out / 2
		if e.interleaved {
			gu = g.reshape(gu, n, 1, inter, 2)
			gate = g.reshape(g.slice(gu, []int{0, 0, 0, 0}, []int{n, 1, inter, 1}), n, 1, inter)
			up = g.reshape(g.slice(gu, []int{0, 0, 0, 1}, []int{n, 1, inter, 2}), n, 1, inter)
		} else {
			gate = g.slice(gu, []int{0, 0, 0}, []int{n, 1, inter})
			up = g.slice(gu, []int{0, 0, inter}, []int{n, 1, 2 * inter})
		}
	} else {
		gate, up = m.expertsMatmul(g, xs, &e.gate, pairIDs, n, sorted), m.expertsMatmul(g, xs, &e.up, pairIDs, n, sorted)
	}
	d := m.expertsMatmul(g, m.activate(g, L, gate, up), &e.down, pairIDs, n, sorted) // [N, 1, H]
	if sorted {
		d = g.take(d, unsort)
	}
	d = g.reshape(d, rows, k, H)
	var y C.mlx_array
	for j := 0; j < k; j++ {
		wj := g.slice(w, []int{0, j}, []int{rows, j + 1})                           // [rows, 1]
		dj := g.reshape(g.slice(d, []int{0, j, 0}, []int{rows, j + 1, H}), rows, H) // [rows, H]
		if t := g.multiply(wj, dj); j == 0 {
			y = t
		} else {
			y = g.add(y, t)
		}
	}
	if sh := e.shared; sh != nil {
		sg, su := m.linear(g, h, &sh[0]), m.linear(g, h, &sh[1])
		ys := m.linear(g, g.multiply(g.multiply(sg, g.sigmoid(sg)), su), &sh[2])
		if e.sharedGate != nil {
			ys = g.multiply(g.sigmoid(m.linear(g, h, e.sharedGate)), ys)
		}
		y = g.add(y, ys)
	}
	return y
}

// expertsMatmul is x·Wᵀ (+ bias) for n pairs of an input row x ([n, 1, In]) and an expert named by ids ([n]
// uint32, ascending when sorted): [n, 1, Out].
func (m *mlxModel) expertsMatmul(g *graph, x C.mlx_array, ex *experts, ids C.mlx_array, n int, sorted bool) C.mlx_array {
	var y C.mlx_array
	if q := ex.quant; q != nil {
		y = g.gatherQMM(x, ex.w, ex.scales, ex.biases, ids, q, sorted)
	} else {
		y = g.gatherMM(x, ex.wT, ids, sorted)
	}
	if ex.bias.ctx != nil {
		y = g.add(y, g.reshape(g.take(ex.bias, ids), n, 1, ex.out))
	}
	return y
}
