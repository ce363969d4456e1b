package cpu

import (
	"fmt"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// scratch holds the activations of one forward step, reused across calls (grown as needed).
type scratch struct {
	rows             int
	x, xn, tmp       []float32 // [rows, hidden]
	q, att           []float32 // [rows, heads*head_dim]
	k, v             []float32 // [rows, kv_heads*head_dim]
	gate, up         []float32 // [rows, intermediate]
	cos, sin         []float32 // [rows, head_dim/2]
	rowSeq, rowPos   []int     // per row: index of its sequence in the batch, its position
	rowTok           []int32   // per row: its token
	blocks           [][2]int  // attention tasks: row ranges of one sequence
	logitRows        []int     // rows whose logits are wanted (last token of a sequence with a Logits buffer)
	logitX, logitOut []float32
}

// workerScratch is per-worker memory for attention.
type workerScratch struct {
	scores     []float32
	kbuf, vbuf []float32
	tile       []float32 // rows of a stored matrix expanded for one matmul task
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// part is the slice of one sequence's tokens that a step processes.
type part struct {
	seq      int
	from, to int // token indices
	pos      int // position of Tokens[from]
}

func (m *cpuModel) Forward(batch []backend.Seq) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return errClosed
	}
	caches, starts, err := backend.CheckBatch(batch, m.cfg.VocabSize, m.maxCtx, m.own)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	for i, c := range caches {
		for l := range c.layers {
			if c.spans[l].Window == 0 {
				c.reserve(l, 0, starts[i]+len(batch[i].Tokens), 0, c.spans[l].Hi)
			}
		}
	}
	// Steps of at most m.chunk tokens: sequences in batch order, long prompts split across steps.
	done := make([]int, len(batch))
	for {
		var parts []part
		budget := m.chunk
		for i, s := range batch {
			if budget == 0 {
				break
			}
			if take := min(len(s.Tokens)-done[i], budget); take > 0 {
				parts = append(parts, part{seq: i, from: done[i], to: done[i] + take, pos: starts[i] + done[i]})
				done[i] += take
				budget -= take
			}
		}
		if len(parts) == 0 {
			return nil
		}
		m.step(batch, caches, parts)
	}
}

// own returns c as one of this model's caches that may be used (CheckBatch).
func (m *cpuModel) own(c backend.Cache) (*cache, backend.LayerSpans, error) {
	cc, ok := c.(*cache)
	if !ok || cc == nil || cc.m != m {
		return nil, nil, backend.ErrForeignCache
	}
	if cc.released {
		return nil, nil, backend.ErrReleased
	}
	return cc, cc.spans, nil
}

