package cpu

import (
	"math"
)

// noSink is attendHead's sink for heads without one.
var noSink = float32(math.NaN())

// attention is layer L's attention block (docs/models-design.md §1.2) over the rows of the step, from s.xn into
// s.tmp (without the output projection's bias, which addRows adds): q, k and v with their biases, the per-head
// q/k norm, RoPE with the layer's frequencies and attention factor on its rotary dims, k and v written to the
// cache (rounded to its dtype), then every query head over the positions its row sees, read back from the cache.
func (m *cpuModel) attention(L *layer, li int, caches []*cache, parts []part) {
	s := &m.scratch
	rows, hd := s.rows, L.hd
	qDim, kvDim := L.heads*hd, L.kvHeads*hd
	if L.gated {
		m.matmul(s.xn, rows, mm{s.qg, &L.q}, mm{s.k, &L.k}, mm{s.v, &L.v})
	} else {
		m.matmul(s.xn, rows, mm{s.q, &L.q}, mm{s.k, &L.k}, mm{s.v, &L.v})
	}
	m.pool.run(rows, 4, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			q, k, v := s.q[r*qDim:(r+1)*qDim], s.k[r*kvDim:(r+1)*kvDim], s.v[r*kvDim:(r+1)*kvDim]
			if L.gated {
				// q_proj gives each head [query | gate]: split them (its bias covers both).
				qg := s.qg[r*2*qDim : (r+1)*2*qDim]
				addBias(qg, L.q.bias)
				for h := 0; h < L.heads; h++ {
					copy(q[h*hd:(h+1)*hd], qg[2*h*hd:(2*h+1)*hd])
					copy(s.ag[r*qDim+h*hd:r*qDim+(h+1)*hd], qg[(2*h+1)*hd:(2*h+2)*hd])
				}
			} else {
				addBias(q, L.q.bias)
			}
			addBias(k, L.k.bias)
			addBias(v, L.v.bias)
			if L.qNorm != nil {
				for o := 0; o < qDim; o += hd {
					L.qNorm.apply(q[o:o+hd], q[o:o+hd])
				}
				for o := 0; o < kvDim; o += hd {
					L.kNorm.apply(k[o:o+hd], k[o:o+hd])
				}
			}
			cs, sn := s.ropeRow(m, L.rope, r)
			applyRope(q, hd, L.rotDims, cs, sn)
			applyRope(k, hd, L.rotDims, cs, sn)
			caches[s.rowSeq[r]].put(li, s.rowPos[r], k, v)
		}
	})
	m.attend(L, li, caches)
	if L.gated {
		// Qwen3NextAttention: each head's output times σ(its gate), before o_proj.
		m.pool.run(rows, 16, func(_, lo, hi int) {
			for i := lo * qDim; i < hi*qDim; i++ {
				s.att[i] *= sigmoid(s.ag[i])
			}
		})
	}
	for _, p := range parts {
		// After the step's queries have read them: a sliding layer evicts what falls out of its window.
		caches[p.seq].spans.Advance(li, p.pos+p.to-p.from)
	}
	m.matmul(s.att, rows, mm{s.tmp, &L.o})
}

// visibleFrom is the first position a query at p sees: 0, or with a window W, p-W+1 (it sees W positions,
// itself included).
func (L *layer) visibleFrom(p int) int {
	if L.window > 0 {
		return max(0, p-L.window+1)
	}
	return 0
}

