//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"fmt"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// part is the slice of one sequence's tokens that a step processes.
type part struct {
	seq      int
	from, to int // token indices
	pos      int // position of Tokens[from]
	row      int // row of Tokens[from] in the step
}

// timing accumulates where Forward's time goes, for the host-overhead benchmark.
type timing struct {
	steps int
	// build is the time spent building a step's graph (cgo calls and async_eval included); wait is the time
	// blocked in the final mlx_eval of a step; finish is copying logits out and freeing the step's arrays.
	build, wait, finish time.Duration
	// inC is the part of build and finish spent inside mlx-c calls that build or free arrays (MLX's own graph
	// construction), async the part spent in async_eval; measured only when mlxModel.timed is set.
	inC, async time.Duration
}

func (m *mlxModel) Forward(batch []backend.Seq) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	caches, starts, err := backend.CheckBatch(batch, m.cfg.VocabSize, m.maxCtx, m.own)
	if err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	return do(func() error { return m.forward(batch, caches, starts) })
}

// own returns c as one of this model's caches that may be used (CheckBatch).
func (m *mlxModel) own(c backend.Cache) (*cache, backend.LayerSpans, error) {
	cc, ok := c.(*cache)
	if !ok || cc == nil || cc.m != m {
		return nil, nil, backend.ErrForeignCache
	}
	if err := cc.usable(); err != nil {
		return nil, nil, err
	}
	return cc, cc.lens, nil
}

// forward runs on the MLX thread.
func (m *mlxModel) forward(batch []backend.Seq, caches []*cache, starts []int) error {
	// Capacity for the whole call first, so that a memory-limit error changes nothing.
	var more int64
	for i, c := range caches {
		more += c.moreBytes(starts[i] + len(batch[i].Tokens))
	}
	if err := checkMemory(more); err != nil {
		return err
	}
	g := newGraph()
	for i, c := range caches {
		for l := range c.layers {
			if c.lens[l].Window == 0 {
				c.grow(g, l, starts[i]+len(batch[i].Tokens))
			}
		}
	}
	g.free() // the grown buffers are kept by their caches and evaluated with the first step
	if g.err != nil {
		return g.err
	}
	// The linear layers' states at the start, to go back to if a step fails (their handles are cheap: the
	// arrays are immutable).
	saved := make([][]linearState, len(caches))
	for i, c := range caches {
		if c.lin != nil {
			saved[i] = make([]linearState, len(c.lin))
			for l := range c.lin {
				saved[i][l] = retainState(c.lin[l])
			}
		}
	}
	defer func() {
		for _, ss := range saved {
			for l := range ss {
				ss[l].free()
			}
		}
	}()
	// Steps of at most m.chunk tokens: sequences in batch order, long inputs split across steps.
	done := make([]int, len(batch))
	for {
		var parts []part
		budget, rows := m.chunk, 0
		for i, s := range batch {
			if budget == 0 {
				break
			}
			if take := min(len(s.Tokens)-done[i], budget); take > 0 {
				parts = append(parts, part{seq: i, from: done[i], to: done[i] + take, pos: starts[i] + done[i], row: rows})
				done[i] += take
				budget -= take
				rows += take
			}
		}
		if len(parts) == 0 {
			for i, s := range batch {
				if s.Snapshot {
					caches[i].keepSnapshot()
				}
			}
			return nil
		}
		if err := m.step(batch, caches, parts, rows); err != nil {
			// Positions written by earlier steps of this call are dropped again: Len is back where it was.
			for i, c := range caches {
				for l := range saved[i] {
					c.setLinear(l, saved[i][l])
					saved[i][l] = linearState{}
				}
				c.lens.Truncate(starts[i])
			}
			return err
		}
	}
}

