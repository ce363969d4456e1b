package sched

import (
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// fixed scores each candidate by a table keyed by instance id.
type fixed struct {
	name   Name
	scores map[string]float64
}

func (f fixed) Name() Name { return f.name }

func (f fixed) Score(_ *Cycle, cands []*view.Instance, out []float64) {
	for i, in := range cands {
		out[i] = f.scores[in.ID]
	}
}

func instances(ids ...string) []*view.Instance {
	s := &router.Snapshot{}
	for _, id := range ids {
		s.Instances = append(s.Instances, router.Instance{ID: id})
	}
	return view.New(s).All()
}

func rankedIDs(res Result) []string {
	var out []string
	for _, r := range res.Ranked {
		out = append(out, r.Instance.ID)
	}
	return out
}

func TestRun(t *testing.T) {
	t.Parallel()
	dropB := Predicate("drop-b", func(_ *Cycle, in *view.Instance) bool { return in.ID != "b" })
	dropAll := Predicate("drop-all", func(*Cycle, *view.Instance) bool { return false })
	x := fixed{name: "x", scores: map[string]float64{"a": 0.2, "b": 1, "c": 0.8, "d": 0.8}}
	y := fixed{name: "y", scores: map[string]float64{"a": 1, "b": 1, "c": 0, "d": 0.4}}
	wild := fixed{name: "wild", scores: map[string]float64{"a": 7, "c": -3}}
	tests := map[string]struct {
		filters     []Filter
		scorers     []Weighted
		seed        []string
		top         int
		want        []string
		wantTotals  []float64
		wantRemoved []int
	}{
		"one scorer":          {scorers: []Weighted{{x, 1}}, seed: []string{"a", "b", "c"}, top: 3, want: []string{"b", "c", "a"}, wantTotals: []float64{1, 0.8, 0.2}},
		"weighted mean":       {scorers: []Weighted{{x, 1}, {y, 3}}, seed: []string{"a", "c"}, top: 2, want: []string{"a", "c"}, wantTotals: []float64{0.8, 0.2}},
		"zero weight ignored": {scorers: []Weighted{{x, 0}, {y, 1}}, seed: []string{"c", "d"}, top: 2, want: []string{"d", "c"}, wantTotals: []float64{0.4, 0}},
		"tie to lowest id":    {scorers: []Weighted{{x, 1}}, seed: []string{"d", "c"}, top: 2, want: []string{"c", "d"}},
		"no scorer: by id":    {seed: []string{"d", "b", "c"}, top: 2, want: []string{"b", "c"}, wantTotals: []float64{0, 0}},
		"top 1":               {scorers: []Weighted{{x, 1}}, seed: []string{"a", "b", "c", "d"}, top: 1, want: []string{"b"}},
		"filter first":        {filters: []Filter{dropB}, scorers: []Weighted{{x, 1}}, seed: []string{"a", "b", "c"}, top: 1, want: []string{"c"}, wantRemoved: []int{1}},
		"nothing left":        {filters: []Filter{dropAll, dropB}, scorers: []Weighted{{x, 1}}, seed: []string{"a", "b"}, top: 1, wantRemoved: []int{2, 0}},
		"scores are clamped":  {scorers: []Weighted{{wild, 1}}, seed: []string{"a", "c"}, top: 2, want: []string{"a", "c"}, wantTotals: []float64{1, 0}},
		"top 0":               {scorers: []Weighted{{x, 1}}, seed: []string{"a"}, top: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := NewProfile("test", tc.filters, tc.scorers)
			if err != nil {
				t.Fatal(err)
			}
			seed := instances(tc.seed...)
			before := slices.Clone(seed)
			var s Scratch
			res := p.Run(&Cycle{}, seed, tc.top, &s, true)
			if got := rankedIDs(res); !slices.Equal(got, tc.want) {
				t.Errorf("ranked %v, want %v", got, tc.want)
			}
			for i, w := range tc.wantTotals {
				if i < len(res.Ranked) && abs(res.Ranked[i].Total-w) > 1e-12 {
					t.Errorf("total %d = %v, want %v", i, res.Ranked[i].Total, w)
				}
			}
			if tc.wantRemoved != nil && !slices.Equal(res.Removed, tc.wantRemoved) {
				t.Errorf("removed %v, want %v", res.Removed, tc.wantRemoved)
			}
			if !slices.Equal(seed, before) {
				t.Errorf("Run modified the seed")
			}
			if res.Considered != len(tc.seed) {
				t.Errorf("considered %d, want %d", res.Considered, len(tc.seed))
			}
		})
	}
}

func TestResultScore(t *testing.T) {
	t.Parallel()
	x := fixed{name: "x", scores: map[string]float64{"a": 0.2, "b": 0.9}}
	y := fixed{name: "y", scores: map[string]float64{"a": 0.7, "b": 0.1}}
	p, err := NewProfile("test", nil, []Weighted{{x, 1}, {Renamed(y, "y2"), 1}})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Run(&Cycle{}, instances("a", "b"), 1, &Scratch{}, true)
	best := res.Ranked[0]
	if best.Instance.ID != "b" || res.Score(best, 0) != 0.9 || res.Score(best, 1) != 0.1 {
		t.Errorf("best %s with scores %v, %v; want b with 0.9, 0.1", best.Instance.ID, res.Score(best, 0), res.Score(best, 1))
	}
	if p.Scorers()[1].Scorer.Name() != "y2" {
		t.Errorf("renamed scorer is called %q", p.Scorers()[1].Scorer.Name())
	}
}

