package sched

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
)

// Weighted is a scorer and its weight in a profile's weighted mean.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Profile is one filter → score → pick pipeline. It is safe for concurrent use; each Run brings its own Scratch.
type Profile struct {
	name      Name
	filters   []Filter
	keeps     []func(*Cycle, *view.Instance) bool // the filters' Keep, unwrapped where possible: one call each
	applies   []func(*Cycle) bool                 // by filter: Conditional's Applies, nil for the others
	anyCond   bool                                // some filter is Conditional
	all       []int                               // 0..len(filters)-1: which filters run, when all do
	scorers   []Weighted                          // only those with a positive weight
	weightSum float64
	prefer    func(*Cycle, *view.Instance) bool // breaks ties in total before the lowest id; nil: none
	stats     []counter                         // filters, then scorers, then the pick: timed runs
	builds    []counter                         // filters, then scorers: snapshot plugins' runs for a memo

	// What the plugins say of themselves (scope.go), for memoized runs (memo.go).
	memoized  bool    // some filter or scorer is of ScopeSnapshot
	memoMin   int     // the fewest candidates a seed needs for Run to memoize
	snapshot  []bool  // by filter: ScopeSnapshot and not Conditional
	request   []int   // the other filters' indexes, in order
	scopes    []Scope // by scorer
	separable []bool  // by scorer
	uniforms  []bool  // by scorer: a request scorer that may be uniform
	lead      int     // how many leading scorers are of ScopeSnapshot: a memo holds their weighted sum
	leadFixed bool    // those are all separable, so the sum holds whatever request filters drop
}

// Option configures a profile.
type Option func(*Profile)

// PreferOnTie ranks the candidates prefer is true of before the others when their totals are equal; the
// lowest instance id breaks the ties that remain. prefer runs only on ties.
func PreferOnTie(prefer func(c *Cycle, in *view.Instance) bool) Option {
	return func(p *Profile) { p.prefer = prefer }
}

// DefaultMemoizeFrom is the fewest candidates a seed needs for Run to memoize by default: for fewer, a pass
// of every plugin over them costs no more than the memo's bookkeeping, and a bounded ranking would score them
// all in one chunk anyway.
const DefaultMemoizeFrom = 32

// MemoizeFrom makes Run memoize for seeds of at least n candidates (DefaultMemoizeFrom without it); below,
// it runs every plugin over every candidate. Either way the decisions are the same: tests use it to compare
// the two.
func MemoizeFrom(n int) Option {
	return func(p *Profile) { p.memoMin = n }
}

type counter struct {
	calls, nanos atomic.Uint64
}

func (c *counter) add(d time.Duration) {
	c.calls.Add(1)
	c.nanos.Add(uint64(max(d, 0)))
}

// NewProfile builds a profile. Scorers with weight 0 are left out (they would not change the ranking); a
// negative, infinite or NaN weight is an error.
func NewProfile(name Name, filters []Filter, scorers []Weighted, opts ...Option) (*Profile, error) {
	p := &Profile{name: name, filters: filters, memoMin: DefaultMemoizeFrom}
	for _, o := range opts {
		o(p)
	}
	for i, f := range filters {
		var keep func(*Cycle, *view.Instance) bool
		var applies func(*Cycle) bool
		switch f := f.(type) {
		case predicate:
			keep = f.keep
		case conditional:
			keep, applies = f.keep, f.applies
		case Conditional:
			keep, applies = f.Keep, f.Applies
		default:
			keep = f.Keep
		}
		p.keeps = append(p.keeps, keep)
		p.applies = append(p.applies, applies)
		p.anyCond = p.anyCond || applies != nil
		p.all = append(p.all, i)
		snap := applies == nil && ScopeOf(f) == ScopeSnapshot
		p.snapshot = append(p.snapshot, snap)
		p.memoized = p.memoized || snap
		if !snap {
			p.request = append(p.request, i)
		}
	}
	for _, w := range scorers {
		if w.Weight < 0 || math.IsInf(w.Weight, 0) || math.IsNaN(w.Weight) {
			return nil, fmt.Errorf("profile %s: scorer %s: weight %v is not a finite number ≥ 0", name, w.Scorer.Name(), w.Weight)
		}
		if w.Weight > 0 {
			p.scorers = append(p.scorers, w)
			p.weightSum += w.Weight
		}
	}
	p.leadFixed = true
	for j, w := range p.scorers {
		sc := ScopeOf(w.Scorer)
		_, u := w.Scorer.(UniformScorer)
		p.scopes = append(p.scopes, sc)
		p.separable = append(p.separable, separable(w.Scorer))
		p.uniforms = append(p.uniforms, u && sc == ScopeRequest)
		p.memoized = p.memoized || sc == ScopeSnapshot
		if sc == ScopeSnapshot && p.lead == j {
			p.lead++
			p.leadFixed = p.leadFixed && p.separable[j]
		}
	}
	p.stats = make([]counter, len(p.filters)+len(p.scorers)+1)
	p.builds = make([]counter, len(p.filters)+len(p.scorers))
	return p, nil
}

