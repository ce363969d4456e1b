package grammar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Limits that keep Compile's work bounded whatever the input: a grammar that needs more is refused.
const (
	// MaxStates is the most automaton states a compiled grammar may have.
	MaxStates = 1 << 17
	// maxNFAStates bounds the intermediate automaton that Compile determinizes.
	maxNFAStates = 1 << 20
	// inlineLimit is the most NFA states a repetition may inline before its body becomes a rule of its own.
	inlineLimit = 4096
	// ruleMinSize is the least NFA states a repeated body needs to become a rule: smaller ones (a character,
	// a number) are cheaper inlined, since tokens that cross a rule's end cost a check at run time.
	ruleMinSize = 200
	// maxDeterminizeWork bounds subset construction (NFA states visited, summed over DFA states and byte
	// classes), since a small regex can ask for exponentially many states.
	maxDeterminizeWork = 1 << 26
)

// Errors of Compile, returned wrapped.
var (
	ErrTooLarge = errors.New("grammar too large")
	ErrNoMatch  = errors.New("grammar matches nothing")
)

// Grammar is a compiled grammar: a pushdown automaton over bytes. It is immutable and safe for concurrent use;
// each generation follows it with its own Matcher.
//
// The automaton is a set of rules, each a deterministic finite automaton over bytes whose states may also
// call another rule (push the state to return to, enter the rule's start). A rule may end (return) in its
// final states. Rule 0, the root, is never called; ending it ends the grammar.
type Grammar struct {
	nclass int
	class  [256]uint8 // byte -> equivalence class: bytes no state tells apart share one
	trans  []int32    // state*nclass + class -> next state, or -1
	final  []bool     // the state's rule may end here
	root   []bool     // the state belongs to the root rule, so ending means the grammar is complete
	rets   [][]int32  // state -> the states its rule may return to (nil for the root rule)
	calls  [][]call   // rules this state may enter, and where each returns to
	first  []byteSet  // bytes the state can consume without returning (directly or by a call)
	simple []bool     // no calls, and ending here needs no stack (root or not final): the fast path
	dist   []int32    // the fewest bytes that take the state to an end of its rule (0 where it may end)
	hop    []int32    // the first step of one such shortest way: a byte (0..255), hopEnd, or hopCall-i for calls[i]
	start  int32

	specials []string // texts of the special tokens the grammar names

	bindMu sync.Mutex
	binds  map[*Index]*binding // per-vocabulary token masks, filled lazily
}

type call struct{ start, ret int32 }

// States is the number of automaton states: a measure of the grammar's size (and of how many token masks its
// Matchers may cache per vocabulary).
func (g *Grammar) States() int { return len(g.final) }

func (g *Grammar) next(s int32, b byte) int32 {
	return g.trans[int(s)*g.nclass+int(g.class[b])]
}