// step runs the model over the rows of parts (each row one token of one sequence; a sequence appears at most
// once). The weights are read once for all rows: the projections and the MLP run on all rows together, RoPE,
// the cache update and attention per sequence.
func (m *mlxModel) step(batch []backend.Seq, caches []*cache, parts []part, rows int) error {
	t0 := time.Now()
	c := &m.cfg
	g := newGraph()
	g.timed = m.timed
	defer g.free()

	tokens := make([]int32, 0, rows)
	var logitRows []int32
	var logitSeqs []int
	for _, p := range parts {
		tokens = append(tokens, batch[p.seq].Tokens[p.from:p.to]...)
		if p.to == len(batch[p.seq].Tokens) && batch[p.seq].Logits != nil {
			logitRows = append(logitRows, int32(p.row+p.to-p.from-1))
			logitSeqs = append(logitSeqs, p.seq)
		}
	}
	x := m.embedRows(g, g.int32s(tokens), rows)
	if m.embedScale.ctx != nil {
		x = g.multiply(x, m.embedScale)
	}
	var async time.Duration
	last := len(m.layers) - 1
	outs := make([]C.mlx_array, len(parts))
	written := make([]C.mlx_array, 0, 2*len(parts))
	// pending are the linear layers' new states, committed to their caches once the step has evaluated.
	var pending []pendingState
	defer func() {
		for i := range pending {
			pending[i].st.free()
		}
	}()
	for li := range m.layers {
		L := &m.layers[li]
		if L.lin != nil {
			written = written[:0]
			mix := m.linearLayer(g, L, li, m.norm(g, x, L.attnIn), caches, parts, rows, &pending)
			for _, p := range pending[len(pending)-len(parts):] {
				written = append(written, p.st.conv, p.st.s)
			}
			if li == last && len(logitRows) == 0 {
				break
			}
			x = g.add(x, m.norm(g, mix, L.attnOut))
			x = m.feedForward(g, L, x, rows)
			if m.pipeline && li < last && g.err == nil {
				ta := time.Now()
				g.err = asyncEvalArrays(append(written, x)...)
				async += time.Since(ta)
			}
			continue
		}
		H, KVH, hd := L.heads, L.kvHeads, L.hd
		qDim, kvDim := H*hd, KVH*hd
		h := m.norm(g, x, L.attnIn)
		var q, k, v C.mlx_array
		var gate C.mlx_array
		if L.qGate.out > 0 {
			gate = m.linear(g, h, &L.qGate)
		}
		if L.qkv.out > 0 {
			qkv := m.linear(g, h, &L.qkv)
			q = g.slice(qkv, []int{0, 0}, []int{rows, qDim})
			k = g.slice(qkv, []int{0, qDim}, []int{rows, qDim + kvDim})
			v = g.slice(qkv, []int{0, qDim + kvDim}, []int{rows, qDim + 2*kvDim})
		} else {
			q, k, v = m.linear(g, h, &L.q), m.linear(g, h, &L.k), m.linear(g, h, &L.v)
		}
		written = written[:0]
		for i, p := range parts {
			t := p.to - p.from
			qp, kp, vp := q, k, v
			if len(parts) > 1 {
				qp = g.slice(q, []int{p.row, 0}, []int{p.row + t, qDim})
				kp = g.slice(k, []int{p.row, 0}, []int{p.row + t, kvDim})
				vp = g.slice(v, []int{p.row, 0}, []int{p.row + t, kvDim})
			}
			// [T, heads*head_dim] → [1, heads, T, head_dim]. For one token the transpose is a no-op on the
			// memory layout, so a reshape does it (two ops fewer per projection, on the decode path).
			if t == 1 {
				qp, kp, vp = g.reshape(qp, 1, H, 1, hd), g.reshape(kp, 1, KVH, 1, hd), g.reshape(vp, 1, KVH, 1, hd)
				qp, kp = m.norm(g, qp, L.qNorm), m.norm(g, kp, L.kNorm)
			} else {
				qp, kp, vp = g.reshape(qp, 1, t, H, hd), g.reshape(kp, 1, t, KVH, hd), g.reshape(vp, 1, t, KVH, hd)
				qp, kp = m.norm(g, qp, L.qNorm), m.norm(g, kp, L.kNorm)
				qp, kp, vp = g.transpose(qp, 0, 2, 1, 3), g.transpose(kp, 0, 2, 1, 3), g.transpose(vp, 0, 2, 1, 3)
			}
			qp, kp = g.rope(qp, L.rotDims, p.pos, L.freqs), g.rope(kp, L.rotDims, p.pos, L.freqs)
			if L.ropeScale.ctx != nil {
				qp = g.astype(g.multiply(qp, L.ropeScale), m.compute)
				kp = g.astype(g.multiply(kp, L.ropeScale), m.compute)
			}
			cc := caches[p.seq]
			keys, values, mask := cc.write(g, li, p.pos, t, kp, vp)
			written = append(written, cc.layers[li].k, cc.layers[li].v)
			o := g.attention(qp, keys, values, L.scale, t > 1, mask, L.sinks)
			if t > 1 {
				o = g.transpose(o, 0, 2, 1, 3)
			}
			outs[i] = g.reshape(o, t, qDim)
		}
		if li == last && len(logitRows) == 0 {
			break // the rest of the last layer only feeds the logits
		}
		att := outs[0]
		if len(parts) > 1 {
			att = g.concat(0, outs...)
		}
		if gate.ctx != nil {
			// Gated attention (Qwen3NextAttention): each head's output times σ(its gate), before o_proj.
			att = g.multiply(att, g.sigmoid(gate))
		}
		x = g.add(x, m.norm(g, m.linear(g, att, &L.o), L.attnOut))
		x = m.feedForward(g, L, x, rows)
		if m.pipeline && li < last && g.err == nil {
			// Start computing this layer while the next one is built.
			ta := time.Now()
			g.err = asyncEvalArrays(append(written, x)...)
			async += time.Since(ta)
		}
	}
	// Every layer's cache buffers must be evaluated, not only the last one's: earlier layers are pending
	// unless they were scheduled above.
	outputs := make([]C.mlx_array, 0, 2*len(parts)*len(m.layers)+1)
	for _, p := range parts {
		for li := range m.layers {
			if m.layers[li].lin != nil {
				continue
			}
			l := &caches[p.seq].layers[li]
			outputs = append(outputs, l.k, l.v)
		}
	}
	for _, p := range pending {
		outputs = append(outputs, p.st.conv, p.st.s)
	}
	var logits C.mlx_array
	if len(logitRows) > 0 {
		xl := x
		if len(logitRows) != rows {
			xl = g.take(x, g.int32s(logitRows))
		}
		logits = g.astype(m.linear(g, m.norm(g, xl, m.final), m.lmHead), C.MLX_FLOAT32)
		outputs = append(outputs, logits)
	}
	if g.err != nil {
		return g.err
	}
	t1 := time.Now()
	if err := evalArrays(outputs...); err != nil {
		for _, p := range parts {
			caches[p.seq].broken = fmt.Errorf("mlx: the cache is unusable after a failed evaluation: %w", err)
		}
		return err
	}
	t2 := time.Now()
	if len(logitRows) > 0 {
		all, err := float32Data(logits, len(logitRows)*c.VocabSize)
		if err != nil {
			return err
		}
		for i, s := range logitSeqs {
			copy(batch[s].Logits, all[i*c.VocabSize:(i+1)*c.VocabSize])
		}
	}
	for _, p := range pending {
		p.c.setLinear(p.layer, p.st)
	}
	pending = nil
	for _, p := range parts {
		lens := caches[p.seq].lens
		for li := range lens {
			lens.Advance(li, p.pos+p.to-p.from)
		}
	}
	g.free()
	m.timing.steps++
	m.timing.build += t1.Sub(t0)
	m.timing.wait += t2.Sub(t1)
	m.timing.finish += time.Since(t2)
	m.timing.inC += g.inC
	m.timing.async += async
	return nil
}

