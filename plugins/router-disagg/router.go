package routerdisagg

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/duet-ai/duet/plugins/router-disagg/affinity"
	"github.com/duet-ai/duet/plugins/router-disagg/filter"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/scorer"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// Profile names.
const (
	DecodeProfile  sched.Name = "decode"
	PrefillProfile sched.Name = "prefill"
)

// Keys of Decision.Scores besides the scorers' names.
const (
	// ScoreDecodeTotal is the decode winner's weighted mean score.
	ScoreDecodeTotal = "decode-total"
	// ScorePrefillTotal is the first prefill endpoint's weighted mean score.
	ScorePrefillTotal = "prefill-total"
	// ScoreUncachedTokens is the prompt tokens likely not cached on the decode instance (prompt length known).
	ScoreUncachedTokens = "uncached-tokens"
)

// Router is the P/D router. It is safe for concurrent use; Route reads the snapshot and never modifies it.
type Router struct {
	cfg      Config
	views    view.Cache
	affinity *affinity.Index
	decider  prefillDecider
	decode   *sched.Profile
	prefill  *sched.Profile
	scratch  sync.Pool
	routes   atomic.Uint64
}

var _ router.Router = (*Router)(nil)

// New returns a router with the given configuration (start from DefaultConfig).
func New(cfg Config) (*Router, error) { return newRouter(cfg) }

// newRouter builds the router with options for both profiles (the tests compare memoized runs with full ones).
func newRouter(cfg Config, opts ...sched.Option) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.PrefillHardware = append([]string(nil), cfg.PrefillHardware...)
	w := cfg.Weights
	decode, err := sched.NewProfile(DecodeProfile, filter.Decode(), []sched.Weighted{
		{Scorer: scorer.NewLoad(), Weight: w.Load},
		{Scorer: scorer.NewKVUtilization(), Weight: w.KVUtilization},
		{Scorer: scorer.NewPrefix(), Weight: w.Prefix},
		{Scorer: scorer.NewLocality(), Weight: w.Locality},
		{Scorer: scorer.NewPartner(cfg.PrefillThreshold), Weight: w.Partner},
	}, opts...)
	if err != nil {
		return nil, err
	}
	prefillScorers := []sched.Weighted{
		{Scorer: sched.Renamed(scorer.NewLoad(), scorer.PrefillLoadName), Weight: w.PrefillLoad},
		{Scorer: scorer.NewLink(), Weight: w.Link},
	}
	if len(cfg.PrefillHardware) > 0 {
		prefillScorers = append(prefillScorers, sched.Weighted{Scorer: scorer.NewHardware(cfg.PrefillHardware), Weight: w.Hardware})
	}
	// Exact KV before approximate KV (another quantization) when the scores cannot tell them apart.
	exactFirst := sched.PreferOnTie(func(c *sched.Cycle, in *view.Instance) bool { return view.ExactKV(in, c.Decode) })
	prefill, err := sched.NewProfile(PrefillProfile, filter.Prefill(), prefillScorers, append([]sched.Option{exactFirst}, opts...)...)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg:      cfg,
		affinity: affinity.New(cfg.AffinitySize, cfg.AffinityMaxBlocks),
		decider:  prefillDecider{Tokens: cfg.PrefillThreshold, WhenUnknown: cfg.PrefillWhenUnknown},
		decode:   decode,
		prefill:  prefill,
	}
	r.scratch.New = func() any { return new(scratch) }
	return r, nil
}