// Compile builds the automaton of root. It fails when the grammar matches nothing, or is too large.
func Compile(root Node) (*Grammar, error) {
	b := &nfaBuilder{ruleOf: map[*node]int32{}, autoRule: map[*node]*node{}}
	top := root.get()
	b.rules = append(b.rules, top)
	for i := 0; i < len(b.rules) && b.err == nil; i++ {
		start := b.newState()
		b.ruleStart = append(b.ruleStart, start)
		b.ruleEnd = append(b.ruleEnd, b.frag(b.rules[i], start))
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.determinize()
}

type nfaEdge struct {
	set byteSet
	to  int32
}

type nfaCall struct {
	rule int32
	to   int32
}

// nfaBuilder builds a Thompson automaton (with call edges) for every rule.
type nfaBuilder struct {
	eps   [][]int32
	edges [][]nfaEdge
	calls [][]nfaCall

	rules              []*node // bodies; rule i is rules[i]
	ruleOf             map[*node]int32
	autoRule           map[*node]*node
	ruleStart, ruleEnd []int32
	specials           []string
	err                error
}

func (b *nfaBuilder) newState() int32 {
	if len(b.eps) >= maxNFAStates {
		if b.err == nil {
			b.err = fmt.Errorf("%w: more than %d intermediate states", ErrTooLarge, maxNFAStates)
		}
		return 0
	}
	b.eps = append(b.eps, nil)
	b.edges = append(b.edges, nil)
	b.calls = append(b.calls, nil)
	return int32(len(b.eps) - 1)
}

func (b *nfaBuilder) addEps(from, to int32) {
	if b.err == nil {
		b.eps[from] = append(b.eps[from], to)
	}
}

func (b *nfaBuilder) addEdge(from int32, set byteSet, to int32) {
	if b.err == nil {
		b.edges[from] = append(b.edges[from], nfaEdge{set, to})
	}
}

func (b *nfaBuilder) addLit(from int32, lit []byte) int32 {
	cur := from
	for _, c := range lit {
		next := b.newState()
		var s byteSet
		s.add(c)
		b.addEdge(cur, s, next)
		cur = next
	}
	return cur
}

// ruleID returns the rule of a kRule node, adding it on first use.
func (b *nfaBuilder) ruleID(n *node) int32 {
	if id, ok := b.ruleOf[n]; ok {
		return id
	}
	id := int32(len(b.rules))
	b.rules = append(b.rules, n.kids[0])
	b.ruleOf[n] = id
	return id
}

// frag builds n starting at state from and returns its end state.
func (b *nfaBuilder) frag(n *node, from int32) int32 {
	if b.err != nil {
		return from
	}
	switch n.kind {
	case kEmpty:
		return from
	case kNever:
		// A fresh state with nothing leading to it: whatever follows is pruned as unreachable.
		return b.newState()
	case kLit:
		if n.special {
			b.specials = append(b.specials, string(n.lit[1:len(n.lit)-1]))
		} else if bytes.IndexByte(n.lit, specialMark) >= 0 {
			b.err = errors.New("grammar: a literal contains byte 0xFF, which only special tokens may")
			return from
		}
		return b.addLit(from, n.lit)
	case kClass:
		to := b.newState()
		b.addEdge(from, n.set, to)
		return to
	case kSeq:
		cur := from
		for _, k := range n.kids {
			cur = b.frag(k, cur)
		}
		return cur
	case kAlt:
		end := b.newState()
		for _, k := range n.kids {
			s := b.newState()
			b.addEps(from, s)
			b.addEps(b.frag(k, s), end)
		}
		return end
	case kRepeat:
		return b.repeatFrag(n, from)
	case kRule:
		to := b.newState()
		if b.err == nil {
			b.calls[from] = append(b.calls[from], nfaCall{b.ruleID(n), to})
		}
		return to
	case kObject:
		return b.objectFrag(n.obj, from)
	}
	b.err = fmt.Errorf("grammar: unknown node kind %d", n.kind)
	return from
}

func (b *nfaBuilder) repeatFrag(n *node, from int32) int32 {
	body, sep := n.kids[0], n.sep
	copies := n.max
	if copies < 0 {
		copies = n.min + 1
	}
	// A big body repeated many times is built once, as a rule. (A body that can be empty cannot be a rule:
	// entering it would not consume anything, and the pushdown automaton relies on every call doing so.)
	if body.kind != kRule && !body.nullable() && body.size() > ruleMinSize && satMul(body.size(), copies) > inlineLimit {
		r, ok := b.autoRule[body]
		if !ok {
			r = rule(body)
			b.autoRule[body] = r
		}
		body = r
	}
	cur := from
	for i := 0; i < n.min; i++ {
		if i > 0 && sep != nil {
			cur = b.frag(sep, cur)
		}
		cur = b.frag(body, cur)
		if b.err != nil {
			return cur
		}
	}
	if n.max < 0 {
		// Loop state: either stop, or (separator and) one more.
		loop := b.newState()
		b.addEps(cur, loop)
		end := b.newState()
		b.addEps(loop, end)
		s := loop
		if n.min > 0 && sep != nil {
			s = b.frag(sep, s)
		}
		e := b.frag(body, s)
		if n.min == 0 && sep != nil {
			// The first repetition has no separator before it: (body (sep body)*)?
			e2 := b.newState()
			b.addEps(e, e2)
			b.addEps(b.frag(body, b.frag(sep, e2)), e2)
			b.addEps(e2, end)
			return end
		}
		b.addEps(e, loop)
		return end
	}
	end := b.newState()
	for i := n.min; i < n.max; i++ {
		b.addEps(cur, end)
		if i > 0 && sep != nil {
			cur = b.frag(sep, cur)
		}
		cur = b.frag(body, cur)
		if b.err != nil {
			return cur
		}
	}
	b.addEps(cur, end)
	return end
}

// objectFrag builds a JSON object whose properties come in the order given, required ones always, optional
// ones maybe. Each property is built once; after property i the next may be any j > i up to the first
// required one, so the automaton grows linearly with the number of properties.
func (b *nfaBuilder) objectFrag(o *objectSpec, from int32) int32 {
	n := len(o.props)
	end := b.newState()
	cur := b.addLit(from, []byte{'{'})
	cur = b.frag(o.ws, cur)
	// nextReq[i]: the first required property at index >= i (n if none).
	nextReq := make([]int, n+1)
	nextReq[n] = n
	for i := n - 1; i >= 0; i-- {
		nextReq[i] = nextReq[i+1]
		if o.props[i].required {
			nextReq[i] = i
		}
	}
	closeAt := func(s int32) { b.addEps(b.addLit(s, []byte{'}'}), end) }
	if nextReq[0] == n {
		closeAt(cur)
	}
	pre := make([]int32, n)
	for j := range o.props {
		pre[j] = b.newState()
	}
	for j := 0; j <= nextReq[0] && j < n; j++ {
		b.addEps(cur, pre[j])
	}
	for i, p := range o.props {
		s := b.addLit(pre[i], p.key)
		s = b.addLit(s, []byte{':'})
		s = b.frag(o.ws, s)
		after := b.frag(p.value, s)
		if b.err != nil {
			return end
		}
		if nextReq[i+1] == n {
			closeAt(b.frag(o.ws, after))
		}
		if i+1 < n {
			comma := b.frag(o.ws, b.addLit(after, []byte{','}))
			for j := i + 1; j <= nextReq[i+1] && j < n; j++ {
				b.addEps(comma, pre[j])
			}
		}
	}
	return end
}

// closure extends set (in place, returning it) with the states reachable by empty moves, sorted.
func (b *nfaBuilder) closure(set []int32, mark []uint32, stamp uint32) []int32 {
	for _, s := range set {
		mark[s] = stamp
	}
	for i := 0; i < len(set); i++ {
		for _, t := range b.eps[set[i]] {
			if mark[t] != stamp {
				mark[t] = stamp
				set = append(set, t)
			}
		}
	}
	slices.Sort(set)
	return set
}

func setKey(set []int32) string {
	buf := make([]byte, 4*len(set))
	for i, s := range set {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(s))
	}
	return string(buf)
}

