package sched

import (
	"math"
	"slices"
	"time"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// memo is what a profile's snapshot plugins found over one seed of one view, for one model. It is immutable
// once built and shared by concurrent runs.
type memo struct {
	cycle    Cycle // the view and Request.Model alone (req): what snapshot plugins see
	req      router.Request
	keep     []*view.Instance // the seed candidates every snapshot filter keeps, in seed order
	removed  []int            // by filter: the candidates it dropped first among the snapshot filters
	dropped  []drop           // those candidates, to count again when a request filter comes first
	lastDrop int              // the largest filter index in dropped, -1 when none
	judged   []bool           // by filter: a snapshot filter that had candidates to judge
	cols     [][]float64      // by scorer: a snapshot scorer's scores of keep, clamped; nil for the others
	partial  []float64        // by position in keep: Σ w·s over the profile's leading snapshot scorers
	order    []int32          // positions in keep, by key (Σ w·s over all the snapshot scorers) from the largest
	byKey    []*view.Instance // keep in that order, so that a chunk of it is a subslice
	bound    []float64        // by place in order: at least the key there and at every later place
}

// drop is a candidate a snapshot filter dropped.
type drop struct {
	in     *view.Instance
	filter int32
}

// memoKey identifies a memo in a view: the profile, the seed (by its backing array) and the model.
type memoKey struct {
	profile *Profile
	seed    **view.Instance
	n       int
	model   string
}

// memo returns the profile's memo of the seed in c's view, building it on first use.
func (p *Profile) memo(c *Cycle, seed []*view.Instance) *memo {
	k := memoKey{profile: p, seed: &seed[0], n: len(seed), model: c.Request.Model}
	if m, ok := c.View.Memoized(k); ok {
		return m.(*memo)
	}
	v, model := c.View, c.Request.Model
	return v.Memoize(k, func() any { return p.build(v, model, seed) }).(*memo)
}

// build runs the snapshot plugins over the seed, one at a time so that each is timed (Precomputed in Stats).
func (p *Profile) build(v *view.View, model string, seed []*view.Instance) *memo {
	m := &memo{removed: make([]int, len(p.filters)), judged: make([]bool, len(p.filters)), lastDrop: -1}
	m.req.Model = model
	m.cycle = Cycle{Request: &m.req, View: v}
	bc := &m.cycle
	t0 := time.Now()
	lap := func(c *counter) {
		t1 := time.Now()
		c.add(t1.Sub(t0))
		t0 = t1
	}
	cands := slices.Clone(seed)
	for i, snap := range p.snapshot {
		if !snap {
			continue
		}
		if len(cands) == 0 {
			break
		}
		m.judged[i] = true
		keep, kept := p.keeps[i], cands[:0]
		for _, in := range cands {
			if keep(bc, in) {
				kept = append(kept, in)
			} else {
				m.removed[i]++
				m.dropped = append(m.dropped, drop{in: in, filter: int32(i)})
				m.lastDrop = i
			}
		}
		cands = kept
		lap(&p.builds[i])
	}
	m.keep = slices.Clip(cands)
	n := len(cands)
	if n == 0 {
		return m
	}
	snapshot := 0
	for _, sc := range p.scopes {
		if sc == ScopeSnapshot {
			snapshot++
		}
	}
	if snapshot == 0 {
		return m
	}
	// One array for the columns, the partial sums and the keys.
	m.cols = make([][]float64, len(p.scorers))
	floats := make([]float64, (snapshot+2)*n)
	for j, w := range p.scorers {
		if p.scopes[j] != ScopeSnapshot {
			continue
		}
		col := floats[:n:n]
		floats = floats[n:]
		w.Scorer.Score(bc, m.keep, col)
		for i := range col {
			col[i] = Clamp01(col[i])
		}
		m.cols[j] = col
		lap(&p.builds[len(p.filters)+j])
	}
	// The sums are added in scorer order, as a run adds them (rank). A key is a sum of non-negative terms, so
	// its bits order like it; sorting by their upper half (with the position in the lower) is a sort of
	// integers, and the key of a place and of every later one is below the next value of that upper half.
	m.partial, m.bound = floats[:n:n], floats[n:2*n:2*n]
	sorted := make([]uint64, n)
	for i := range n {
		var sum float64
		for j := range p.lead {
			sum += p.scorers[j].Weight * m.cols[j][i]
		}
		m.partial[i] = sum
		for j := p.lead; j < len(p.scorers); j++ {
			if m.cols[j] != nil {
				sum += p.scorers[j].Weight * m.cols[j][i]
			}
		}
		high := uint32(math.Float64bits(max(sum, 0)) >> 32) // max: +0, never -0
		sorted[i] = uint64(^high)<<32 | uint64(i)
	}
	slices.Sort(sorted) // by key from the largest, then by position
	m.order, m.byKey = make([]int32, n), make([]*view.Instance, n)
	for k, e := range sorted {
		m.order[k], m.byKey[k] = int32(uint32(e)), m.keep[uint32(e)]
		m.bound[k] = math.Float64frombits(uint64(^uint32(e>>32)+1) << 32)
	}
	if p.lead == 0 {
		m.partial = nil
	}
	return m
}

// runMemo runs the request plugins over what the memo of the snapshot plugins kept.
func (p *Profile) runMemo(c *Cycle, seed []*view.Instance, top int, s *Scratch, timed bool) Result {
	m := p.memo(c, seed)
	res := Result{Considered: len(seed)}
	s.removed = append(s.removed[:0], make([]int, len(p.filters))...)
	removed := s.removed
	var t0 time.Time
	lap := func(i int) {
		if timed {
			t1 := time.Now()
			p.stats[i].add(t1.Sub(t0))
			t0 = t1
		}
	}
	keeps, which := s.keeps[:0], s.which[:0]
	for _, i := range p.request {
		if a := p.applies[i]; a == nil || a(c) {
			keeps, which = append(keeps, p.keeps[i]), append(which, i)
		}
	}
	s.keeps, s.which = keeps, which

	// A candidate a snapshot filter dropped counts under the first filter that drops it: a request filter
	// before that one may.
	if len(which) > 0 && which[0] < m.lastDrop {
		for _, d := range m.dropped {
			f := int(d.filter)
			for k, i := range which {
				if i >= f {
					break
				}
				if !keeps[k](c, d.in) {
					f = i
					break
				}
			}
			removed[f]++
		}
	} else {
		copy(removed, m.removed)
	}
	if timed {
		for i, judged := range m.judged {
			if judged {
				p.stats[i].calls.Add(1) // used, at no cost to this run
			}
		}
		t0 = time.Now()
	}

	cands, pos := m.keep, []int32(nil) // pos nil: the candidates are the memo's, in its order
	if len(keeps) > 0 && len(cands) > 0 {
		cands, pos = s.cands[:0], s.pos[:0]
		if timed {
			// One filter at a time over all candidates, so that each filter's time can be read.
			cands = append(cands, m.keep...)
			for x := range m.keep {
				pos = append(pos, int32(x))
			}
			for k, keep := range keeps {
				if len(cands) == 0 {
					break
				}
				i := which[k]
				kept, kpos := cands[:0], pos[:0]
				for x, in := range cands {
					if keep(c, in) {
						kept, kpos = append(kept, in), append(kpos, pos[x])
					} else {
						removed[i]++
					}
				}
				cands, pos = kept, kpos
				lap(i)
			}
		} else {
		next:
			for x, in := range m.keep {
				for k, keep := range keeps {
					if !keep(c, in) {
						removed[which[k]]++
						continue next
					}
				}
				cands, pos = append(cands, in), append(pos, int32(x))
			}
		}
		s.cands, s.pos = cands, pos
		if len(cands) == len(m.keep) {
			cands, pos = m.keep, nil // nothing dropped
		}
	}
	res.Removed = removed
	n := len(cands)
	res.n = n
	if n == 0 || top <= 0 {
		return res
	}
	p.scoreAndRank(c, m, cands, pos, top, s, timed, &res)
	return res
}

// scoreAndRank scores the candidates left and ranks them; pos maps them to positions in the memo's, nil when
// they are all of the memo's. Each scorer's time is added to its counter, the rest to the pick.
func (p *Profile) scoreAndRank(c *Cycle, m *memo, cands []*view.Instance, pos []int32, top int, s *Scratch, timed bool, res *Result) {
	var t0 time.Time
	if timed {
		t0 = time.Now()
	}
	ns, n := len(p.scorers), len(cands)
	s.spent = append(s.spent[:0], make([]time.Duration, ns)...)

	// When request filters dropped candidates, a snapshot scorer that is not separable may score those left
	// otherwise than the memo does. Where it does not (the dropped ones did not matter to it, as with load
	// when they were not the most loaded), the memoized sums still hold.
	holds := true
	var alive []bool // by memo position: left by the request filters
	if pos != nil {
		s.redo = append(s.redo[:0], make([][]float64, ns)...)
		alive = append(s.alive[:0], make([]bool, len(m.keep))...)
		for _, x := range pos {
			alive[x] = true
		}
		s.alive = alive
		need := 0
		for j := range ns {
			if p.scopes[j] == ScopeSnapshot && !p.separable[j] {
				need += n
			}
		}
		if cap(s.redoBuf) < need {
			s.redoBuf = make([]float64, need)
		}
		buf := s.redoBuf[:need]
		for j, w := range p.scorers {
			if p.scopes[j] != ScopeSnapshot || p.separable[j] {
				continue
			}
			if x, ok := w.Scorer.(SubsetScorer); ok && x.SubsetHolds(m.cols[j], alive) {
				continue
			}
			out := buf[:n:n]
			buf = buf[n:]
			p.score(s, j, &m.cycle, cands, out, timed)
			col := m.cols[j]
			for i, v := range out {
				if math.Float64bits(Clamp01(v)) != math.Float64bits(col[pos[i]]) {
					holds = false
					break
				}
			}
			s.redo[j] = out
		}
	}
	if holds && m.order != nil && p.weightSum > 0 {
		res.Ranked, res.cols, res.consts = p.rankBounded(c, m, cands, pos, alive, top, s, timed)
	} else {
		res.Ranked, res.cols, res.consts = p.rankMemo(c, m, cands, pos, holds, top, s, timed)
	}
	if timed {
		var scoring time.Duration
		for j, d := range s.spent {
			p.stats[len(p.filters)+j].add(d)
			scoring += d
		}
		p.stats[len(p.stats)-1].add(time.Since(t0) - scoring)
	}
}

// score calls the j-th scorer, timing it on timed runs.
func (p *Profile) score(s *Scratch, j int, c *Cycle, cands []*view.Instance, out []float64, timed bool) {
	if !timed {
		p.scorers[j].Scorer.Score(c, cands, out)
		return
	}
	t := time.Now()
	p.scorers[j].Scorer.Score(c, cands, out)
	s.spent[j] += time.Since(t)
}

// rankMemo scores every candidate left and ranks them: request scorers score them, snapshot scorers' scores
// come from the memo (gathered by position when request filters dropped some), or from their new scores
// (s.redo) where the memo's do not hold.
func (p *Profile) rankMemo(c *Cycle, m *memo, cands []*view.Instance, pos []int32, holds bool, top int, s *Scratch, timed bool) ([]Ranked, [][]float64, []float64) {
	n, dropped := len(cands), pos != nil
	need := 0
	for _, sc := range p.scopes {
		if sc == ScopeRequest || dropped {
			need += n
		}
	}
	buf := s.buffer(need)
	cols, consts := s.cols[:0], s.consts[:0]
	for j := range p.scorers {
		u, uniform := p.uniform(c, j)
		consts = append(consts, u)
		switch sc := p.scopes[j]; {
		case uniform:
			cols = append(cols, nil)
		case sc == ScopeRequest:
			out := buf[:n:n]
			buf = buf[n:]
			p.score(s, j, c, cands, out, timed)
			cols = append(cols, out)
		case !dropped:
			cols = append(cols, m.cols[j])
		case len(s.redo) > j && s.redo[j] != nil: // set in this run: request filters dropped candidates
			cols = append(cols, s.redo[j])
		default:
			out := buf[:n:n]
			buf = buf[n:]
			col := m.cols[j]
			for i, x := range pos {
				out[i] = col[x]
			}
			cols = append(cols, out)
		}
	}
	s.cols, s.consts = cols, consts

	var base []float64
	lead := 0
	if p.lead > 0 && (holds || p.leadFixed) {
		lead, base = p.lead, m.partial
		if dropped {
			base = s.base[:0]
			for _, x := range pos {
				base = append(base, m.partial[x])
			}
			s.base = base
		}
	}
	return p.rank(c, cands, top, s, base, cols, consts, lead), cols, consts
}
