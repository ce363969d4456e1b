package grammar

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// cfg is a configuration of the pushdown automaton: the current state, and the stack below it as a frame id
// (frames are shared, so configurations that differ only at the top cost one cfg each).
type cfg struct{ state, parent int32 }

// Stack bottoms.
const (
	bottomEnd     int32 = -1 // below the root rule: ending it ends the grammar
	bottomUnknown int32 = -2 // below a state classified on its own: whatever rule called it
)

// maxCallDepth bounds the empty moves (calls and returns) one byte may take, a guard for any grammar.
const maxCallDepth = 1 << 10

// sim steps configurations through bytes. frames holds every stack frame made so far, interned so that equal
// stacks have equal ids and sets of configurations can be deduplicated by comparing cfgs.
type sim struct {
	g       *Grammar
	dist    []int32 // per state, the way to the end of its rule: Grammar.dist in bytes, or a binding's in tokens
	frames  []cfg
	cost    []int32 // frame id -> the way from the frame's state to the end, through every frame below
	intern  map[cfg]int32
	touched bool // some path needed the unknown stack below bottomUnknown
}

func newSim(g *Grammar, dist []int32) *sim { return &sim{g: g, dist: dist, intern: map[cfg]int32{}} }

func (s *sim) push(state, parent int32) int32 {
	k := cfg{state, parent}
	if id, ok := s.intern[k]; ok {
		return id
	}
	id := int32(len(s.frames))
	s.frames = append(s.frames, k)
	s.cost = append(s.cost, addDist(s.dist[state], s.below(parent)))
	s.intern[k] = id
	return id
}

// below is the way to end the rules of the stack from frame parent down (0 at a bottom: the end of the
// grammar, or the unknown stack a mask is classified over, which the caller adds).
func (s *sim) below(parent int32) int32 {
	if parent < 0 {
		return 0
	}
	return s.cost[parent]
}

// left is the way to complete the grammar from c (down to its bottom).
func (s *sim) left(c cfg) int32 { return addDist(s.dist[c.state], s.below(c.parent)) }

// truncate drops the frames made after the first n, which nothing may refer to any more.
func (s *sim) truncate(n int) {
	for _, f := range s.frames[n:] {
		delete(s.intern, f)
	}
	s.frames = s.frames[:n]
	s.cost = s.cost[:n]
}

func addCfg(out []cfg, c cfg) []cfg {
	if slices.Contains(out, c) {
		return out
	}
	return append(out, c)
}

// step appends to out the configurations c reaches by consuming byte x: directly, by entering the rules its
// state calls, or by returning from its rule first.
func (s *sim) step(c cfg, x byte, out []cfg, depth int) []cfg {
	g := s.g
	t := g.next(c.state, x)
	if g.simple[c.state] {
		if t >= 0 {
			out = addCfg(out, cfg{t, c.parent})
		}
		return out
	}
	if depth > maxCallDepth {
		return out
	}
	if t >= 0 {
		out = addCfg(out, cfg{t, c.parent})
	}
	for _, cl := range g.calls[c.state] {
		if g.first[cl.start].has(x) {
			out = s.step(cfg{cl.start, s.push(cl.ret, c.parent)}, x, out, depth+1)
		}
	}
	if g.final[c.state] {
		switch {
		case c.parent >= 0:
			out = s.step(s.frames[c.parent], x, out, depth+1)
		case c.parent == bottomUnknown:
			s.touched = true
		}
	}
	return out
}

// complete reports whether every rule on c's stack can end where it is, so the grammar can end here.
func (s *sim) complete(c cfg) bool {
	for range maxCallDepth {
		if !s.g.final[c.state] {
			return false
		}
		if c.parent < 0 {
			return c.parent == bottomEnd
		}
		c = s.frames[c.parent]
	}
	return false
}

// canContinue reports whether some byte may follow c.
func (s *sim) canContinue(c cfg) bool {
	for range maxCallDepth {
		if !s.g.first[c.state].empty() {
			return true
		}
		if !s.g.final[c.state] || c.parent < 0 {
			return false
		}
		c = s.frames[c.parent]
	}
	return false
}

