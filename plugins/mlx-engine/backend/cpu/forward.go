package cpu

import (
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// scratch holds the activations of one forward step, reused across calls (grown as needed).
type scratch struct {
	rows             int
	x, xn, tmp       []float32 // [rows, hidden]
	q, att           []float32 // [rows, heads*head_dim]
	qg, ag           []float32 // gated attention: q_proj's rows [rows, heads*2*head_dim]; the gates [rows, heads*head_dim]
	k, v             []float32 // [rows, kv_heads*head_dim]
	gate, up         []float32 // [rows, intermediate]
	cos, sin         []float32 // [ropes][rows, dims.half]: each distinct rope's table per row
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

// ropeRow is row r's cos and sin table of rope ri.
func (s *scratch) ropeRow(m *cpuModel, ri, r int) (cos, sin []float32) {
	half := len(m.ropes[ri].inv)
	o := (ri*s.rows + r) * m.dims.half
	return s.cos[o : o+half], s.sin[o : o+half]
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
			for i, s := range batch {
				if s.Snapshot {
					caches[i].keepSnapshot()
				}
			}
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

// step runs the model over the rows of parts (each row one token of one sequence): the block loop
//
//	h = embed(tokens) [· EmbedScale]
//	for each layer:  h += norm_AttnOut(attention(norm_AttnIn(h)));  h += norm_FFNOut(ffn(norm_FFNIn(h)))
//	logits = head(norm_Final(h))
//
// where an absent norm slot is the identity, a linear layer's token mixer is its Gated DeltaNet block
// (linear_layer.go) instead of attention, and the FFN is the layer's MLP or mixture of experts. Each block
// (attn.go, ffn.go) switches on its spec's options only.
func (m *cpuModel) step(batch []backend.Seq, caches []*cache, parts []part) {
	h := m.arch.Hidden
	rows := 0
	for _, p := range parts {
		rows += p.to - p.from
	}
	s := &m.scratch
	s.rows = rows
	s.x, s.xn, s.tmp = grow(s.x, rows*h), grow(s.xn, rows*h), grow(s.tmp, rows*h)
	s.q, s.att = grow(s.q, rows*m.dims.q), grow(s.att, rows*m.dims.q)
	s.qg, s.ag = grow(s.qg, rows*2*m.dims.qg), grow(s.ag, rows*m.dims.qg)
	s.k, s.v = grow(s.k, rows*m.dims.kv), grow(s.v, rows*m.dims.kv)
	s.gate, s.up = grow(s.gate, rows*m.dims.inter), grow(s.up, rows*m.dims.inter)
	s.cos, s.sin = grow(s.cos, len(m.ropes)*rows*m.dims.half), grow(s.sin, len(m.ropes)*rows*m.dims.half)
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

	embedScale := float32(m.arch.EmbedScale)
	m.pool.run(rows, 8, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			x := s.x[r*h : (r+1)*h]
			m.src.Embed.Row(int(s.rowTok[r]), x)
			if embedScale != 0 {
				for i := range x {
					x[i] *= embedScale
				}
			}
			for ri := range m.ropes {
				cs, sn := s.ropeRow(m, ri, r)
				ropeTable(s.rowPos[r], &m.ropes[ri], cs, sn)
			}
		}
	})
	for li := range m.layers {
		L := &m.layers[li]
		m.normRows(s.xn, s.x, L.attnIn, rows)
		if L.lin != nil {
			m.linearBlock(L, li, caches, parts)
		} else {
			m.attention(L, li, caches, parts)
		}
		m.addRows(s.x, s.tmp, L.o.bias, L.attnOut, rows)
		m.normRows(s.xn, s.x, L.ffnIn, rows)
		var bias []float32
		if L.moe != nil {
			m.moe(L.moe, s.xn, s.tmp, rows)
		} else {
			m.mlp(L, rows)
			bias = L.down.bias
		}
		m.addRows(s.x, s.tmp, bias, L.ffnOut, rows)
	}
	if len(s.logitRows) == 0 {
		return
	}
	n, vocab := len(s.logitRows), m.arch.Vocab
	s.logitX = grow(s.logitX, n*h)
	for i, r := range s.logitRows {
		m.final.apply(s.logitX[i*h:(i+1)*h], s.x[r*h:(r+1)*h])
	}
	s.logitOut = grow(s.logitOut, n*vocab)
	m.matmul(s.logitX, n, mm{s.logitOut, &m.lmHead})
	for i, r := range s.logitRows {
		copy(batch[s.rowSeq[r]].Logits, s.logitOut[i*vocab:(i+1)*vocab])
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

// inlineMACs is the most multiply-adds a matmul runs on the calling goroutine alone: waking a worker and
// waiting for it costs more than it saves on a product this small (a mixture of experts' router in decode).
const inlineMACs = 1 << 16

// taskRows is how many weight rows one parallel task of a product over rows input rows takes (a multiple of
// the kernels' tiles, 8 and 4). A prefill task expands a tile of stored rows, or reads float32 rows, that stay
// in cache while all the input rows pass: 32. The decode kernels (rows ≤ storedVecRows) stream the weights
// from memory: a task of 128 rows is a long run of consecutive bytes for the prefetchers, and a quarter of the
// claims on the loop's shared counter (MoE2B decode: 0.50 → 0.60 of its read bound).
func taskRows(rows int) int {
	if rows <= storedVecRows {
		return 128
	}
	return 32
}

// matmul runs several products over the same input rows as one parallel loop over chunks of weight rows, so
// small matrices (k_proj, v_proj) share a dispatch with large ones.
func (m *cpuModel) matmul(x []float32, rows int, jobs ...mm) {
	chunk := taskRows(rows)
	var sbuf [8]int // most products have at most a few jobs; a linear layer's parts may add more
	starts := sbuf[:]
	if len(jobs) > len(sbuf) {
		starts = make([]int, len(jobs))
	}
	total, macs := 0, 0
	for i, j := range jobs {
		starts[i] = total
		total += (j.w.out + chunk - 1) / chunk
		macs += rows * j.w.out * j.w.in
	}
	per := 1 // tasks per chunk of the loop
	if macs <= inlineMACs {
		per = total // one chunk: the caller runs it
	}
	m.pool.run(total, per, func(worker, lo, hi int) {
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

// addRows adds the block output d to the residual stream x, row by row: d's bias first (when not nil), then its
// output norm (when the layer has that slot).
func (m *cpuModel) addRows(x, d, bias []float32, out *norm, rows int) {
	h := m.arch.Hidden
	m.pool.run(rows, 16, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dr := x[r*h:(r+1)*h], d[r*h:(r+1)*h]
			addBias(dr, bias)
			if out != nil {
				out.apply(dr, dr)
			}
			for i := range xr {
				xr[i] += dr[i]
			}
		}
	})
}
