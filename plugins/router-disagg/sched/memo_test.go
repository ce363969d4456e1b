package sched_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/affinity"
	"github.com/duet-ai/duet/plugins/router-disagg/filter"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/scorer"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// scored is a synthetic scorer: a score per (request, instance) drawn from a few values, so that ties are
// common, with the optional interfaces switched on or off.
type scored struct {
	name      sched.Name
	scope     sched.Scope
	separable bool
	relative  bool // divide by the largest raw score among the candidates (not separable)
	uniformOn bool // uniform when the request's MaxTokens is odd
	bounded   bool // bound its scores by the largest it gives
}

func (s scored) Name() sched.Name   { return s.name }
func (s scored) Scope() sched.Scope { return s.scope }
func (s scored) Separable() bool    { return s.separable }

func (s scored) raw(c *sched.Cycle, in *view.Instance) float64 {
	seed := uint64(in.Index)*31 + uint64(len(s.name))
	if s.scope == sched.ScopeRequest {
		seed += uint64(c.Request.PromptTokens) * 7
		return float64(seed%4) / 4 // at most 0.75: Bound
	}
	return float64(seed%5) / 4
}

func (s scored) Score(c *sched.Cycle, cands []*view.Instance, out []float64) {
	if u, ok := s.Uniform(c); ok && s.scope == sched.ScopeRequest {
		for i := range out {
			out[i] = u
		}
		return
	}
	most := 0.0
	for i, in := range cands {
		out[i] = s.raw(c, in)
		most = max(most, out[i])
	}
	if s.relative && most > 0 {
		for i := range out {
			out[i] /= most
		}
	}
}

func (s scored) Uniform(c *sched.Cycle) (float64, bool) {
	return 0.5, s.uniformOn && c.Request.MaxTokens%2 == 1
}

func (s scored) Bound(*sched.Cycle) float64 {
	if !s.bounded {
		return 1
	}
	return 0.75
}

// randomView is a view of up to 120 instances of two models on a few nodes, with instance links.
func randomView(rng *rand.Rand) *view.View {
	s := &router.Snapshot{}
	nodes := 1 + rng.IntN(5)
	for i := range nodes {
		s.Nodes = append(s.Nodes, router.Node{ID: fmt.Sprintf("n%d", i), Status: []string{router.NodeAlive, router.NodeAlive, router.NodeFailed}[rng.IntN(3)],
			Hardware: []string{"gpu", "mac"}[rng.IntN(2)]})
		for j := range nodes {
			if i != j && rng.IntN(3) > 0 {
				s.Paths = append(s.Paths, router.Path{From: fmt.Sprintf("n%d", i), To: fmt.Sprintf("n%d", j), Quality: float64(rng.IntN(3)) / 2})
			}
		}
	}
	for i := range rng.IntN(300) {
		s.Instances = append(s.Instances, router.Instance{
			ID: fmt.Sprintf("i%03d", i), Model: []string{"m", "m", "o"}[rng.IntN(3)], Node: fmt.Sprintf("n%d", rng.IntN(nodes+1)),
			Role:          []string{router.RoleBoth, router.RoleDecode, router.RolePrefill}[rng.IntN(3)],
			Status:        []string{router.InstanceReady, router.InstanceReady, router.InstanceReady, router.InstanceLoading}[rng.IntN(4)],
			Load:          router.Load{InFlight: rng.IntN(4), Queued: rng.IntN(2), KVUtilization: float64(rng.IntN(3)) / 2},
			ContextLength: []int{0, 4096, 8192}[rng.IntN(3)], Fingerprint: "fp", KVCompat: "kv", KVEndpoint: "h:1",
		})
	}
	for range rng.IntN(4) {
		s.InstanceLinks = append(s.InstanceLinks, router.InstanceLink{
			DecodeInstances:  []string{fmt.Sprintf("i%03d", rng.IntN(120))},
			PrefillInstances: []string{fmt.Sprintf("i%03d", rng.IntN(120)), fmt.Sprintf("i%03d", rng.IntN(120))},
		})
	}
	return view.New(s)
}