// binding holds what a grammar knows about one vocabulary: the token mask of each state, computed the first
// time a Matcher reaches the state and kept for every later generation with the same grammar.
//
// States of the root rule are keyed by the state alone. States of other rules are keyed by the state and the
// state their rule returns to (the frame below): tokens that run past the rule's end are then judged in the
// caller too, and only those that also end the caller's rule are left to check at run time. A rule returns
// to few places, so this multiplies the masks by little and leaves few tokens uncertain.
type binding struct {
	g     *Grammar
	idx   *Index
	masks []atomic.Pointer[stateMask] // root-rule states
	inner sync.Map                    // maskKey(state, ret) -> *stateMask, for the other rules
	tdist []int32                     // per state, the tokens of one shortest completion of its rule
	walks sync.Pool                   // *walker
}

// maxSpell bounds the bytes of a completion tokenDist tries to spell with one token.
const maxSpell = 64

// tokenDist counts, for every state, the tokens of idx that spell the shortest completion of its rule that
// the hop tree gives (Grammar.computeHops): a run of byte steps is spelled with the fewest tokens that cover
// it exactly, a call costs the called rule's count and then the count from where it returns. The count is
// what a generation can do, token by token: each token of the spelling is one the grammar allows and takes
// the count down by one. So it bounds from above the tokens the output still needs, closer than its bytes
// where a vocabulary holds keys and punctuation as whole tokens. A state whose run no token starts has no
// count (math.MaxInt32): Fit then leaves the mask alone rather than steer to it.
func (g *Grammar) tokenDist(idx *Index) []int32 {
	n := len(g.final)
	td := make([]int32, n)
	done := make([]bool, n)
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	// A byte step's count needs the states nearer the end; a call's, the rule it enters, which may be as far
	// (resolve recurses for it) and the state it returns to, which is nearer.
	isCall := func(s int32) int {
		if g.hop[s] <= hopCall {
			return 1
		}
		return 0
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(g.dist[a], g.dist[b]); c != 0 {
			return c
		}
		return isCall(a) - isCall(b)
	})
	limit := min(idx.maxLen, maxSpell)
	var (
		run    []byte
		states []int32
		lens   []int
	)
	var resolve func(s int32, depth int) int32
	resolve = func(s int32, depth int) int32 {
		if done[s] {
			return td[s]
		}
		v := int32(math.MaxInt32)
		switch h := g.hop[s]; {
		case h == hopEnd:
			v = 0
		case h <= hopCall:
			if depth < maxCallDepth {
				cl := g.calls[s][hopCall-h]
				v = addDist(resolve(cl.start, depth+1), resolve(cl.ret, depth+1))
			}
		default:
			run, states = run[:0], states[:0]
			for t := s; len(run) < limit && g.hop[t] >= 0; {
				x := byte(g.hop[t])
				t = g.next(t, x)
				run, states = append(run, x), append(states, t)
			}
			lens = idx.spelled(run, lens[:0])
			for _, l := range lens {
				v = min(v, addDist(1, td[states[l-1]]))
			}
		}
		td[s], done[s] = v, true
		return v
	}
	for _, s := range order {
		resolve(s, 0)
	}
	return td
}

func maskKey(state, ret int32) uint64 { return uint64(uint32(state))<<32 | uint64(uint32(ret)) }

func (g *Grammar) bind(idx *Index) *binding {
	g.bindMu.Lock()
	defer g.bindMu.Unlock()
	if b, ok := g.binds[idx]; ok {
		return b
	}
	b := &binding{g: g, idx: idx, masks: make([]atomic.Pointer[stateMask], g.States()), tdist: g.tokenDist(idx)}
	g.binds[idx] = b
	return b
}

// stateMask is the verdict on every token for one state, context-independent where it can be: tokens the
// state accepts or rejects whatever rule called it, and (for states where the rule may end) the uncertain
// tokens that run past the rule's end, which the Matcher checks against its real stack.
//
// The accepted set is kept in the smallest of three forms: a list of accepted ids, a list of rejected ids
// (among the index's valid ones), or a bitset.
type stateMask struct {
	accept []int32
	reject []int32
	bits   []uint64
	form   uint8   // formAccept, formReject or formBits
	unc    []int32 // positions in index order
	// after is the most bytes any accepted token may leave to complete, down to the frame the mask is keyed
	// by (the stack below adds its own): while it fits in the budget, Fit need not look at single tokens.
	after int32
}

const (
	formAccept uint8 = iota
	formReject
	formBits
)

