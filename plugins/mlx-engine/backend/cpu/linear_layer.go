package cpu

import (
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// The Gated DeltaNet layer in the forward pass: the model's projections (row views of the stored matrices,
// regrouped into the block's order) through the package's matrix products, linearRule between them on the
// cache's own conv window and recurrent state, and out_proj.

// linLayer is one linear layer prepared for the forward pass.
type linLayer struct {
	d deltaDims
	w linearWeights // Conv, DtBias, ALog, Norm, Round (the projections are qkv, z, b and a below)
	// qkv, z, b and a produce the conv's input rows, the gated norm's gate, β's b and the decay's a; all four read
	// the same normalised rows, so their parts run as one multi-matmul.
	qkv, z, b, a linProj
	out          linear // out_proj, [Hidden, Nv·Dv]
}

// linProj is a model.Projection prepared: each part a matrix of its own, computing output columns [offs[j],
// offs[j]+parts[j].out) of the projection's rows.
type linProj struct {
	parts []linear
	offs  []int
	out   int
}

// linScratch holds a step's activations of the linear layers.
type linScratch struct {
	parts        []float32 // every part's output, part after part, each [rows][part.out]
	qkv, z, b, a []float32 // the projections' rows in the block's order
	o            []float32 // [rows][Nv·Dv]: the gated norm's output, out_proj's input
	win, next    []float32 // a 16-bit cache's conv window widened; the window being replaced
	jobs         []mm
	partY        [][]float32 // the parts' outputs of projections in several parts, in order
}

func deltaDimsOf(s *model.DeltaNetSpec) deltaDims {
	return deltaDims{Nk: s.KeyHeads, Nv: s.ValueHeads, Dk: s.KeyDim, Dv: s.ValueDim, K: s.ConvKernel, Eps: float32(s.Eps)}
}

// prepareLinear prepares a linear layer of sizes spec from its weights src.
func (m *cpuModel) prepareLinear(spec *model.DeltaNetSpec, src *model.DeltaNet, vec func(*safetensors.Tensor) []float32) (*linLayer, error) {
	d := deltaDimsOf(spec)
	if err := d.check(); err != nil {
		return nil, err
	}
	l := &linLayer{d: d}
	l.w = linearWeights{Hidden: m.arch.Hidden, Conv: vec(src.Conv), DtBias: vec(src.DtBias), ALog: vec(src.ALog), Norm: vec(src.Norm)}
	if m.kvType != dtype.Float32 {
		// The conv window is kept in the layout dtype: the call's own pre-conv rows are rounded alike.
		l.w.Round = m.kvType.Round
	}
	if err := l.w.check(d, false); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		dst *linProj
		src *model.Projection
		out int
	}{{&l.qkv, src.QKV, d.convDim()}, {&l.z, src.Z, d.valueDim()}, {&l.b, src.B, d.Nv}, {&l.a, src.A, d.Nv}} {
		if p.src == nil || p.src.Out != p.out || p.src.In != m.arch.Hidden {
			return nil, fmt.Errorf("linear attention: a projection is not [%d, %d]", p.out, m.arch.Hidden)
		}
		p.dst.out = p.out
		off := 0
		for j := range p.src.Parts {
			part := &p.src.Parts[j]
			lin, err := m.prepare(part)
			if err != nil {
				return nil, err
			}
			if part.Bias != nil {
				return nil, fmt.Errorf("linear attention: %s has a bias, which the block does not have", part.Name)
			}
			p.dst.parts, p.dst.offs = append(p.dst.parts, lin), append(p.dst.offs, off)
			off += part.Out
		}
	}
	var err error
	if l.out, err = m.prepare(src.Out); err != nil {
		return nil, err
	}
	if src.Out.Bias != nil {
		return nil, fmt.Errorf("linear attention: %s has a bias, which the block does not have", src.Out.Name)
	}
	return l, nil
}

// linearBlock is linear layer L's token mixer (layer li of the cache) over the rows of the step, from s.xn into
// s.tmp: the projections, then per sequence linearRule from that sequence's conv window and state, which it
// advances in place, then out_proj. A row's result depends only on its sequence's state before it and its own
// input, so a batch computes what each sequence alone would.
func (m *cpuModel) linearBlock(L *layer, li int, caches []*cache, parts []part) {
	s, ls := &m.scratch, &m.linScratch
	ll, rows := L.lin, s.rows
	d := ll.d
	cd, vd := d.convDim(), d.valueDim()
	projs := [4]*linProj{&ll.qkv, &ll.z, &ll.b, &ll.a}
	ls.qkv, ls.z = grow(ls.qkv, rows*cd), grow(ls.z, rows*vd)
	ls.b, ls.a = grow(ls.b, rows*d.Nv), grow(ls.a, rows*d.Nv)
	ls.o = grow(ls.o, rows*vd)
	dsts := [4][]float32{ls.qkv, ls.z, ls.b, ls.a}
	ls.parts = grow(ls.parts, rows*(cd+vd+2*d.Nv))
	ls.jobs, ls.partY = ls.jobs[:0], ls.partY[:0]
	off := 0
	for i, p := range projs {
		if len(p.parts) == 1 {
			// One part: the projection itself, straight into its rows.
			ls.jobs = append(ls.jobs, mm{dsts[i], &p.parts[0]})
			continue
		}
		for j := range p.parts {
			y := ls.parts[off : off+rows*p.parts[j].out]
			off += rows * p.parts[j].out
			ls.jobs = append(ls.jobs, mm{y, &p.parts[j]})
			ls.partY = append(ls.partY, y)
		}
	}
	m.matmul(s.xn, rows, ls.jobs...)
	if len(ls.partY) > 0 {
		m.pool.run(rows, 16, func(_, lo, hi int) {
			k := 0
			for i, p := range projs {
				if len(p.parts) == 1 {
					continue
				}
				for j := range p.parts {
					y, dst, n := ls.partY[k], dsts[i], p.parts[j].out
					k++
					for r := lo; r < hi; r++ {
						copy(dst[r*p.out+p.offs[j]:r*p.out+p.offs[j]+n], y[r*n:(r+1)*n])
					}
				}
			}
		})
	}
	ls.win = grow(ls.win, (d.K-1)*cd)
	r0 := 0
	for _, p := range parts {
		T := p.to - p.from
		c := caches[p.seq]
		// A float32 cache's window and every cache's state are updated where the cache holds them; a 16-bit
		// window is widened into ls.win and pushed back (its values are rounded already).
		st := linearState{Conv: c.convWindow(li, ls.win), S: c.recurrent(li), next: ls.next}
		linearRule(m.pool, m.kern, d, &ll.w, &st, ls.qkv[r0*cd:(r0+T)*cd], ls.z[r0*vd:(r0+T)*vd],
			ls.b[r0*d.Nv:(r0+T)*d.Nv], ls.a[r0*d.Nv:(r0+T)*d.Nv], ls.o[r0*vd:(r0+T)*vd], T)
		ls.next = st.next
		if m.kvType != dtype.Float32 {
			c.pushConv(li, st.Conv)
		}
		c.spans.Advance(li, p.pos+T)
		r0 += T
	}
	m.matmul(ls.o, rows, mm{s.tmp, &ll.out})
}