// Name is the profile's name.
func (p *Profile) Name() Name { return p.name }

// Filters are the profile's filters, in order; Result.Removed follows the same order.
func (p *Profile) Filters() []Filter { return p.filters }

// Scorers are the profile's scorers with a positive weight, in order; Result.Score's index follows it.
func (p *Profile) Scorers() []Weighted { return p.scorers }

// Scratch is reusable memory for runs of a profile, so that a run allocates nothing. It is not safe for
// concurrent use.
type Scratch struct {
	keeps   []func(*Cycle, *view.Instance) bool // the filters that apply to the run
	which   []int                               // their indexes among the profile's filters
	removed []int
	cands   []*view.Instance
	pos     []int32     // by candidate: its position among the memo's survivors
	scores  []float64   // the request scorers' scores, scorer-major
	cols    [][]float64 // by scorer: Result's scores
	consts  []float64   // by scorer: Result's uniform scores
	base    []float64
	sums    []float64
	ranked  []Ranked

	spent   []time.Duration // by scorer: time on a timed run
	redo    [][]float64     // by scorer: a snapshot scorer that is not separable, scored again
	redoBuf []float64

	// Bounded ranking (rank.go).
	alive  []bool      // by memo position: left by the request filters
	src    [][]float64 // by scorer: scores by memo position
	kinds  []termKind
	ids    []int32
	chunk  []*view.Instance
	out    []float64
	wins   []*view.Instance
	winBuf []float64
}

// Result is what a run found. It points into the Scratch it ran with and is valid until that is reused.
type Result struct {
	// Considered is how many candidates entered the filters.
	Considered int
	// Removed is how many candidates each filter dropped, in the profile's filter order.
	Removed []int
	// Ranked are the best candidates, best first, at most the top asked for.
	Ranked []Ranked

	n      int         // candidates left after the filters
	cols   [][]float64 // by scorer: the scores of the candidates by Ranked.index; nil where consts holds it
	consts []float64   // by scorer: the score of every candidate, where cols is nil (a uniform score)
}

// Ranked is a candidate that passed every filter, with its weighted mean score.
type Ranked struct {
	Instance *view.Instance
	// Total is the weighted mean of the scores, in [0, 1]; 0 when the profile has no weighted scorer.
	Total float64
	index int
	pref  int8 // PreferOnTie's verdict, once asked: 1 preferred, 2 not, 0 not asked yet
}

// Score is the score the profile's j-th scorer gave the ranked candidate r.
func (res *Result) Score(r Ranked, j int) float64 {
	if res.cols[j] == nil {
		return Clamp01(res.consts[j])
	}
	return Clamp01(res.cols[j][r.index])
}

// Survivors is how many candidates passed every filter.
func (res *Result) Survivors() int { return res.n }