// write overwrites dst with the accepted set.
func (m *stateMask) write(dst []uint64, idx *Index) {
	switch m.form {
	case formAccept:
		clear(dst)
		for _, id := range m.accept {
			dst[id>>6] |= 1 << (id & 63)
		}
	case formReject:
		copy(dst, idx.valid)
		for _, id := range m.reject {
			dst[id>>6] &^= 1 << (id & 63)
		}
	default:
		copy(dst, m.bits)
	}
}

// or adds the accepted set to dst, using tmp (len >= idx.words) as scratch.
func (m *stateMask) or(dst, tmp []uint64, idx *Index) {
	if m.form == formAccept {
		for _, id := range m.accept {
			dst[id>>6] |= 1 << (id & 63)
		}
		return
	}
	src := m.bits
	if m.form == formReject {
		m.write(tmp, idx)
		src = tmp
	}
	for i := range dst[:idx.words] {
		dst[i] |= src[i]
	}
}

// mask returns the verdict for a configuration whose state is state, with ret the state below it (or -1 for
// a root-rule state).
func (b *binding) mask(state, ret int32) *stateMask {
	if ret < 0 {
		if m := b.masks[state].Load(); m != nil {
			return m
		}
		m := b.classify(state, ret)
		// Two Matchers may classify the same state at once; both get the same answer, and one is kept.
		if b.masks[state].CompareAndSwap(nil, m) {
			return m
		}
		return b.masks[state].Load()
	}
	k := maskKey(state, ret)
	if m, ok := b.inner.Load(k); ok {
		return m.(*stateMask)
	}
	m, _ := b.inner.LoadOrStore(k, b.classify(state, ret))
	return m.(*stateMask)
}

// walker is scratch for walking the sorted vocabulary: the configurations after each prefix length.
type walker struct {
	accept []int32
	lv     [][]cfg
	single []cfg
	count  []int32
	touch  []bool
}

// extend steps the configurations of level d on along tok, one byte a level, and returns the level it
// reached: len(tok), or the first level left with no configuration. Tokens are walked in sorted order, so the
// levels a token shares with the one before it are reused and only its new bytes are stepped.
func (w *walker) extend(s *sim, d int, tok []byte) int {
	for d < len(tok) {
		next := w.lv[d+1][:0]
		for _, c := range w.lv[d] {
			next = s.step(c, tok[d], next, 0)
		}
		w.lv[d+1] = next
		d++
		if len(next) == 0 {
			break
		}
	}
	return d
}

func newWalker(maxLen int) *walker {
	return &walker{lv: make([][]cfg, maxLen+1), single: make([]cfg, maxLen+1), count: make([]int32, maxLen+1),
		touch: make([]bool, maxLen+1)}
}

func (b *binding) walker() *walker {
	if w, ok := b.walks.Get().(*walker); ok {
		return w
	}
	return newWalker(b.idx.maxLen)
}