// step runs the model over the rows of parts (each row one token of one sequence).
func (m *cpuModel) step(batch []backend.Seq, caches []*cache, parts []part) {
	c := &m.cfg
	h, hd, half := c.HiddenSize, c.HeadDim, c.HeadDim/2
	qDim, kvDim := c.NumHeads*hd, c.NumKVHeads*hd
	rows := 0
	for _, p := range parts {
		rows += p.to - p.from
	}
	s := &m.scratch
	s.rows = rows
	s.x, s.xn, s.tmp = grow(s.x, rows*h), grow(s.xn, rows*h), grow(s.tmp, rows*h)
	s.q, s.att = grow(s.q, rows*qDim), grow(s.att, rows*qDim)
	s.k, s.v = grow(s.k, rows*kvDim), grow(s.v, rows*kvDim)
	s.gate, s.up = grow(s.gate, rows*c.IntermediateSize), grow(s.up, rows*c.IntermediateSize)
	s.cos, s.sin = grow(s.cos, rows*half), grow(s.sin, rows*half)
	s.rowSeq, s.rowPos, s.rowTok = s.rowSeq[:0], s.rowPos[:0], s.rowTok[:0]
	s.logitRows = s.logitRows[:0]
	for _, p := range parts {
		caches[p.seq].reserveStep(p.pos, p.to-p.from)
	}
	for _, p := range parts {
		for t := p.from; t < p.to; t++ {
			s.rowSeq = append(s.rowSeq, p.seq)
			s.rowPos = append(s.rowPos, p.pos+t-p.from)
			s.rowTok = append(s.rowTok, batch[p.seq].Tokens[t])
		}
		if p.to == len(batch[p.seq].Tokens) && batch[p.seq].Logits != nil {
			s.logitRows = append(s.logitRows, len(s.rowSeq)-1)
		}
	}

	m.pool.run(rows, 8, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			m.src.Embed.Row(int(s.rowTok[r]), s.x[r*h:(r+1)*h])
			ropeTable(s.rowPos[r], m.rope, s.cos[r*half:(r+1)*half], s.sin[r*half:(r+1)*half])
		}
	})
	eps := float32(c.RMSNormEps)
	for li := range m.layers {
		L := &m.layers[li]
		m.rmsNormRows(s.xn, s.x, L.inputNorm, rows, eps)
		m.matmul(s.xn, rows, mm{s.q, &L.q}, mm{s.k, &L.k}, mm{s.v, &L.v})
		m.pool.run(rows, 4, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				q, k, v := s.q[r*qDim:(r+1)*qDim], s.k[r*kvDim:(r+1)*kvDim], s.v[r*kvDim:(r+1)*kvDim]
				addBias(q, L.q.bias)
				addBias(k, L.k.bias)
				addBias(v, L.v.bias)
				if L.qNorm != nil {
					for o := 0; o < qDim; o += hd {
						rmsNorm(q[o:o+hd], q[o:o+hd], L.qNorm, eps)
					}
					for o := 0; o < kvDim; o += hd {
						rmsNorm(k[o:o+hd], k[o:o+hd], L.kNorm, eps)
					}
				}
				cs, sn := s.cos[r*half:(r+1)*half], s.sin[r*half:(r+1)*half]
				applyRope(q, hd, cs, sn)
				applyRope(k, hd, cs, sn)
				caches[s.rowSeq[r]].put(li, s.rowPos[r], k, v)
			}
		})
		m.attention(li, caches)
		for _, p := range parts {
			// After the step's queries have read them: a sliding layer evicts what falls out of its window.
			caches[p.seq].spans.Advance(li, p.pos+p.to-p.from)
		}
		m.matmul(s.att, rows, mm{s.tmp, &L.o})
		m.addRows(s.x, s.tmp, L.o.bias, rows)
		m.rmsNormRows(s.xn, s.x, L.postNorm, rows, eps)
		m.matmul(s.xn, rows, mm{s.gate, &L.gate}, mm{s.up, &L.up})
		inter := c.IntermediateSize
		m.pool.run(rows, 4, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				g, u := s.gate[r*inter:(r+1)*inter], s.up[r*inter:(r+1)*inter]
				addBias(g, L.gate.bias)
				addBias(u, L.up.bias)
				siluMul(m.kern, g, u)
			}
		})
		m.matmul(s.gate, rows, mm{s.tmp, &L.down})
		m.addRows(s.x, s.tmp, L.down.bias, rows)
	}
	if len(s.logitRows) == 0 {
		return
	}
	n := len(s.logitRows)
	s.logitX = grow(s.logitX, n*h)
	for i, r := range s.logitRows {
		rmsNorm(s.logitX[i*h:(i+1)*h], s.x[r*h:(r+1)*h], m.norm, eps)
	}
	s.logitOut = grow(s.logitOut, n*c.VocabSize)
	m.matmul(s.logitX, n, mm{s.logitOut, &m.lmHead})
	for i, r := range s.logitRows {
		copy(batch[s.rowSeq[r]].Logits, s.logitOut[i*c.VocabSize:(i+1)*c.VocabSize])
	}
}

// mm is one matrix product of a multi-matmul: y = x·wᵀ.
type mm struct {
	y []float32
	w *linear
}

// storedVecRows is the most rows for which a stored matrix's product runs its decode kernels (each weight
// widened once for all the rows) rather than expanding a tile (BenchmarkThroughput's decode-batch8 of the
// stored formats). A longer prefill chunk shares the expansion across more rows than fit the kernels' tile.
const storedVecRows = 8

// matmul runs several products over the same input rows as one parallel loop over chunks of weight rows, so
// small matrices (k_proj, v_proj) share a dispatch with large ones.
func (m *cpuModel) matmul(x []float32, rows int, jobs ...mm) {
	const chunk = 32 // weight rows per task: a multiple of both kernel tiles (8 and 4)
	var starts [4]int
	total := 0
	for i, j := range jobs {
		starts[i] = total
		total += (j.w.out + chunk - 1) / chunk
	}
	m.pool.run(total, 1, func(worker, lo, hi int) {
		for t := lo; t < hi; t++ {
			i := len(jobs) - 1
			for starts[i] > t {
				i--
			}
			j := jobs[i]
			in := j.w.in
			o0 := (t - starts[i]) * chunk
			o1 := min(o0+chunk, j.w.out)
			w := j.w.w
			if w == nil && rows <= storedVecRows && j.w.st.vecOK(m.kern, in) {
				// Few rows: the decode kernels, which widen or dequantize each weight once for all the rows,
				// cost less than expanding them. They sum as the expanded tile would, so the result is the same.
				j.w.st.vecRowsBatch(m.kern, j.y, x, rows, in, j.w.out, o0, o1)
				continue
			}
			if w == nil {
				// A stored matrix: expand this task's rows into the worker's tile. Decode (rows = 1) pays
				// for the expansion on every step; a prefill chunk shares it across its rows.
				ws := &m.work[worker]
				ws.tile = grow(ws.tile, chunk*in)
				for o := o0; o < o1; o++ {
					j.w.src.Row(o, ws.tile[(o-o0)*in:(o-o0+1)*in])
				}
				w = ws.tile[:(o1-o0)*in]
			} else {
				w = w[o0*in : o1*in]
			}
			matmulRows(m.kern, j.y, x, w, rows, in, j.w.out, o0, o1)
		}
	})
}