// Run filters the seed candidates (seed itself is not modified), scores the survivors and returns the best
// top of them, best first. Ties go to the preferred candidates (PreferOnTie), then to the lowest instance id.
// Conditional filters that do not apply to c are skipped, and so is Score for a scorer that says every
// candidate scores the same (UniformScorer). With timed set, each plugin's time is added to its counters;
// timing costs a clock read per plugin, so callers time a sample of runs.
//
// When some of the profile's plugins are of ScopeSnapshot, c has a view and a request, and the seed has at
// least DefaultMemoizeFrom candidates (see MemoizeFrom), Run runs the snapshot plugins once per view, request
// model and seed, and memoizes in the view what they found (memo.go): the candidates the snapshot filters
// keep, what they drop (so that Removed still counts each candidate under the first filter in the profile's
// order that drops it), the snapshot scorers' scores, and the weighted sum of the leading ones. A request
// then runs only the request filters over the kept candidates and the request scorers, and adds. When the
// request filters drop nothing that changes a snapshot score, the candidates are visited best memoized sum
// first, in chunks, and the visit stops once even the largest scores the request scorers can give
// (BoundedScorer) cannot lift the rest into the top (rank.go); otherwise every candidate left is scored, and
// a snapshot scorer that is not separable is scored again over them. Either way the decision is the one
// running every plugin over every candidate gives, to the bit: each total adds the same terms in the same
// order, and a candidate is left out only when it scores strictly less than the last of the top.
//
// The memo is keyed by the seed's backing array: a seed must be one of the view's own lists
// (View.Decoders, Prefillers, Instances, LinkedPrefill) or another slice nobody modifies while the view lives.
func (p *Profile) Run(c *Cycle, seed []*view.Instance, top int, s *Scratch, timed bool) Result {
	if p.memoized && c.View != nil && c.Request != nil && len(seed) >= max(p.memoMin, 1) {
		return p.runMemo(c, seed, top, s, timed)
	}
	return p.runAll(c, seed, top, s, timed)
}

// runAll runs every plugin over the seed.
func (p *Profile) runAll(c *Cycle, seed []*view.Instance, top int, s *Scratch, timed bool) Result {
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
	if timed {
		t0 = time.Now()
	}
	keeps, which := p.keeps, p.all
	if p.anyCond {
		keeps, which = s.keeps[:0], s.which[:0]
		for i, keep := range p.keeps {
			if a := p.applies[i]; a == nil || a(c) {
				keeps, which = append(keeps, keep), append(which, i)
			}
		}
		s.keeps, s.which = keeps, which
	}
	cands := s.cands[:0]
	if timed {
		// One filter at a time over all candidates, so that each filter's time can be read.
		cands = append(cands, seed...)
		for k, keep := range keeps {
			if len(cands) == 0 {
				break
			}
			i := which[k]
			kept := cands[:0]
			for _, in := range cands {
				if keep(c, in) {
					kept = append(kept, in)
				} else {
					removed[i]++
				}
			}
			cands = kept
			lap(i)
		}
	} else {
		// Every filter over one candidate at a time: each instance is loaded once.
	next:
		for _, in := range seed {
			for k, keep := range keeps {
				if !keep(c, in) {
					removed[which[k]]++
					continue next
				}
			}
			cands = append(cands, in)
		}
	}
	s.cands = cands
	res.Removed = removed
	n := len(cands)
	res.n = n
	if n == 0 || top <= 0 {
		return res
	}

	buf := s.buffer(len(p.scorers) * n)
	cols, consts := s.cols[:0], s.consts[:0]
	for j, w := range p.scorers {
		var col []float64
		u, uniform := p.uniform(c, j)
		if !uniform {
			col = buf[j*n : (j+1)*n]
			w.Scorer.Score(c, cands, col)
		}
		cols, consts = append(cols, col), append(consts, u)
		lap(len(p.filters) + j)
	}
	s.cols, s.consts = cols, consts
	res.cols, res.consts = cols, consts
	res.Ranked = p.rank(c, cands, top, s, nil, cols, consts, 0)
	lap(len(p.stats) - 1)
	return res
}

