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
	stats     []counter                         // filters, then scorers, then the pick
}

// Option configures a profile.
type Option func(*Profile)

// PreferOnTie ranks the candidates prefer is true of before the others when their totals are equal; the
// lowest instance id breaks the ties that remain. prefer runs only on ties.
func PreferOnTie(prefer func(c *Cycle, in *view.Instance) bool) Option {
	return func(p *Profile) { p.prefer = prefer }
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
	p := &Profile{name: name, filters: filters}
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
	p.stats = make([]counter, len(p.filters)+len(p.scorers)+1)
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
	cands   []*view.Instance
	scores  []float64
	ranked  []Ranked
	removed []int
}

// Result is what a run found. It points into the Scratch it ran with and is valid until that is reused.
type Result struct {
	// Considered is how many candidates entered the filters.
	Considered int
	// Removed is how many candidates each filter dropped, in the profile's filter order.
	Removed []int
	// Ranked are the best candidates, best first, at most the top asked for.
	Ranked []Ranked

	n      int       // candidates left after the filters
	scores []float64 // scorer-major: scores[j*n+i]
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
func (res *Result) Score(r Ranked, j int) float64 { return res.scores[j*res.n+r.index] }

// Survivors is how many candidates passed every filter.
func (res *Result) Survivors() int { return res.n }

// Run filters the seed candidates (seed itself is not modified), scores the survivors and returns the best
// top of them, best first. Ties go to the preferred candidates (PreferOnTie), then to the lowest instance id.
// Conditional filters that do not apply to c are skipped. With timed set, each plugin's time is added to its
// counters; timing costs a clock read per plugin, so callers time a sample of runs.
func (p *Profile) Run(c *Cycle, seed []*view.Instance, top int, s *Scratch, timed bool) Result {
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

	need := len(p.scorers) * n
	if cap(s.scores) < need {
		s.scores = make([]float64, need)
	}
	res.scores = s.scores[:need]
	for j, w := range p.scorers {
		out := res.scores[j*n : (j+1)*n]
		w.Scorer.Score(c, cands, out)
		for i := range out {
			out[i] = Clamp01(out[i])
		}
		lap(len(p.filters) + j)
	}

	// Keep the best top candidates in a small sorted array: O(n·top), and top is 1 or 2 in practice.
	ranked := s.ranked[:0]
	for i, in := range cands {
		r := Ranked{Instance: in, index: i}
		if p.weightSum > 0 {
			var sum float64
			for j, w := range p.scorers {
				sum += w.Weight * res.scores[j*n+i]
			}
			r.Total = Clamp01(sum / p.weightSum)
		}
		if len(ranked) == top && !p.better(c, &r, &ranked[top-1]) {
			continue
		}
		if len(ranked) < top {
			ranked = append(ranked, r)
		} else {
			ranked[top-1] = r
		}
		for k := len(ranked) - 1; k > 0 && p.better(c, &ranked[k], &ranked[k-1]); k-- {
			ranked[k], ranked[k-1] = ranked[k-1], ranked[k]
		}
	}
	s.ranked = ranked
	res.Ranked = ranked
	lap(len(p.stats) - 1)
	return res
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
	// Calls is how many timed runs called the plugin.
	Calls uint64
	// Total is the time spent in the plugin, summed over its timed calls.
	Total time.Duration
}

// Mean is the average time per call.
func (s PluginStats) Mean() time.Duration {
	if s.Calls == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Calls)
}

// Stats returns the counters of every plugin of the profile, in pipeline order. Only timed runs count. A
// filter is not called (nor counted) once an earlier one has left no candidate.
func (p *Profile) Stats() []PluginStats {
	out := make([]PluginStats, 0, len(p.stats))
	for i := range p.stats {
		st := PluginStats{Profile: p.name, Calls: p.stats[i].calls.Load(), Total: time.Duration(p.stats[i].nanos.Load())}
		switch {
		case i < len(p.filters):
			st.Plugin, st.Kind = p.filters[i].Name(), "filter"
		case i < len(p.filters)+len(p.scorers):
			st.Plugin, st.Kind = p.scorers[i-len(p.filters)].Scorer.Name(), "scorer"
		default:
			st.Plugin, st.Kind = "pick", "pick"
		}
		out = append(out, st)
	}
	return out
}