func addBias(x, b []float32) {
	if b == nil {
		return
	}
	b = b[:len(x)]
	for i := range x {
		x[i] += b[i]
	}
}

func (m *cpuModel) addRows(x, d, bias []float32, rows int) {
	h := m.cfg.HiddenSize
	m.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dr := x[r*h:(r+1)*h], d[r*h:(r+1)*h]
			addBias(dr, bias)
			for i := range xr {
				xr[i] += dr[i]
			}
		}
	})
}

func (m *cpuModel) rmsNormRows(dst, src, w []float32, rows int, eps float32) {
	h := m.cfg.HiddenSize
	m.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsNorm(dst[r*h:(r+1)*h], src[r*h:(r+1)*h], w, eps)
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

// attention computes, for every row and query head, softmax(q·Kᵀ/sqrt(d))·V over the row's sequence
// positions [0, pos] (in a layer with a window W, [pos-W+1, pos]), in ascending order, reading keys and values back from the cache (so they carry the cache dtype's rounding
// whether they were computed in this step or imported). Query heads share KV heads in groups (GQA).
//
// Work is split into tasks of (up to attnBlock consecutive rows of one sequence, one KV head): a task widens
// that head's 16-bit keys and values once for all its rows and all the query heads of the group.
func (m *cpuModel) attention(li int, caches []*cache) {
	c := &m.cfg
	s := &m.scratch
	hd, group := c.HeadDim, c.NumHeads/c.NumKVHeads
	qDim := c.NumHeads * hd
	window := m.layout.Layers[li].Window
	scale := float32(1 / math.Sqrt(float64(hd)))
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
	m.pool.run(len(s.blocks)*c.NumKVHeads, 1, func(worker, lo, hi int) {
		ws := &m.work[worker]
		for t := lo; t < hi; t++ {
			blk, g := s.blocks[t/c.NumKVHeads], t%c.NumKVHeads
			// Positions the rows of the block see: from the first row's first visible one to the last row.
			lo, hi := firstVisible(s.rowPos[blk[0]], window), s.rowPos[blk[1]-1]+1
			ws.kbuf, ws.vbuf = grow(ws.kbuf, (hi-lo)*hd), grow(ws.vbuf, (hi-lo)*hd)
			ws.scores = grow(ws.scores, hi-lo)
			k, v := caches[s.rowSeq[blk[0]]].span(li, g, lo, hi, ws.kbuf, ws.vbuf)
			for r := blk[0]; r < blk[1]; r++ {
				a, b := firstVisible(s.rowPos[r], window)-lo, s.rowPos[r]+1-lo
				for j := 0; j < group; j++ {
					hq := g*group + j
					q := s.q[r*qDim+hq*hd : r*qDim+(hq+1)*hd]
					out := s.att[r*qDim+hq*hd : r*qDim+(hq+1)*hd]
					attendHead(m.kern, out, q, k[a*hd:b*hd], v[a*hd:b*hd], ws.scores[:b-a], scale)
				}
			}
		}
	})
}

// firstVisible is the first position a query at pos sees: 0, or with a window W, pos-W+1.
func firstVisible(pos, window int) int {
	if window > 0 {
		return max(0, pos-window+1)
	}
	return 0
}

// attendHead is one query head's attention over n positions of one KV head (k, v: [n, head_dim]) with path
// kp's kernels: a row's result depends only on its own query and the cached keys and values, so it is the
// same whatever else shares the step.
func attendHead(kp kernelPath, out, q, k, v, scores []float32, scale float32) {
	hd := len(q)
	n := len(scores)
	if s := kp.simd(hd); s != nil {
		s.attendHead(out, q, k, v, scores, scale)
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
	var sum float32
	for i, sc := range scores {
		e := float32(math.Exp(float64(sc - mx)))
		scores[i] = e
		sum += e
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