// FromEnv returns a router configured by the DUET_DISAGG_* environment variables (see ConfigFromEnv).
func FromEnv() (*Router, error) {
	cfg, err := ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Config returns the router's configuration.
func (r *Router) Config() Config {
	c := r.cfg
	c.PrefillHardware = append([]string(nil), c.PrefillHardware...)
	return c
}

// scratch is one Route's reusable memory.
type scratch struct {
	req     router.Request
	cycle   sched.Cycle
	hits    []affinity.Hit
	decode  sched.Scratch
	prefill sched.Scratch
	reason  []byte
	options []remoteOption   // PDAuto: one decode instance's prefill candidates
	chosen  []remoteOption   // PDAuto: the best decode instance's, kept
	shared  []*view.Instance // PDAuto: prefill candidates shared by decode instances of one fingerprint
	ownP    []*view.Instance // PDAuto: one decode instance's prefill candidates
}

// Route picks the decode instance and, when the uncached prompt is long enough, the prefill endpoints.
func (r *Router) Route(ctx context.Context, req router.Request, snap *router.Snapshot) (router.Decision, error) {
	if err := ctx.Err(); err != nil {
		return router.Decision{}, err
	}
	if snap == nil {
		return router.Decision{}, fmt.Errorf("%w: model %q: no snapshot", router.ErrNoCandidate, req.Model)
	}
	n := r.routes.Add(1) - 1
	v := r.views.Get(snap)
	s := r.scratch.Get().(*scratch)
	defer r.scratch.Put(s)
	s.req = req
	c := &s.cycle
	*c = sched.Cycle{Request: &s.req, View: v}
	c.Prefix = r.affinity.Match(req.PrefixHashes, s.hits)
	s.hits = c.Prefix.Hits

	timed := r.cfg.LatencySampleEvery > 0 && n%uint64(r.cfg.LatencySampleEvery) == 0
	// The view lists each model's instances by the roles that can serve each profile, which is all the filters
	// would keep of the others; only when nothing passes does the whole chain run over all of the model's
	// instances, to say which filter removed what.
	// PDAuto weighs the decode profile's best few for a prompt that may be long enough; a short one costs
	// nothing more than in PDThreshold.
	auto := r.cfg.PD == PDAuto && req.PromptTokens >= r.cfg.Auto.MinTokens
	top := 1
	if auto {
		top = r.cfg.Auto.DecodeCandidates
	}
	dres := r.decode.Run(c, v.Decoders(req.Model), top, &s.decode, timed)
	if len(dres.Ranked) == 0 {
		full := r.decode.Run(c, v.Instances(req.Model), 1, &s.decode, false)
		return router.Decision{}, noCandidate(req.Model, r.decode, &full)
	}
	var a autoChoice
	if auto {
		a = r.auto(c, v, s, &dres, timed)
		if a.ok {
			return r.decideAuto(v, s, &dres, &a), nil
		}
	}
	win := dres.Ranked[0]
	dec := win.Instance
	cachedTokens := c.Prefix.Cached(dec.AffinityID) * r.cfg.BlockTokens
	verdict := r.decider.decide(req.PromptTokens, cachedTokens)
	if r.cfg.PD == PDAuto && !auto && verdict.Known {
		verdict.Remote = false // a short prompt stays where it is decoded
	}

	ranPrefill := verdict.Remote && r.cfg.MaxPrefillEndpoints > 0
	// Sized to what it will hold: a map of at most 8 entries is one allocation of one group, a larger one more.
	size := len(r.decode.Scorers()) + 2
	if ranPrefill {
		size += len(r.prefill.Scorers()) + 1
	}
	d := router.Decision{DecodeInstance: dec.ID, DecodeNode: dec.Node, Scores: make(map[string]float64, size)}
	for j, w := range r.decode.Scorers() {
		d.Scores[string(w.Scorer.Name())] = dres.Score(win, j)
	}
	d.Scores[ScoreDecodeTotal] = win.Total
	if verdict.Known {
		d.Scores[ScoreUncachedTokens] = float64(verdict.Uncached)
	}

	var pres sched.Result
	if ranPrefill {
		c.Decode = dec
		seed := v.Prefillers(req.Model)
		if v.HasLinkedPrefill(dec) {
			seed = v.LinkedPrefill(dec)
		}
		pres = r.prefill.Run(c, seed, r.cfg.MaxPrefillEndpoints, &s.prefill, timed)
		if len(pres.Ranked) == 0 {
			pres = r.prefill.Run(c, v.Instances(req.Model), r.cfg.MaxPrefillEndpoints, &s.prefill, false)
		}
		if len(pres.Ranked) > 0 {
			d.PrefillEndpoints = make([]router.PrefillEndpoint, 0, len(pres.Ranked))
		}
		for _, rk := range pres.Ranked {
			if ep, ok := prefillEndpoint(v, rk.Instance, dec); ok {
				d.PrefillEndpoints = append(d.PrefillEndpoints, ep)
			}
		}
		if len(pres.Ranked) > 0 {
			best := pres.Ranked[0]
			for j, w := range r.prefill.Scorers() {
				d.Scores[string(w.Scorer.Name())] = pres.Score(best, j)
			}
			d.Scores[ScorePrefillTotal] = best.Total
		}
	}
	r.affinity.Record(req.PrefixHashes, dec.AffinityID)

	s.reason = r.explain(s.reason[:0], v, &dres, &pres, ranPrefill, verdict, &s.req, d.PrefillEndpoints)
	switch {
	case auto && !a.ok:
		s.reason = append(s.reason, "; auto: no "...)
		s.reason = append(s.reason, a.missing.Missing...)
		s.reason = append(s.reason, " measured for "...)
		s.reason = append(s.reason, a.missing.Of...)
		s.reason = append(s.reason, " yet, so by the threshold"...)
	case r.cfg.PD == PDAuto && verdict.Known:
		s.reason = append(s.reason, " (auto)"...)
	}
	d.Reason = string(s.reason)
	return d, nil
}

// decideAuto is the decision PDAuto chose.
func (r *Router) decideAuto(v *view.View, s *scratch, dres *sched.Result, a *autoChoice) router.Decision {
	win := dres.Ranked[a.dec]
	dec := win.Instance
	d := router.Decision{DecodeInstance: dec.ID, DecodeNode: dec.Node, Scores: make(map[string]float64, len(r.decode.Scorers())+6)}
	for j, w := range r.decode.Scorers() {
		d.Scores[string(w.Scorer.Name())] = dres.Score(win, j)
	}
	d.Scores[ScoreDecodeTotal] = win.Total
	d.Scores[ScoreUncachedTokens] = float64(a.uncached)
	d.Scores[ScoreEstimateFirstToken] = a.est.FirstToken.Seconds()
	d.Scores[ScoreEstimateTotal] = a.est.Total.Seconds()
	d.Scores[ScoreEstimateLocal] = a.local.Total.Seconds()
	if a.bestDec >= 0 {
		d.Scores[ScoreEstimateRemote] = a.best.est.Total.Seconds()
	}
	if a.remote {
		d.PrefillEndpoints = r.autoEndpoints(v, a, dec)
	}
	r.affinity.Record(s.req.PrefixHashes, dec.AffinityID)
	b := r.explainDecode(s.reason[:0], win, dres, &s.req)
	s.reason = r.explainAuto(b, v, a, dres, d.PrefillEndpoints, &s.req)
	d.Reason = string(s.reason)
	return d
}

// noCandidate explains an empty decode profile: how many instances of the model there were and what each
// filter removed.
func noCandidate(model string, p *sched.Profile, res *sched.Result) error {
	if res.Considered == 0 {
		return fmt.Errorf("%w: model %q: no instance of it in the snapshot", router.ErrNoCandidate, model)
	}
	return fmt.Errorf("%w: model %q: %s", router.ErrNoCandidate, model, removed(nil, p, res))
}

// Stats are the router's counters.
type Stats struct {
	// Routes is how many Route calls got as far as a snapshot.
	Routes uint64
	// Plugins are the per-plugin call counts and times, decode profile first.
	Plugins []sched.PluginStats
	// AffinityEntries is how many prefix hashes the affinity index holds.
	AffinityEntries int
}

// Stats returns the router's counters. Reading them costs a few atomic loads per plugin.
func (r *Router) Stats() Stats {
	return Stats{
		Routes:          r.routes.Load(),
		Plugins:         append(r.decode.Stats(), r.prefill.Stats()...),
		AffinityEntries: r.affinity.Len(),
	}
}

// prefillEndpoint is how decode instance dec reaches prefill instance p's KV: over the best path between their
// nodes, marked approximate when their KV is not the same model's.
func prefillEndpoint(v *view.View, p, dec *view.Instance) (router.PrefillEndpoint, bool) {
	var pathAddr string
	if path, ok := v.PathBetween(dec, p); ok {
		pathAddr = path.Address
	}
	addr, err := view.ResolveKV(p.KVEndpoint, p.Node == dec.Node, pathAddr)
	if err != nil {
		return router.PrefillEndpoint{}, false // the kv-endpoint filter keeps only dialable endpoints; this is a guard
	}
	return router.PrefillEndpoint{InstanceID: p.ID, Node: p.Node, Address: addr, Approximate: !view.ExactKV(p, dec)}, true
}