// attend computes, for every row and query head, softmax(scale·q·Kᵀ)·V over the positions the row sees
// ([visibleFrom(p), p]), reading keys and values back from the cache in ascending position order (so they carry
// the cache dtype's rounding whether they were computed in this step or imported), with the head's learned sink
// joining the softmax when the layer has sinks. Query heads share KV heads in groups (GQA).
//
// Work is split into tasks of (up to attnBlock consecutive rows of one sequence, one KV head): a task widens
// the span of that head's keys and values that its rows see once for all its rows and all the query heads of
// the group.
func (m *cpuModel) attend(L *layer, li int, caches []*cache) {
	s := &m.scratch
	hd, group, kvHeads := L.hd, L.heads/L.kvHeads, L.kvHeads
	qDim := L.heads * hd
	// Blocks of consecutive rows belonging to the same sequence.
	const attnBlock = 16
	s.blocks = s.blocks[:0]
	for r := 0; r < s.rows; {
		e := r + 1
		for e < s.rows && e-r < attnBlock && s.rowSeq[e] == s.rowSeq[r] {
			e++
		}
		s.blocks = append(s.blocks, [2]int{r, e})
		r = e
	}
	m.pool.run(len(s.blocks)*kvHeads, 1, func(worker, lo, hi int) {
		ws := &m.work[worker]
		for t := lo; t < hi; t++ {
			blk, g := s.blocks[t/kvHeads], t%kvHeads
			first, end := L.visibleFrom(s.rowPos[blk[0]]), s.rowPos[blk[1]-1]+1 // the positions the block sees
			n := end - first
			ws.kbuf, ws.vbuf = grow(ws.kbuf, n*hd), grow(ws.vbuf, n*hd)
			ws.scores = grow(ws.scores, n)
			k, v := caches[s.rowSeq[blk[0]]].span(li, g, first, end, ws.kbuf, ws.vbuf)
			for r := blk[0]; r < blk[1]; r++ {
				a, b := L.visibleFrom(s.rowPos[r])-first, s.rowPos[r]+1-first
				for j := 0; j < group; j++ {
					hq := g*group + j
					sink := noSink
					if L.sinks != nil {
						sink = L.sinks[hq]
					}
					q := s.q[r*qDim+hq*hd : r*qDim+(hq+1)*hd]
					out := s.att[r*qDim+hq*hd : r*qDim+(hq+1)*hd]
					attendHead(m.kern, out, q, k[a*hd:b*hd], v[a*hd:b*hd], ws.scores[:b-a], L.scale, sink)
				}
			}
		}
	})
}

// attendHead is one query head's attention over n positions of one KV head (k, v: [n, head_dim]) with path
// kp's kernels: a row's result depends only on its own query and the cached keys and values, so it is the
// same whatever else shares the step. A sink (not NaN) is a logit that joins the softmax's maximum and
// denominator, added after the positions' terms, and whose probability is dropped.
func attendHead(kp kernelPath, out, q, k, v, scores []float32, scale, sink float32) {
	hd := len(q)
	n := len(scores)
	if s := kp.simd(hd); s != nil {
		s.attendHead(out, q, k, v, scores, scale, sink)
		return
	}
	p := 0
	for ; p+8 <= n; p += 8 {
		s0, s1, s2, s3, s4, s5, s6, s7 := dot8(q, k[p*hd:(p+8)*hd])
		sc := scores[p : p+8 : p+8]
		sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6], sc[7] = s0, s1, s2, s3, s4, s5, s6, s7
	}
	for ; p < n; p++ {
		scores[p] = dot1(q, k[p*hd:(p+1)*hd])
	}
	mx := float32(math.Inf(-1))
	for i := range scores {
		scores[i] *= scale
		mx = max(mx, scores[i])
	}
	hasSink := sink == sink
	if hasSink {
		mx = max(mx, sink)
	}
	var sum float32
	for i, sc := range scores {
		e := float32(math.Exp(float64(sc - mx)))
		scores[i] = e
		sum += e
	}
	if hasSink {
		sum += float32(math.Exp(float64(sink - mx)))
	}
	inv := 1 / sum
	clear(out)
	out = out[:hd]
	for i, e := range scores {
		w := e * inv
		vr := v[i*hd : (i+1)*hd : (i+1)*hd]
		for d := range out {
			out[d] += w * vr[d]
		}
	}
}