// classify walks every token from state alone, as XGrammar does: since the vocabulary is sorted, the
// configurations after a shared prefix are computed once, and a prefix that no configuration survives rules
// out every token that starts with it without looking at them.
func (b *binding) classify(state, ret int32) *stateMask {
	idx, g := b.idx, b.g
	nc := g.nclass
	s := newSim(g, b.tdist)
	w := b.walker()
	defer b.walks.Put(w)
	parent := bottomEnd
	if ret >= 0 {
		parent = s.push(ret, bottomUnknown)
	}
	// Level d holds the configurations after tok[:d]: count[d] of them, the one in single[d] when there is
	// one (the common case, kept out of the slices so that the hot loop is a table lookup), else lv[d].
	w.single[0], w.count[0], w.touch[0] = cfg{state, parent}, 1, false
	accept := w.accept[:0]
	defer func() { w.accept = accept[:0] }()
	var unc []int32
	after := int32(0)
	n := len(idx.order)
	for i := 0; i < n; {
		tok := idx.tok(i)
		d := int(idx.lcp[i])
		for d < len(tok) {
			if c := w.single[d]; w.count[d] == 1 && g.simple[c.state] {
				t := g.trans[int(c.state)*nc+int(g.class[tok[d]])]
				w.single[d+1], w.count[d+1], w.touch[d+1] = cfg{t, c.parent}, 0, w.touch[d]
				if t >= 0 {
					w.count[d+1] = 1
				}
			} else {
				src := w.lv[d]
				if w.count[d] == 1 {
					src = w.single[d : d+1]
				}
				s.touched = false
				next := w.lv[d+1][:0]
				for _, c := range src {
					next = s.step(c, tok[d], next, 0)
				}
				w.lv[d+1], w.count[d+1], w.touch[d+1] = next, int32(len(next)), w.touch[d] || s.touched
				if len(next) == 1 {
					w.single[d+1] = next[0]
				}
			}
			d++
			if w.count[d] == 0 {
				break
			}
		}
		if w.count[d] > 0 {
			accept = append(accept, idx.order[i])
			left := s.left(w.single[d])
			if w.count[d] > 1 {
				for _, c := range w.lv[d] {
					left = min(left, s.left(c))
				}
			}
			after = max(after, left)
			i++
			continue
		}
		// Nothing survives tok[:d]: the same holds for every token that starts with it.
		j := idx.subtreeEnd(i, d)
		if w.touch[d] {
			for k := i; k < j; k++ {
				unc = append(unc, int32(k))
			}
		}
		i = j
	}
	m := &stateMask{unc: unc, after: after}
	limit := idx.size / 32
	switch {
	case len(accept) <= limit:
		m.form, m.accept = formAccept, slices.Clone(accept)
	case idx.nvalid-len(accept) <= limit:
		m.form = formReject
		bitsOf := make([]uint64, idx.words)
		for _, id := range accept {
			bitsOf[id>>6] |= 1 << (id & 63)
		}
		for i, v := range idx.valid {
			for r := v &^ bitsOf[i]; r != 0; r &= r - 1 {
				m.reject = append(m.reject, int32(i*64+bits.TrailingZeros64(r)))
			}
		}
	default:
		m.form = formBits
		m.bits = make([]uint64, idx.words)
		for _, id := range accept {
			m.bits[id>>6] |= 1 << (id & 63)
		}
	}
	return m
}

// Precompute classifies every state of g for idx now rather than when a Matcher first reaches it, so that no
// generation pays for it later. It is what a server may do for a grammar it knows is coming.
func (g *Grammar) Precompute(idx *Index) {
	b := g.bind(idx)
	for s := range b.masks {
		if g.root[s] {
			b.mask(int32(s), -1)
		}
		for _, r := range g.rets[s] {
			b.mask(int32(s), r)
		}
	}
}

// MaskMemoryBytes reports the memory held by the token masks g has computed for idx so far.
func (g *Grammar) MaskMemoryBytes(idx *Index) int {
	b := g.bind(idx)
	total := 0
	add := func(m *stateMask) {
		total += 4*(len(m.accept)+len(m.reject)+len(m.unc)) + 8*len(m.bits) + 64
	}
	for i := range b.masks {
		if m := b.masks[i].Load(); m != nil {
			add(m)
		}
	}
	b.inner.Range(func(_, v any) bool {
		add(v.(*stateMask))
		return true
	})
	return total
}

// Matcher follows one generation through a grammar: it says which tokens may come next (Mask) and advances
// on the token chosen (Accept). It is not safe for concurrent use; each sequence has its own.
type Matcher struct {
	g   *Grammar
	b   *binding
	idx *Index
	s   *sim

	cur   []cfg
	bufs  [2][]cfg // scratch for advance
	ended bool     // an end-of-sequence token was accepted
	// after bounds the bytes left to complete the grammar after any token the last Mask allowed.
	after int32

	tmp  []uint64
	keep []uint64 // Fit's copy of the mask, to put back when nothing fits
	uncs []int32
	w    *walker
}

// NewMatcher starts a generation at the beginning of g, for the tokens of idx. It fails if g names a special
// token that idx does not have.
func (g *Grammar) NewMatcher(idx *Index) (*Matcher, error) {
	for _, sp := range g.specials {
		if _, ok := idx.special[sp]; !ok {
			return nil, fmt.Errorf("grammar: the vocabulary has no special token %q", sp)
		}
	}
	b := g.bind(idx)
	m := &Matcher{g: g, b: b, idx: idx, s: newSim(g, b.tdist), tmp: make([]uint64, idx.words)}
	m.w = newWalker(idx.maxLen)
	m.Reset()
	return m, nil
}

// Reset returns the matcher to the beginning of the grammar.
func (m *Matcher) Reset() {
	m.s.truncate(0)
	m.cur = append(m.cur[:0], cfg{m.g.start, bottomEnd})
	m.ended = false
}