// uniform returns the score every candidate gets from the j-th scorer in c, if the scorer says there is one.
func (p *Profile) uniform(c *Cycle, j int) (float64, bool) {
	if !p.uniforms[j] {
		return 0, false
	}
	return uniform(p.scorers[j].Scorer, c)
}

// buffer returns n floats of scratch memory.
func (s *Scratch) buffer(n int) []float64 {
	if cap(s.scores) < n {
		s.scores = make([]float64, n)
	}
	return s.scores[:n]
}

// better orders by total, highest first, then preferred first (PreferOnTie), then by instance id, lowest
// first, then by position.
func (p *Profile) better(c *Cycle, a, b *Ranked) bool {
	if a.Total != b.Total {
		return a.Total > b.Total
	}
	return p.tie(c, a, b) // out of line, so that better inlines into the ranking loop
}

// tie orders candidates of equal totals.
func (p *Profile) tie(c *Cycle, a, b *Ranked) bool {
	if p.prefer != nil {
		if pa, pb := p.preferred(c, a), p.preferred(c, b); pa != pb {
			return pa
		}
	}
	if a.Instance.ID != b.Instance.ID {
		return a.Instance.ID < b.Instance.ID
	}
	return a.index < b.index
}

// preferred asks PreferOnTie about a candidate once and remembers the answer in it.
func (p *Profile) preferred(c *Cycle, r *Ranked) bool {
	if r.pref == 0 {
		r.pref = 2
		if p.prefer(c, r.Instance) {
			r.pref = 1
		}
	}
	return r.pref == 1
}

// PluginStats are one plugin's counters in one profile.
type PluginStats struct {
	Profile Name
	// Plugin is the filter's or scorer's name, or "pick" for ranking.
	Plugin Name
	// Kind is "filter", "scorer" or "pick".
	Kind string
	// Scope is the plugin's scope (ScopeRequest for the pick).
	Scope Scope
	// Calls is how many timed runs called the plugin, or, for a plugin of ScopeSnapshot, used what it found
	// once for the view: such a plugin costs a run next to nothing (reading its memoized scores), unless the
	// run scores a scorer that is not separable again because request filters dropped candidates.
	Calls uint64
	// Total is the time spent in the plugin, summed over its timed calls.
	Total time.Duration
	// Precomputed is how many times a plugin of ScopeSnapshot ran once for a view, a model and a seed (every
	// such run is timed, so this counts all of them), and PrecomputeTotal the time those runs took.
	Precomputed     uint64
	PrecomputeTotal time.Duration
}

// Mean is the average time per call.
func (s PluginStats) Mean() time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Calls)
}

// PrecomputeMean is the average time of a run once for a view.
func (s PluginStats) PrecomputeMean() time.Duration {
	if s.Precomputed == 0 {
		return 0
	}
	return s.PrecomputeTotal / time.Duration(s.Precomputed)
}

// Stats returns the counters of every plugin of the profile, in pipeline order. Only timed runs count in
// Calls and Total. A filter is not called (nor counted) once an earlier one has left no candidate.
func (p *Profile) Stats() []PluginStats {
	out := make([]PluginStats, 0, len(p.stats))
	for i := range p.stats {
		st := PluginStats{Profile: p.name, Calls: p.stats[i].calls.Load(), Total: time.Duration(p.stats[i].nanos.Load())}
		if i < len(p.builds) {
			st.Precomputed, st.PrecomputeTotal = p.builds[i].calls.Load(), time.Duration(p.builds[i].nanos.Load())
		}
		switch {
		case i < len(p.filters):
			st.Plugin, st.Kind = p.filters[i].Name(), "filter"
			if p.snapshot[i] {
				st.Scope = ScopeSnapshot
			}
		case i < len(p.filters)+len(p.scorers):
			st.Plugin, st.Kind = p.scorers[i-len(p.filters)].Scorer.Name(), "scorer"
			st.Scope = p.scopes[i-len(p.filters)]
		default:
			st.Plugin, st.Kind = "pick", "pick"
		}
		out = append(out, st)
	}
	return out
}