func TestPreferOnTie(t *testing.T) {
	t.Parallel()
	x := fixed{name: "x", scores: map[string]float64{"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.9}}
	preferBC := PreferOnTie(func(_ *Cycle, in *view.Instance) bool { return in.ID == "c" || in.ID == "b" })
	tests := map[string]struct {
		opts []Option
		top  int
		want []string
	}{
		"without: lowest id":          {top: 4, want: []string{"d", "a", "b", "c"}},
		"preferred first among equal": {opts: []Option{preferBC}, top: 4, want: []string{"d", "b", "c", "a"}},
		"a better score still wins":   {opts: []Option{preferBC}, top: 1, want: []string{"d"}},
		"top 2":                       {opts: []Option{preferBC}, top: 2, want: []string{"d", "b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := NewProfile("test", nil, []Weighted{{x, 1}}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			res := p.Run(&Cycle{}, instances("c", "a", "d", "b"), tc.top, &Scratch{}, false)
			if got := rankedIDs(res); !slices.Equal(got, tc.want) {
				t.Errorf("ranked %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConditionalFilter(t *testing.T) {
	t.Parallel()
	// drop-b applies only to cycles with a request.
	dropB := PredicateWhen("drop-b", func(c *Cycle) bool { return c.Request != nil },
		func(_ *Cycle, in *view.Instance) bool { return in.ID != "b" })
	dropC := Predicate("drop-c", func(_ *Cycle, in *view.Instance) bool { return in.ID != "c" })
	p, err := NewProfile("test", []Filter{dropB, dropC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, timed := range []bool{false, true} {
		var s Scratch
		res := p.Run(&Cycle{}, instances("a", "b", "c"), 3, &s, timed)
		if got := rankedIDs(res); !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(res.Removed, []int{0, 1}) {
			t.Errorf("timed %v, not applying: ranked %v, removed %v; want [a b], [0 1]", timed, got, res.Removed)
		}
		res = p.Run(&Cycle{Request: &router.Request{}}, instances("a", "b", "c"), 3, &s, timed)
		if got := rankedIDs(res); !slices.Equal(got, []string{"a"}) || !slices.Equal(res.Removed, []int{1, 1}) {
			t.Errorf("timed %v, applying: ranked %v, removed %v; want [a], [1 1]", timed, got, res.Removed)
		}
	}
	calls := map[Name]uint64{}
	for _, st := range p.Stats() {
		calls[st.Plugin] = st.Calls
	}
	if calls["drop-b"] != 1 || calls["drop-c"] != 2 {
		t.Errorf("calls %v: want drop-b timed once (where it applied), drop-c twice", calls)
	}
}

func TestNewProfileRejectsBadWeights(t *testing.T) {
	t.Parallel()
	x := fixed{name: "x"}
	for _, w := range []float64{-1, inf(), nan()} {
		if _, err := NewProfile("p", nil, []Weighted{{x, w}}); err == nil || !strings.Contains(err.Error(), "scorer x") {
			t.Errorf("weight %v: got %v, want an error naming the scorer", w, err)
		}
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	dropAll := Predicate("drop-all", func(*Cycle, *view.Instance) bool { return false })
	keep := Predicate("keep", func(*Cycle, *view.Instance) bool { return true })
	p, _ := NewProfile("p", []Filter{keep, dropAll, keep}, []Weighted{{fixed{name: "x"}, 1}})
	s := &Scratch{}
	for range 3 {
		p.Run(&Cycle{}, instances("a"), 1, s, true)
	}
	got := map[Name]uint64{}
	for _, st := range p.Stats() {
		got[Name(st.Kind)+"/"+st.Plugin] += st.Calls
	}
	want := map[Name]uint64{"filter/keep": 3, "filter/drop-all": 3, "scorer/x": 0, "pick/pick": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d calls, want %d (all %v)", k, got[k], v, got)
		}
	}
}

func TestRunAllocatesNothingWithScratch(t *testing.T) {
	x := fixed{name: "x", scores: map[string]float64{"a": 0.2, "b": 0.9}}
	keep := func(*Cycle, *view.Instance) bool { return true }
	p, _ := NewProfile("p", []Filter{Predicate("keep", keep), PredicateWhen("sometimes", func(*Cycle) bool { return true }, keep)},
		[]Weighted{{x, 1}}, PreferOnTie(func(*Cycle, *view.Instance) bool { return true }))
	seed := instances("a", "b", "c")
	s := &Scratch{}
	c := &Cycle{}
	p.Run(c, seed, 2, s, true)
	if n := testing.AllocsPerRun(100, func() { p.Run(c, seed, 2, s, true) }); n != 0 {
		t.Errorf("Run allocates %v times per call", n)
	}
}

func TestClamp01(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{-1: 0, 0: 0, 0.5: 0.5, 1: 1, 2: 1, inf(): 1, -inf(): 0} {
		if got := Clamp01(in); got != want {
			t.Errorf("Clamp01(%v) = %v, want %v", in, got, want)
		}
	}
	if got := Clamp01(nan()); got != 0 {
		t.Errorf("Clamp01(NaN) = %v, want 0", got)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func inf() float64 { return 1 / zero }
func nan() float64 { return zero / zero }

var zero float64