// MaskWords is the length of a mask in uint64 words.
func (m *Matcher) MaskWords() int { return m.idx.words }

// Mask writes into dst (grown if shorter than MaskWords) the bitset of tokens that may come next: bit id%64
// of word id/64 is set when token id keeps the output a valid prefix of the grammar. End-of-sequence tokens
// are set exactly when the grammar is complete. It returns the mask.
func (m *Matcher) Mask(dst []uint64) []uint64 {
	idx := m.idx
	if cap(dst) < idx.words {
		dst = make([]uint64, idx.words)
	}
	dst = dst[:idx.words]
	if m.ended {
		clear(dst)
		return dst
	}
	m.uncs = m.uncs[:0]
	m.after = 0
	nunc := 0
	for i, c := range m.cur {
		ret, below := int32(-1), int32(0)
		if c.parent >= 0 {
			f := m.s.frames[c.parent]
			ret, below = f.state, m.s.below(f.parent)
		}
		sm := m.b.mask(c.state, ret)
		m.after = max(m.after, addDist(sm.after, below))
		if i == 0 {
			sm.write(dst, idx)
		} else {
			sm.or(dst, m.tmp, idx)
		}
		if len(sm.unc) > 0 {
			nunc++
			m.uncs = append(m.uncs, sm.unc...)
		}
	}
	if len(m.uncs) > 0 {
		if nunc > 1 {
			slices.Sort(m.uncs)
			m.uncs = slices.Compact(m.uncs)
		}
		m.checkUncertain(dst)
	}
	if m.Complete() {
		for _, id := range idx.eos {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
	return dst
}

// checkUncertain sets in dst the uncertain tokens (positions m.uncs, sorted) that the real stack accepts,
// sharing the work for common prefixes as classify does.
func (m *Matcher) checkUncertain(dst []uint64) {
	idx, s, w := m.idx, m.s, m.w
	mark := len(s.frames)
	defer s.truncate(mark)
	w.lv[0] = append(w.lv[0][:0], m.cur...)
	var prev []byte
	valid := 0 // levels 0..valid hold the configurations after prev[:level]
	ps := m.uncs
	for i := 0; i < len(ps); {
		p := int(ps[i])
		id := idx.order[p]
		tok := idx.tok(p)
		if dst[id>>6]&(1<<(id&63)) != 0 {
			i++
			continue
		}
		d := w.extend(s, min(commonPrefix(prev, tok), valid), tok)
		prev, valid = tok, d
		if len(w.lv[d]) > 0 {
			dst[id>>6] |= 1 << (id & 63)
			m.after = max(m.after, m.shortest(w.lv[d]))
			i++
			continue
		}
		// Dead after tok[:d]: skip the following tokens that share that prefix.
		valid = d - 1
		i++
		for i < len(ps) {
			t := idx.tok(int(ps[i]))
			if len(t) < d || commonPrefix(t[:d], tok[:d]) < d {
				break
			}
			i++
		}
	}
}

// Accept advances past token id. It fails, leaving the matcher as it was, if the token is not allowed.
func (m *Matcher) Accept(id int32) error {
	if m.ended {
		return fmt.Errorf("grammar: token %d after the end of the sequence", id)
	}
	if m.idx.isEOS(id) {
		if !m.Complete() {
			return fmt.Errorf("grammar: end-of-sequence token %d before the grammar is complete", id)
		}
		m.ended = true
		return nil
	}
	tok := m.idx.bytesOf(id)
	if tok == nil {
		return fmt.Errorf("grammar: token %d is not text the grammar can match", id)
	}
	mark := len(m.s.frames)
	end, ok := m.advance(tok)
	if !ok {
		m.s.truncate(mark)
		return fmt.Errorf("grammar: token %d (%q) is not allowed here", id, tok)
	}
	m.cur = append(m.cur[:0], end...)
	return nil
}

// advance steps the current configurations through tok into scratch buffers, leaving m.cur as it is. It
// returns the configurations after tok, or false if none survives.
func (m *Matcher) advance(tok []byte) ([]cfg, bool) {
	src := m.cur
	k := 0
	for _, x := range tok {
		dst := m.bufs[k][:0]
		for _, c := range src {
			dst = m.s.step(c, x, dst, 0)
		}
		m.bufs[k] = dst
		if len(dst) == 0 {
			return nil, false
		}
		src = dst
		k ^= 1
	}
	return src, true
}

// Allowed reports whether token id may come next, without advancing.
func (m *Matcher) Allowed(id int32) bool {
	if m.ended {
		return false
	}
	if m.idx.isEOS(id) {
		return m.Complete()
	}
	tok := m.idx.bytesOf(id)
	if tok == nil {
		return false
	}
	mark := len(m.s.frames)
	defer m.s.truncate(mark)
	_, ok := m.advance(tok)
	return ok
}

// Complete reports whether the output so far is a complete sentence of the grammar, so that an
// end-of-sequence token may come next.
func (m *Matcher) Complete() bool {
	if m.ended {
		return true
	}
	for _, c := range m.cur {
		if m.s.complete(c) {
			return true
		}
	}
	return false
}

// Done reports whether generation must stop: the grammar is complete and nothing may follow but
// end-of-sequence (or an end-of-sequence token was accepted). The engine may then finish without sampling.
func (m *Matcher) Done() bool {
	if m.ended {
		return true
	}
	if !m.Complete() {
		return false
	}
	for _, c := range m.cur {
		if m.s.canContinue(c) {
			return false
		}
	}
	return true
}

// Shortest is the tokens the output needs to be complete from here (0 when it is): the fewest tokens of the
// vocabulary that spell one of its shortest completions in bytes. Generating them one by one takes it down by
// one each, so it is a count a generation can meet; it never counts fewer than the fewest tokens possible.
func (m *Matcher) Shortest() int {
	if m.ended {
		return 0
	}
	return int(m.shortest(m.cur))
}

func (m *Matcher) shortest(cs []cfg) int32 {
	best := int32(math.MaxInt32)
	for _, c := range cs {
		best = min(best, m.s.left(c))
	}
	return best
}

// Fit narrows mask, which the last Mask wrote, to the tokens after which the output can still be completed
// within left-1 more tokens (left counts the token about to be sampled; an end-of-sequence token costs none:
// it is not part of the output max_tokens bounds). It reports whether it took any token out. Sampling only
// from what Fit leaves keeps Shortest within the tokens left, so a generation that starts with
// Shortest() <= max_tokens ends complete: the budget makes a free string close, then what encloses it. Where
// no token would fit (the budget was short from the start) Fit leaves the mask as it was.
//
// Most steps cost nothing more: a state's cached mask knows the longest completion any of its tokens may
// leave, and only when that does not fit are the allowed tokens walked one by one.
func (m *Matcher) Fit(mask []uint64, left int) bool {
	if m.ended || int64(m.after) <= int64(left)-1 {
		return false
	}
	limit := int32(max(left-1, 0))
	idx, s, w := m.idx, m.s, m.w
	m.keep = append(m.keep[:0], mask[:idx.words]...)
	mark := len(s.frames)
	defer s.truncate(mark)
	w.lv[0] = append(w.lv[0][:0], m.cur...)
	var prev []byte
	valid := 0 // levels 0..valid hold the configurations after prev[:level]
	removed, kept := false, false
	for p, id := range idx.order {
		if mask[id>>6]&(1<<(id&63)) == 0 {
			continue
		}
		tok := idx.tok(p)
		d := w.extend(s, min(commonPrefix(prev, tok), valid), tok)
		prev, valid = tok, d
		if len(w.lv[d]) == 0 || m.shortest(w.lv[d]) > limit {
			mask[id>>6] &^= 1 << (id & 63)
			removed = true
			if len(w.lv[d]) == 0 {
				valid = d - 1
			}
			continue
		}
		kept = true
	}
	if !kept && !m.Complete() {
		copy(mask, m.keep)
		return false
	}
	return removed
}

// addDist adds distances, saturating: a grammar's shortest sentence may be long, never negative.
func addDist(a, b int32) int32 {
	if c := int64(a) + int64(b); c < math.MaxInt32 {
		return int32(c)
	}
	return math.MaxInt32
}

// ApplyMask sets the logits of tokens the mask does not allow to -Inf, so that any sampler picks an allowed
// one. Logits past the mask's end are disallowed too.
func ApplyMask(logits []float32, mask []uint64) {
	inf := float32(math.Inf(-1))
	for i := range logits {
		w := i >> 6
		if w >= len(mask) || mask[w]&(1<<(i&63)) == 0 {
			logits[i] = inf
		}
	}
}