// feedForward is x plus layer L's feed-forward block of norm(x) (rows rows).
func (m *mlxModel) feedForward(g *graph, L *layer, x C.mlx_array, rows int) C.mlx_array {
	h := m.norm(g, x, L.ffnIn)
	var f C.mlx_array
	switch {
	case L.moe != nil:
		f = m.moe(g, L, h, rows)
	case L.gateUp.out > 0:
		gu := m.linear(g, h, &L.gateUp)
		inter := L.gateUp.out / 2
		gate, up := g.slice(gu, []int{0, 0}, []int{rows, inter}), g.slice(gu, []int{0, inter}, []int{rows, 2 * inter})
		f = m.linear(g, m.activate(g, L, gate, up), &L.down)
	default:
		f = m.linear(g, m.activate(g, L, m.linear(g, h, &L.gate), m.linear(g, h, &L.up)), &L.down)
	}
	return g.add(x, m.norm(g, f, L.ffnOut))
}

// pendingState is a linear layer's new state for one cache, owned until the step commits it.
type pendingState struct {
	c     *cache
	layer int
	st    linearState
}

// linearLayer runs linear layer li's block on h ([rows, hidden], the normed input) for the sequences of parts
// and returns its output [rows, hidden]; it appends each sequence's new state to pending (one per part, in
// parts' order). Prefill (T > 1) runs the chunked form, decode the recurrence; a step of single tokens runs as
// one batch, the sequences' states concatenated.
func (m *mlxModel) linearLayer(g *graph, L *layer, li int, h C.mlx_array, caches []*cache, parts []part, rows int,
	pending *[]pendingState) C.mlx_array {
	hidden := m.embed.in
	add := func(p part, st linearState) {
		ps := pendingState{c: caches[p.seq], layer: li}
		if g.err == nil {
			ps.st = linearState{conv: g.keep(st.conv), s: g.keep(st.s)}
		}
		*pending = append(*pending, ps)
	}
	if rows == len(parts) && len(parts) > 1 {
		convs, ss := make([]C.mlx_array, len(parts)), make([]C.mlx_array, len(parts))
		for i, p := range parts {
			st := caches[p.seq].linearState(g, li)
			convs[i], ss[i] = st.conv, st.s
		}
		st := linearState{conv: g.concat(0, convs...), s: g.concat(0, ss...)}
		o, next := linearAttention(g, L.linDims, L.lin, g.reshape(h, rows, 1, hidden), st, 0)
		cs, sh := shapeOf(g, next.conv), shapeOf(g, next.s)
		for i, p := range parts {
			if g.err != nil {
				add(p, linearState{})
				continue
			}
			// Contiguous copies: a view would keep the whole batch's state alive in each cache.
			conv := g.contiguous(g.slice(next.conv, []int{i, 0, 0}, []int{i + 1, cs[1], cs[2]}))
			s := g.contiguous(g.slice(next.s, []int{i, 0, 0, 0}, []int{i + 1, sh[1], sh[2], sh[3]}))
			add(p, linearState{conv: conv, s: s})
		}
		return g.reshape(o, rows, hidden)
	}
	outs := make([]C.mlx_array, len(parts))
	for i, p := range parts {
		t := p.to - p.from
		hp := h
		if len(parts) > 1 {
			hp = g.slice(h, []int{p.row, 0}, []int{p.row + t, hidden})
		}
		chunk := 0
		if t > 1 {
			chunk = linearChunk
		}
		o, next := linearAttention(g, L.linDims, L.lin, g.reshape(hp, 1, t, hidden), caches[p.seq].linearState(g, li), chunk)
		outs[i] = g.reshape(o, t, hidden)
		next.conv = g.contiguous(next.conv) // not a view that keeps the whole call's rows alive
		add(p, next)
	}
	if len(parts) == 1 {
		return outs[0]
	}
	return g.concat(0, outs...)
}