// randomProfile draws filters and scorers, of every scope and kind, in a random order.
func randomProfile(t *testing.T, rng *rand.Rand) *sched.Profile {
	filters := []sched.Filter{filter.Model(), filter.Ready(), filter.NodeAlive(), filter.DecodeRole(), filter.NotExcluded(), filter.ContextFits(),
		sched.Predicate("odd-request", func(c *sched.Cycle, in *view.Instance) bool {
			return (int(in.Index)+c.Request.PromptTokens)%7 != 0
		}),
		sched.SnapshotPredicate("not-fifth", func(_ *sched.Cycle, in *view.Instance) bool { return in.Index%5 != 3 })}
	rng.Shuffle(len(filters), func(i, j int) { filters[i], filters[j] = filters[j], filters[i] })
	filters = filters[:rng.IntN(len(filters)+1)]
	all := []sched.Scorer{scorer.NewLoad(), scorer.NewKVUtilization(), scorer.NewPrefix(), scorer.NewLocality(), scorer.NewPartner(1000), scorer.NewLink(), scorer.NewHardware([]string{"gpu"}),
		scored{name: "snap", scope: sched.ScopeSnapshot, separable: true},
		scored{name: "snap-rel", scope: sched.ScopeSnapshot, relative: true},
		scored{name: "req", separable: true, uniformOn: true, bounded: true},
		scored{name: "req-unbounded", separable: true},
		scored{name: "req-rel", relative: true, uniformOn: true},
		sched.Renamed(scorer.NewLoad(), "load-2")}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	var ws []sched.Weighted
	for _, s := range all[:rng.IntN(len(all)+1)] {
		ws = append(ws, sched.Weighted{Scorer: s, Weight: []float64{0, 0.1, 0.5, 1, 2, 3}[rng.IntN(6)]})
	}
	opts := []sched.Option{sched.MemoizeFrom(1 + rng.IntN(40))}
	if rng.IntN(2) == 0 {
		opts = append(opts, sched.PreferOnTie(func(_ *sched.Cycle, in *view.Instance) bool { return in.Index%3 == 0 }))
	}
	p, err := sched.NewProfile("p", filters, ws, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMemoizedRunMatchesFullRun checks that Run, with its memo, branch and bound and uniform scores, finds
// what running every plugin over every candidate finds: the same counts, the same ranking, the same totals
// and scores to the bit.
func TestMemoizedRunMatchesFullRun(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	runs, bounded := 0, 0
	for iter := range 1500 {
		v := randomView(rng)
		p := randomProfile(t, rng)
		var memoS, fullS sched.Scratch
		for q := range 12 {
			model := []string{"m", "o", "x"}[rng.IntN(3)]
			req := &router.Request{Model: model, PromptTokens: []int{0, 500, 1000, 5000, 9000}[rng.IntN(5)], MaxTokens: rng.IntN(4),
				SourceNode: []string{"", "n0", "n1", "n9"}[rng.IntN(4)]}
			for range rng.IntN(3) {
				req.Exclude = append(req.Exclude, fmt.Sprintf("i%03d", rng.IntN(120)))
			}
			c := &sched.Cycle{Request: req, View: v}
			all := v.All()
			if len(all) > 0 {
				c.Decode = all[rng.IntN(len(all))]
				for range rng.IntN(4) {
					c.Prefix.Hits = append(c.Prefix.Hits, affinity.Hit{Instance: all[rng.IntN(len(all))].AffinityID, Blocks: 1 + rng.IntN(8)})
				}
				if len(c.Prefix.Hits) > 0 {
					c.Prefix.Blocks = 8
				}
			}
			seed := [][]*view.Instance{v.Instances("m"), v.Decoders("m"), v.Prefillers(model), v.Instances(model)}[rng.IntN(4)]
			top, timed := rng.IntN(5), rng.IntN(3) == 0
			got := p.Run(c, seed, top, &memoS, timed)
			want := p.RunAll(c, seed, top, &fullS, false)
			what := fmt.Sprintf("iter %d, request %d (%+v, top %d)", iter, q, *req, top)
			if got.Considered != want.Considered || got.Survivors() != want.Survivors() || !slices.Equal(got.Removed, want.Removed) {
				t.Fatalf("%s: considered %d, survivors %d, removed %v; want %d, %d, %v", what,
					got.Considered, got.Survivors(), got.Removed, want.Considered, want.Survivors(), want.Removed)
			}
			if len(got.Ranked) != len(want.Ranked) {
				t.Fatalf("%s: %d ranked, want %d", what, len(got.Ranked), len(want.Ranked))
			}
			for k := range got.Ranked {
				g, w := got.Ranked[k], want.Ranked[k]
				if g.Instance != w.Instance || math.Float64bits(g.Total) != math.Float64bits(w.Total) {
					t.Fatalf("%s: place %d is %s with %v, want %s with %v", what, k, g.Instance.ID, g.Total, w.Instance.ID, w.Total)
				}
				for j := range p.Scorers() {
					if gs, ws := got.Score(g, j), want.Score(w, j); math.Float64bits(gs) != math.Float64bits(ws) {
						t.Fatalf("%s: place %d, scorer %s: %v, want %v", what, k, p.Scorers()[j].Scorer.Name(), gs, ws)
					}
				}
			}
			runs++
			if len(got.Ranked) > 0 && got.Survivors() > 32 {
				bounded++
			}
		}
	}
	if bounded < runs/20 {
		t.Errorf("only %d of %d runs ranked more than a chunk of candidates", bounded, runs)
	}
}

// TestMemoizedRunConcurrent shares one profile and one view between goroutines, each with its own Scratch,
// from the first run on (so that they race to build the memo); run with -race.
func TestMemoizedRunConcurrent(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	v := randomView(rng)
	for len(v.Instances("m")) < 50 {
		v = randomView(rng)
	}
	p, err := sched.NewProfile("p", []sched.Filter{filter.Model(), filter.NotExcluded(), filter.Ready()},
		[]sched.Weighted{{Scorer: scorer.NewLoad(), Weight: 1}, {Scorer: scorer.NewKVUtilization(), Weight: 0.5}, {Scorer: scorer.NewLocality(), Weight: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	seed := v.Instances("m")
	req := func(g int) *router.Request {
		r := &router.Request{Model: "m", SourceNode: fmt.Sprintf("n%d", g%3)}
		if g%2 == 0 {
			r.Exclude = []string{seed[g%len(seed)].ID}
		}
		return r
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s, full sched.Scratch
			for range 200 {
				c := &sched.Cycle{Request: req(g), View: v}
				got, want := p.Run(c, seed, 2, &s, g%3 == 0), p.RunAll(c, seed, 2, &full, false)
				for k := range want.Ranked {
					if k >= len(got.Ranked) || got.Ranked[k].Instance != want.Ranked[k].Instance || got.Ranked[k].Total != want.Ranked[k].Total {
						t.Errorf("goroutine %d: ranked %v, want %v", g, got.Ranked, want.Ranked)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
