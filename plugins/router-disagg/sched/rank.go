package sched

import (
	"slices"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// rank keeps the best top candidates in a small sorted array: O(n·top), and top is 1 or 2 in practice. A
// candidate's sum is base[i] (the weighted sum of the first lead scorers; 0 without base) plus, in scorer
// order, the other scorers' weighted scores cols[j][i] (consts[j] where cols[j] is nil: a uniform score): the
// same additions in the same order, whatever part of them a memo made in advance. The sums are added a
// scorer at a time over all candidates, which keeps the loops short and free of bounds checks.
func (p *Profile) rank(c *Cycle, cands []*view.Instance, top int, s *Scratch, base []float64, cols [][]float64, consts []float64, lead int) []Ranked {
	n := len(cands)
	sums := s.sumBuffer(n)
	if base != nil {
		copy(sums, base[:n])
	} else {
		clear(sums)
	}
	for j := lead; j < len(p.scorers); j++ {
		w := p.scorers[j].Weight
		if cols[j] == nil {
			add := w * Clamp01(consts[j])
			for i := range sums {
				sums[i] += add
			}
			continue
		}
		for i, v := range cols[j][:n] {
			sums[i] += w * Clamp01(v)
		}
	}
	ranked := s.ranked[:0]
	for i, sum := range sums {
		ranked = p.offer(c, ranked, top, cands[i], sum, i)
	}
	s.ranked = ranked
	return ranked
}

// offer puts a candidate with the weighted sum sum into the sorted top, if it belongs there.
func (p *Profile) offer(c *Cycle, ranked []Ranked, top int, in *view.Instance, sum float64, index int) []Ranked {
	var total float64
	if p.weightSum > 0 {
		total = Clamp01(sum / p.weightSum)
	}
	if len(ranked) == top && total < ranked[top-1].Total {
		return ranked // cannot be better: the common case, without building the candidate
	}
	r := Ranked{Instance: in, Total: total, index: index}
	if len(ranked) == top && !p.better(c, &r, &ranked[top-1]) {
		return ranked
	}
	if len(ranked) < top {
		ranked = append(ranked, r)
	} else {
		ranked[top-1] = r
	}
	for k := len(ranked) - 1; k > 0 && p.better(c, &ranked[k], &ranked[k-1]); k-- {
		ranked[k], ranked[k-1] = ranked[k-1], ranked[k]
	}
	return ranked
}

func (s *Scratch) sumBuffer(n int) []float64 {
	if cap(s.sums) < n {
		s.sums = make([]float64, n)
	}
	return s.sums[:n]
}

// termKind is where a bounded ranking takes a scorer's scores from.
type termKind uint8

const (
	// fromMemo: a column by position among the memo's candidates, a snapshot scorer's or that of a request
	// scorer that is not separable, scored over all the candidates left.
	fromMemo termKind = iota
	// fromUniform: one score for every candidate.
	fromUniform
	// fromChunk: a separable request scorer, scored a chunk of candidates at a time.
	fromChunk
)

// chunkSize is how many candidates a bounded ranking scores at a time: enough to amortise a call per scorer,
// few enough that the top is usually settled after the first chunk.
const chunkSize = 32

// boundSlack covers rounding: a candidate is passed over only when even its bound, raised by this factor,
// scores less than the last of the top. The sums add a handful of non-negative terms, so their rounding
// error is some 1e-16 of the sum.
const boundSlack = 1 + 1e-9

// rankBounded ranks the memo's candidates by branch and bound, when the memo's sums hold for those left (pos
// maps them to positions among the memo's, alive marks those positions; both nil: all of them). They are
// visited by their memoized key (the weighted sum of the snapshot scorers) from the largest, a chunk at a
// time. The request scorers add at most R (the sum of weight × bound over them, see BoundedScorer), so once a
// bound on the keys left (memo.bound) plus R scores less than the last of the top, no candidate left can
// enter the top, nor tie with it. Each visited candidate's sum adds the same terms in the same order as rank
// does, so totals and ties come out as a full ranking's (indexes keep the candidates' order). The scores
// Result gives for the ranked candidates are taken again for them alone (the request scorers scored by chunk
// are separable, so they are the same), and their indexes become their places in the top.
func (p *Profile) rankBounded(c *Cycle, m *memo, cands []*view.Instance, pos []int32, alive []bool, top int, s *Scratch, timed bool) ([]Ranked, [][]float64, []float64) {
	ns, nm := len(p.scorers), len(m.keep)
	// Every element is set below: clearing slices of pointers costs write barriers while the GC marks.
	s.src = slices.Grow(s.src[:0], ns)[:ns]
	s.kinds = slices.Grow(s.kinds[:0], ns)[:ns]
	s.consts = slices.Grow(s.consts[:0], ns)[:ns]
	src, kinds, consts := s.src, s.kinds, s.consts

	need := 0
	for j := range ns {
		if p.scopes[j] == ScopeRequest && !p.separable[j] {
			need += nm
			if pos != nil {
				need += len(cands)
			}
		}
	}
	buf := s.buffer(need)
	var reach float64 // R: the most the request scorers can add to a sum
	for j, w := range p.scorers {
		src[j], kinds[j], consts[j] = nil, fromMemo, 0
		if p.scopes[j] == ScopeSnapshot {
			src[j] = m.cols[j] // in the key
			continue
		}
		if u, ok := p.uniform(c, j); ok {
			kinds[j], consts[j] = fromUniform, u
			reach += w.Weight * Clamp01(u)
			continue
		}
		if p.separable[j] {
			b := bound(w.Scorer, c)
			if !(b < 1) { // NaN too
				b = 1
			}
			kinds[j] = fromChunk
			reach += w.Weight * max(b, 0)
			continue
		}
		// Not separable: scored over all the candidates left, by memo position.
		out := buf[:nm:nm]
		buf = buf[nm:]
		scored := out
		if pos != nil {
			scored = buf[:len(cands):len(cands)]
			buf = buf[len(cands):]
		}
		p.score(s, j, c, cands, scored, timed)
		most := 0.0
		for i, v := range scored {
			v = Clamp01(v)
			most = max(most, v)
			if pos != nil {
				out[pos[i]] = v
			} else {
				out[i] = v
			}
		}
		src[j] = out
		reach += w.Weight * most
	}

	ranked := s.ranked[:0]
	for next := 0; ; {
		for alive != nil && next < nm && !alive[m.order[next]] {
			next++
		}
		if next == nm {
			break
		}
		if len(ranked) == top && (m.bound[next]+reach)*boundSlack/p.weightSum < ranked[top-1].Total {
			break // nothing left can enter the top
		}
		var ids []int32
		var chunk []*view.Instance
		if end := min(next+chunkSize, nm); alive == nil {
			ids, chunk = m.order[next:end], m.byKey[next:end]
			next = end
		} else {
			ids, chunk = s.ids[:0], s.chunk[:0]
			for ; next < nm && len(ids) < chunkSize; next++ {
				if x := m.order[next]; alive[x] {
					ids, chunk = append(ids, x), append(chunk, m.keep[x])
				}
			}
			s.ids, s.chunk = ids, chunk
		}
		sums := s.sumBuffer(len(ids))
		if m.partial != nil {
			for k, x := range ids {
				sums[k] = m.partial[x]
			}
		} else {
			clear(sums)
		}
		for j := p.lead; j < ns; j++ {
			w := p.scorers[j].Weight
			switch kinds[j] {
			case fromUniform:
				add := w * Clamp01(consts[j])
				for k := range sums {
					sums[k] += add
				}
			case fromMemo:
				col := src[j]
				for k, x := range ids {
					sums[k] += w * Clamp01(col[x])
				}
			case fromChunk:
				if cap(s.out) < len(ids) {
					s.out = make([]float64, chunkSize)
				}
				out := s.out[:len(ids)]
				p.score(s, j, c, chunk, out, timed)
				for k, v := range out {
					sums[k] += w * Clamp01(v)
				}
			}
		}
		for k, sum := range sums {
			ranked = p.offer(c, ranked, top, chunk[k], sum, int(ids[k]))
		}
	}
	s.ranked = ranked

	// The ranked candidates' scores, by their place in the top.
	nw := len(ranked)
	if cap(s.winBuf) < ns*nw {
		s.winBuf = make([]float64, ns*nw)
	}
	wins := s.wins[:0]
	for _, r := range ranked {
		wins = append(wins, r.Instance)
	}
	s.wins = wins
	cols := s.cols[:0]
	for j := range ns {
		if kinds[j] == fromUniform {
			cols = append(cols, nil)
			continue
		}
		out := s.winBuf[j*nw : (j+1)*nw]
		if kinds[j] == fromChunk {
			p.score(s, j, c, wins, out, timed)
		} else {
			for k, r := range ranked {
				out[k] = src[j][r.index]
			}
		}
		cols = append(cols, out)
	}
	s.cols = cols
	for k := range ranked {
		ranked[k].index = k
	}
	return ranked, cols, consts
}
