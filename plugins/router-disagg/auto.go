package routerdisagg

import (
	"slices"
	"strconv"
	"time"

	"github.com/duet-ai/duet/plugins/router-disagg/cost"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/scorer"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// Keys of Decision.Scores in PDAuto, in seconds: the chosen placement's estimates, and the best local and
// remote placements' totals (each only when estimated). The gateway compares the chosen ones with the
// request's timings.
const (
	ScoreEstimateFirstToken = "estimate-first-token-s"
	ScoreEstimateTotal      = "estimate-total-s"
	ScoreEstimateLocal      = "estimate-local-total-s"
	ScoreEstimateRemote     = "estimate-remote-total-s"
)

// remoteOption is one prefill candidate for one decode instance, with its estimate.
type remoteOption struct {
	p   *view.Instance
	est cost.Estimate
}

// autoChoice is what PDAuto chose, and what it weighed.
type autoChoice struct {
	ok       bool           // false: the decode winner has no measured speed; the threshold decides
	missing  cost.Estimate  // why not, when !ok
	dec      int            // index of the chosen decode instance in the decode result
	remote   bool           // prefill on eps
	est      cost.Estimate  // the chosen placement's estimate
	local    cost.Estimate  // the best local placement (on dec when !remote)
	localDec int            // its decode index
	base     cost.Estimate  // local on the decode winner
	best     remoteOption   // the best remote placement, if any (bestDec is its decode index)
	bestDec  int            //
	uncached int            // on the chosen decode instance
	eps      []remoteOption // the chosen decode instance's prefill candidates, fastest first (remote only)
	skipped  int            // prefill candidates without the measurements to estimate
}

func (r *Router) objective(e *cost.Estimate) time.Duration {
	if r.cfg.Auto.Objective == ObjectiveFirstToken {
		return e.FirstToken
	}
	return e.Total
}

// beats reports whether a is enough faster than b to be worth leaving b's placement for.
func (r *Router) beats(a, b *cost.Estimate) bool {
	return float64(r.objective(a)) < float64(r.objective(b))*(1-r.cfg.Auto.Margin)
}

// auto weighs, for the decode profile's best few instances, prefilling locally and on each of the prefill
// profile's best few for it, and chooses the fastest by estimate. Leaving the decode winner (for another
// decode instance, or a remote prefill) takes a placement Margin faster than its local one.
func (r *Router) auto(c *sched.Cycle, v *view.View, s *scratch, dres *sched.Result, timed bool) autoChoice {
	req := c.Request
	cp := &r.cfg.Auto.Cost
	var a autoChoice
	a.bestDec = -1
	var shared *view.Instance // the decode instance whose prefill candidates s.shared holds
	for i, rk := range dres.Ranked {
		d := rk.Instance
		uncached := r.uncached(c, d)
		var hopPath *router.Path
		if req.SourceNode != "" && req.SourceNode != d.Node {
			hopPath, _ = scorer.LinkPath(v, req.SourceNode, d.Node)
		}
		hop := cp.Hop(req.SourceNode, d.Node, hopPath)
		loc := cp.Local(d.Instance, uncached, req.MaxTokens, hop)
		if i == 0 {
			if !loc.Known() {
				return autoChoice{missing: loc}
			}
			a.ok, a.base, a.local, a.localDec, a.uncached = true, loc, loc, 0, uncached
		} else if loc.Known() && r.beats(&loc, &a.base) && r.objective(&loc) < r.objective(&a.local) {
			a.local, a.localDec = loc, i
		}
		if r.cfg.MaxPrefillEndpoints == 0 || uncached < r.cfg.Auto.MinTokens {
			continue
		}
		// A remote prefill still has the hop, the queue and the decoding: when those alone cannot win, the
		// prefill profile need not run (a prompt cached on the winner is the common case).
		if loc.Known() {
			lb := cost.Estimate{FirstToken: loc.Hop + loc.Queue}
			lb.Total = lb.FirstToken + loc.Decode
			bestSoFar := r.objective(&a.local)
			if a.bestDec >= 0 {
				bestSoFar = min(bestSoFar, r.objective(&a.best.est))
			}
			if !r.beats(&lb, &a.base) || r.objective(&lb) >= bestSoFar {
				continue
			}
		}
		opts := s.options[:0]
		cands := r.prefillCandidates(c, v, s, d, shared, timed)
		if shared == nil && !v.HasLinkedPrefill(d) {
			shared = d
		}
		for _, p := range cands {
			if p == d {
				continue
			}
			path, _ := scorer.LinkPath(v, p.Node, d.Node)
			est := cp.Remote(p.Instance, d.Instance, path, uncached, req.MaxTokens, hop)
			if !est.Known() {
				a.skipped++
				continue
			}
			opts = append(opts, remoteOption{p: p, est: est})
		}
		// Fastest first; the prefill profile's order breaks ties (a stable sort).
		slices.SortStableFunc(opts, func(x, y remoteOption) int {
			return int(min(max(r.objective(&x.est)-r.objective(&y.est), -1), 1))
		})
		s.options = opts
		if len(opts) > 0 && (a.bestDec < 0 || r.objective(&opts[0].est) < r.objective(&a.best.est)) {
			a.best, a.bestDec = opts[0], i
			a.eps = append(s.chosen[:0], opts...)
			s.chosen = a.eps
		}
	}
	c.Decode = nil
	a.dec, a.est = a.localDec, a.local
	if a.bestDec >= 0 && r.beats(&a.best.est, &a.base) && r.objective(&a.best.est) < r.objective(&a.local) {
		a.dec, a.est, a.remote = a.bestDec, a.best.est, true
	}
	a.uncached = r.uncached(c, dres.Ranked[a.dec].Instance)
	return a
}

// prefillCandidates are the prefill profile's best for d. Decode instances of one fingerprint without instance
// links share them (the profile runs once per request, for the first; the others take its list, less
// themselves and endpoints they cannot dial): the filters that depend on the decode instance would keep the
// same ones, and the cost model, not the profile's order, ranks them.
func (r *Router) prefillCandidates(c *sched.Cycle, v *view.View, s *scratch, d *view.Instance, shared *view.Instance, timed bool) []*view.Instance {
	if shared != nil && !v.HasLinkedPrefill(d) && d.Fingerprint == shared.Fingerprint {
		out := s.ownP[:0]
		for _, p := range s.shared {
			if p == d {
				continue
			}
			var pathAddr string
			if path, ok := v.PathBetween(d, p); ok {
				pathAddr = path.Address
			}
			if _, err := view.ResolveKV(p.KVEndpoint, p.Node == d.Node, pathAddr); err == nil {
				out = append(out, p)
			}
		}
		s.ownP = out
		return out
	}
	c.Decode = d
	seed := v.Prefillers(c.Request.Model)
	if v.HasLinkedPrefill(d) {
		seed = v.LinkedPrefill(d)
	}
	// One more than asked, so that a decode instance that shares the list and is on it still gets as many.
	pres := r.prefill.Run(c, seed, r.cfg.Auto.PrefillCandidates+1, &s.prefill, timed)
	c.Decode = nil
	out := s.ownP[:0]
	for _, pk := range pres.Ranked {
		out = append(out, pk.Instance)
	}
	s.ownP = out
	if shared == nil && !v.HasLinkedPrefill(d) {
		s.shared = append(s.shared[:0], out...)
	}
	return out
}

// uncached is how many of the request's prompt tokens the instance likely lacks in its prefix cache.
func (r *Router) uncached(c *sched.Cycle, d *view.Instance) int {
	return r.decider.decide(c.Request.PromptTokens, c.Prefix.Cached(d.AffinityID)*r.cfg.BlockTokens).Uncached
}

// autoEndpoints lists the chosen remote placement's prefill endpoints, fastest first.
func (r *Router) autoEndpoints(v *view.View, a *autoChoice, dec *view.Instance) []router.PrefillEndpoint {
	n := min(len(a.eps), r.cfg.MaxPrefillEndpoints)
	out := make([]router.PrefillEndpoint, 0, n)
	for _, o := range a.eps {
		if len(out) == n {
			break
		}
		if ep, ok := prefillEndpoint(v, o.p, dec); ok {
			out = append(out, ep)
		}
	}
	return out
}

// explainAuto appends what PDAuto chose and the estimates behind it, after the decode clause:
//
//	; prefill on p@n1 over ethernet (10 Gb/s); auto: remote 11.6 s (first token 3.1 s) vs local 24.5 s
//	(first token 20.0 s), 5200 uncached tokens, 128 out
func (r *Router) explainAuto(b []byte, v *view.View, a *autoChoice, dres *sched.Result, eps []router.PrefillEndpoint, req *router.Request) []byte {
	win := dres.Ranked[a.dec].Instance
	if a.remote && len(eps) > 0 {
		b = append(b, "; prefill on "...)
		b = endpointAt(b, eps[0])
		b = append(b, ' ')
		b = path(b, v, eps[0].Node, win.Node)
		for _, e := range eps[1:] {
			b = append(b, ", then "...)
			b = endpointAt(b, e)
		}
		b = append(b, "; auto: remote "...)
		b = estimate(b, &a.est)
		b = basis(b, &a.est)
		b = append(b, " vs local "...)
		b = estimate(b, &a.local)
		if a.localDec != a.dec {
			b = append(b, " on "...)
			b = at(b, dres.Ranked[a.localDec].Instance.ID, dres.Ranked[a.localDec].Instance.Node)
		}
	} else {
		b = append(b, "; prefill locally; auto: local "...)
		b = estimate(b, &a.est)
		if a.dec != 0 {
			b = append(b, " vs "...)
			b = seconds(b, r.objective(&a.base))
			b = append(b, " on "...)
			b = at(b, dres.Ranked[0].Instance.ID, dres.Ranked[0].Instance.Node)
		}
		if a.bestDec >= 0 {
			b = append(b, " vs remote "...)
			b = seconds(b, r.objective(&a.best.est))
			b = append(b, " via "...)
			b = at(b, a.best.p.ID, a.best.p.Node)
			b = basis(b, &a.best.est)
		} else if a.skipped > 0 {
			b = append(b, " (no prefill candidate measured)"...)
		}
	}
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(a.uncached), 10)
	b = append(b, " uncached tokens, "...)
	if req.MaxTokens > 0 {
		b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	} else {
		b = strconv.AppendInt(b, int64(r.cfg.Auto.Cost.OutputTokens), 10)
		b = append(b, " (assumed)"...)
	}
	return append(b, " out"...)
}

// basis says what a remote estimate rests on when it is not the prefill node's figures and a measured link.
func basis(b []byte, e *cost.Estimate) []byte {
	switch {
	case e.Whole:
		return append(b, " (as remote prefills from there went)"...)
	case e.Nominal:
		return append(b, " (link at nominal speed)"...)
	}
	return b
}

// estimate writes "11.6 s (first token 3.10 s)".
func estimate(b []byte, e *cost.Estimate) []byte {
	b = seconds(b, e.Total)
	b = append(b, " (first token "...)
	b = seconds(b, e.FirstToken)
	return append(b, ')')
}

// seconds writes a duration as seconds with 3 significant digits: "24.5 s", "0.312 s".
func seconds(b []byte, d time.Duration) []byte {
	s := d.Seconds()
	prec := 1
	switch {
	case s >= 100:
		prec = 0
	case s < 1:
		prec = 3
	case s < 10:
		prec = 2
	}
	b = strconv.AppendFloat(b, s, 'f', prec, 64)
	return append(b, " s"...)
}