// determinize turns every rule's NFA into a DFA by subset construction, then prunes states that cannot reach
// the end of their rule, so that every prefix the automaton accepts can still be completed.
func (b *nfaBuilder) determinize() (*Grammar, error) {
	g := &Grammar{binds: map[*Index]*binding{}}
	g.specials = slices.Compact(slices.Sorted(slices.Values(b.specials)))

	// Byte classes: refine the partition of 0..255 by every edge set.
	var cls [256]int32
	nc := int32(1)
	seen := map[byteSet]bool{}
	for _, es := range b.edges {
		for _, e := range es {
			if seen[e.set] {
				continue
			}
			seen[e.set] = true
			remap := make([][2]int32, nc)
			for i := range remap {
				remap[i] = [2]int32{-1, -1}
			}
			next := int32(0)
			for c := 0; c < 256; c++ {
				in := 0
				if e.set.has(byte(c)) {
					in = 1
				}
				r := &remap[cls[c]][in]
				if *r < 0 {
					*r = next
					next++
				}
				cls[c] = *r
			}
			nc = next
		}
	}
	g.nclass = int(nc)
	reps := make([]byte, nc)
	for c := 255; c >= 0; c-- {
		g.class[c] = uint8(cls[c])
		reps[cls[c]] = byte(c)
	}

	type dstate struct {
		rule int32
		set  []int32
	}
	var (
		states []dstate
		trans  []int32
		final  []bool
		dcalls [][]nfaCall // rule, return state (DFA)
		index  = map[string]int32{}
		mark   = make([]uint32, len(b.eps))
		stamp  uint32
	)
	intern := func(rule int32, set []int32) (int32, error) {
		stamp++
		set = b.closure(set, mark, stamp)
		k := setKey(set)
		if id, ok := index[k]; ok {
			return id, nil
		}
		if len(states) >= MaxStates {
			return 0, fmt.Errorf("%w: more than %d states", ErrTooLarge, MaxStates)
		}
		id := int32(len(states))
		index[k] = id
		states = append(states, dstate{rule, set})
		return id, nil
	}
	ruleDFAStart := make([]int32, len(b.rules))
	for r := range b.rules {
		id, err := intern(int32(r), []int32{b.ruleStart[r]})
		if err != nil {
			return nil, err
		}
		ruleDFAStart[r] = id
	}
	var targets []int32
	steps := 0
	for i := 0; i < len(states); i++ {
		st := states[i]
		steps += int(nc) * len(st.set)
		if steps > maxDeterminizeWork {
			return nil, fmt.Errorf("%w: determinizing needs more than %d steps", ErrTooLarge, maxDeterminizeWork)
		}
		end := b.ruleEnd[st.rule]
		fin := false
		for _, s := range st.set {
			if s == end {
				fin = true
			}
		}
		final = append(final, fin)
		row := make([]int32, nc)
		for c := int32(0); c < nc; c++ {
			targets = targets[:0]
			for _, s := range st.set {
				for _, e := range b.edges[s] {
					if e.set.has(reps[c]) {
						targets = append(targets, e.to)
					}
				}
			}
			row[c] = -1
			if len(targets) > 0 {
				id, err := intern(st.rule, slices.Clone(targets))
				if err != nil {
					return nil, err
				}
				row[c] = id
			}
		}
		trans = append(trans, row...)
		// Calls, grouped by rule so that the DFA state has one return state per rule it may enter.
		var byRule map[int32][]int32
		for _, s := range st.set {
			for _, c := range b.calls[s] {
				if byRule == nil {
					byRule = map[int32][]int32{}
				}
				byRule[c.rule] = append(byRule[c.rule], c.to)
			}
		}
		var cs []nfaCall
		for _, r := range slices.Sorted(mapKeys(byRule)) {
			id, err := intern(st.rule, byRule[r])
			if err != nil {
				return nil, err
			}
			cs = append(cs, nfaCall{r, id})
		}
		dcalls = append(dcalls, cs)
	}
	n := len(states)

	// Liveness: a state is live if its rule can end from it, through bytes and calls of rules that can end.
	live := make([]bool, n)
	type revEdge struct {
		from int32
		call int32 // -1: a byte edge; else index into dcalls[from]
	}
	rev := make([][]revEdge, n)
	for s := 0; s < n; s++ {
		for c := 0; c < int(nc); c++ {
			if t := trans[s*int(nc)+c]; t >= 0 {
				rev[t] = append(rev[t], revEdge{int32(s), -1})
			}
		}
		for ci, c := range dcalls[s] {
			rev[c.to] = append(rev[c.to], revEdge{int32(s), int32(ci)})
			st := ruleDFAStart[c.rule]
			rev[st] = append(rev[st], revEdge{int32(s), int32(ci)})
		}
	}
	var work []int32
	for s := 0; s < n; s++ {
		if final[s] {
			live[s] = true
			work = append(work, int32(s))
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for _, e := range rev[t] {
			if live[e.from] {
				continue
			}
			if e.call >= 0 {
				c := dcalls[e.from][e.call]
				if !live[c.to] || !live[ruleDFAStart[c.rule]] {
					continue
				}
			}
			live[e.from] = true
			work = append(work, e.from)
		}
	}
	if !live[ruleDFAStart[0]] {
		return nil, ErrNoMatch
	}

	// Keep the live states reachable from the root's start, renumbered in the order they are found.
	newID := make([]int32, n)
	for i := range newID {
		newID[i] = -1
	}
	order := []int32{ruleDFAStart[0]}
	newID[ruleDFAStart[0]] = 0
	visit := func(t int32) {
		if t >= 0 && live[t] && newID[t] < 0 {
			newID[t] = int32(len(order))
			order = append(order, t)
		}
	}
	for i := 0; i < len(order); i++ {
		s := order[i]
		for c := 0; c < int(nc); c++ {
			visit(trans[int(s)*int(nc)+c])
		}
		for _, c := range dcalls[s] {
			if live[c.to] && live[ruleDFAStart[c.rule]] {
				visit(ruleDFAStart[c.rule])
				visit(c.to)
			}
		}
	}
	m := len(order)
	g.trans = make([]int32, m*int(nc))
	g.final = make([]bool, m)
	g.root = make([]bool, m)
	g.calls = make([][]call, m)
	for i, s := range order {
		for c := 0; c < int(nc); c++ {
			t := trans[int(s)*int(nc)+c]
			if t >= 0 && live[t] {
				g.trans[i*int(nc)+c] = newID[t]
			} else {
				g.trans[i*int(nc)+c] = -1
			}
		}
		g.final[i] = final[s]
		g.root[i] = states[s].rule == 0
		for _, c := range dcalls[s] {
			if live[c.to] && live[ruleDFAStart[c.rule]] {
				g.calls[i] = append(g.calls[i], call{newID[ruleDFAStart[c.rule]], newID[c.to]})
			}
		}
	}
	g.start = 0
	// Where each rule may return to, for masks keyed by the state and the frame below it.
	retsOf := map[int32][]int32{}
	for _, cs := range g.calls {
		for _, c := range cs {
			if !slices.Contains(retsOf[c.start], c.ret) {
				retsOf[c.start] = append(retsOf[c.start], c.ret)
			}
		}
	}
	g.rets = make([][]int32, m)
	for i, s := range order {
		if r := states[s].rule; r != 0 {
			g.rets[i] = retsOf[newID[ruleDFAStart[r]]]
		}
	}
	g.computeFirst()
	g.computeDist()
	return g, nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// computeFirst fills first (bytes a state consumes itself or through the rules it calls) and simple.
func (g *Grammar) computeFirst() {
	n := len(g.final)
	g.first = make([]byteSet, n)
	g.simple = make([]bool, n)
	for s := 0; s < n; s++ {
		for c := 0; c < 256; c++ {
			if g.next(int32(s), byte(c)) >= 0 {
				g.first[s].add(byte(c))
			}
		}
		g.simple[s] = len(g.calls[s]) == 0 && (g.root[s] || !g.final[s])
	}
	// Calls are acyclic in what they consume first (every rule consumes a byte before calling again), so
	// this settles in as many rounds as rules nest.
	for changed := true; changed; {
		changed = false
		for s := 0; s < n; s++ {
			f := g.first[s]
			for _, c := range g.calls[s] {
				f = f.union(g.first[c.start])
			}
			if f != g.first[s] {
				g.first[s] = f
				changed = true
			}
		}
	}
}

// computeDist fills dist, the shortest way from each state to an end of its rule: a byte costs 1, a call the
// shortest sentence of the called rule and then the way on from where it returns. It is Knuth's
// generalisation of Dijkstra's algorithm to grammars: states are settled in order of distance, and a call is
// relaxed once both the rule it enters and the state it returns to are settled (its cost is at least either,
// so the order holds). Every state is live, so every distance is finite.
func (g *Grammar) computeDist() {
	n := len(g.final)
	nc := g.nclass
	const unknown = int32(1<<31 - 1)
	g.dist = make([]int32, n)
	type callEdge struct{ from, other int32 } // a call by from, waiting for the other of its two states
	revByte := make([][]int32, n)
	revCall := make([][]callEdge, n)
	lastFrom := make([]int32, n) // dedups the byte edges of one state: many classes go to one target
	for s := range lastFrom {
		lastFrom[s] = -1
	}
	for s := 0; s < n; s++ {
		g.dist[s] = unknown
		for c := 0; c < nc; c++ {
			if t := g.trans[s*nc+c]; t >= 0 && lastFrom[t] != int32(s) {
				lastFrom[t] = int32(s)
				revByte[t] = append(revByte[t], int32(s))
			}
		}
		for _, cl := range g.calls[s] {
			revCall[cl.start] = append(revCall[cl.start], callEdge{int32(s), cl.ret})
			revCall[cl.ret] = append(revCall[cl.ret], callEdge{int32(s), cl.start})
		}
	}
	settled := make([]bool, n)
	var q distQueue
	for s := 0; s < n; s++ {
		if g.final[s] {
			g.dist[s] = 0
			q.push(0, int32(s))
		}
	}
	relax := func(s, d int32) {
		if !settled[s] && d < g.dist[s] {
			g.dist[s] = d
			q.push(d, s)
		}
	}
	for q.len() > 0 {
		d, t := q.pop()
		if settled[t] || d > g.dist[t] {
			continue
		}
		settled[t] = true
		for _, p := range revByte[t] {
			relax(p, d+1)
		}
		for _, e := range revCall[t] {
			if settled[e.other] {
				relax(e.from, addDist(d, g.dist[e.other]))
			}
		}
	}
	g.computeHops()
}

// computeHops picks, for every state, the first step of a shortest way to the end of its rule: the tree of
// those steps spells one shortest completion from any state, which the token distance of a vocabulary
// (binding.tokenDist) counts in tokens. A byte step takes a letter or a digit where the class has one, as
// completions made of those are the ones vocabularies merge into long tokens.
func (g *Grammar) computeHops() {
	n, nc := len(g.final), g.nclass
	rep := make([]int32, nc)
	rank := func(b byte) int {
		switch {
		case b >= 'a' && b <= 'z':
			return 0
		case b >= '0' && b <= '9':
			return 1
		case b >= 'A' && b <= 'Z':
			return 2
		case b >= 0x20 && b < 0x7f:
			return 3
		}
		return 4
	}
	for c := range rep {
		rep[c] = -1
	}
	for b := 0; b < 256; b++ {
		c := g.class[b]
		if rep[c] < 0 || rank(byte(b)) < rank(byte(rep[c])) {
			rep[c] = int32(b)
		}
	}
	g.hop = make([]int32, n)
	for s := 0; s < n; s++ {
		g.hop[s] = hopEnd
		if g.final[s] {
			continue
		}
		found := false
		for c := 0; c < nc && !found; c++ {
			if t := g.trans[s*nc+c]; t >= 0 && g.dist[t]+1 == g.dist[s] {
				g.hop[s], found = rep[c], true
			}
		}
		for i, cl := range g.calls[s] {
			if !found && addDist(g.dist[cl.start], g.dist[cl.ret]) == g.dist[s] {
				g.hop[s], found = hopCall-int32(i), true
			}
		}
	}
}

// Kinds of hop besides a byte.
const (
	hopEnd  int32 = -1 // the rule may end here
	hopCall int32 = -2 // hopCall-i: enter calls[i]
)

// distQueue is a binary min-heap of states by distance.
type distQueue struct{ d, s []int32 }

func (q *distQueue) len() int { return len(q.d) }

func (q *distQueue) push(d, s int32) {
	q.d, q.s = append(q.d, d), append(q.s, s)
	for i := len(q.d) - 1; i > 0; {
		p := (i - 1) / 2
		if q.d[p] <= q.d[i] {
			break
		}
		q.d[p], q.d[i], q.s[p], q.s[i] = q.d[i], q.d[p], q.s[i], q.s[p]
		i = p
	}
}

func (q *distQueue) pop() (int32, int32) {
	d, s := q.d[0], q.s[0]
	last := len(q.d) - 1
	q.d[0], q.s[0] = q.d[last], q.s[last]
	q.d, q.s = q.d[:last], q.s[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < last && q.d[l] < q.d[small] {
			small = l
		}
		if r := l + 1; r < last && q.d[r] < q.d[small] {
			small = r
		}
		if small == i {
			break
		}
		q.d[small], q.d[i], q.s[small], q.s[i] = q.d[i], q.d[small], q.s[i], q.s[small]
		i = small
	}
	return d, s
}

// matches reports whether text is a complete sentence of g.
func (g *Grammar) matches(text []byte) bool {
	s := newSim(g, g.dist)
	cur := []cfg{{g.start, bottomEnd}}
	var next []cfg
	for _, x := range text {
		next = next[:0]
		for _, c := range cur {
			next = s.step(c, x, next, 0)
		}
		if len(next) == 0 {
			return false
		}
		cur, next = next, cur
	}
	return slices.ContainsFunc(cur, s.complete)
}