// embedRows looks up the embeddings of rows int32 token ids, dequantizing only the rows it gathers.
//
// The gathered rows are unpacked with shifts and masks rather than mlx_dequantize, whose signature changed
// between mlx-c 0.5 (Homebrew's at the time of writing) and 0.6; the arithmetic is MLX's: scale·q + bias per
// group, in the compute dtype.
func (m *mlxModel) embedRows(g *graph, ids C.mlx_array, rows int) C.mlx_array {
	e := &m.embed
	if e.quant == nil {
		return g.take(e.w, ids)
	}
	if e.quant.Mode == model.ModeMXFP4 {
		return g.dequantize(g.take(e.w, ids), g.take(e.scales, ids), C.mlx_array{}, e.quant, m.compute)
	}
	gs, bits := e.quant.GroupSize, e.quant.Bits
	per, groups := 32/bits, e.in/gs
	w := g.reshape(g.take(e.w, ids), rows, e.in/per, 1)
	q := g.bitwiseAnd(g.rightShift(w, m.embShifts), m.embMask) // [rows, in/per, per]: element j of word i is q[i*per+j]
	q = g.reshape(g.astype(q, m.compute), rows, groups, gs)
	scales := g.reshape(g.take(e.scales, ids), rows, groups, 1)
	biases := g.reshape(g.take(e.biases, ids), rows, groups, 1)
	return g.reshape(g.add(g.multiply(q, scales), biases), rows, e.in)
}

// norm applies n over the last axis of x; a nil n (an absent slot) is the identity.
func (m *mlxModel) norm(g *graph, x C.mlx_array, n *norm) C.mlx_array {
	if n == nil {
		return x
	}
	return g.rmsNorm(x, n.w, n.eps)
}

// activate is act(gate) ⊙ up for layer L's activation, in the compute dtype:
//
//   - SwiGLU: silu(g)·u.
//   - GeGLU: gelu_tanh(g)·u, gelu_tanh(z) = 0.5·z·(1+tanh(√(2/π)·(z+0.044715·z³))).
//   - clamped SwiGLU (gpt-oss): g = min(g, limit), u = clamp(u, ±limit), (u+1)·g·σ(alpha·g).
func (m *mlxModel) activate(g *graph, L *layer, gate, up C.mlx_array) C.mlx_array {
	switch L.act {
	case model.ActGELUTanh:
		k := &m.consts
		z3 := g.multiply(g.multiply(gate, gate), gate)
		inner := g.multiply(k.geluK, g.add(gate, g.multiply(k.geluA, z3)))
		return g.multiply(g.multiply(g.multiply(k.half, gate), g.add(k.one, g.tanh(inner))), up)
	case model.ActClampedSwiGLU:
		gc := g.minimum(gate, L.limit)
		uc := g.clip(up, g.negative(L.limit), L.limit)
		glu := g.multiply(gc, g.sigmoid(g.multiply(L.alpha, gc)))
		return g.multiply(g.add(uc, m.consts.one), glu)
	}
	return g.multiply(g.multiply(gate, g.sigmoid(gate)), up)
}

// linear is x·Wᵀ (+ bias).
func (m *mlxModel) linear(g *graph, x C.mlx_array, l *linear) C.mlx_array {
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
