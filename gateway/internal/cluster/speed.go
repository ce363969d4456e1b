package cluster

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/serfcluster"
)

// Speeds learns how fast each of this node's instances runs from the timings of its real requests (and a
// short calibration when a model loads) and publishes the figures through the cluster, for routers that
// decide by estimated time (router-disagg's PD auto). Each figure is an exponentially weighted mean, so it
// follows the instance as its load changes; a new figure is handed to serfcluster only when some figure
// moved by more than publishChange, and serfcluster spreads it at most once per its SpeedInterval.
//
// It also compares each request's estimate (the router's, in Decision.Scores) with what happened: the
// error, per kind of placement, is what EstimateErrors returns and the metrics publish.
type Speeds struct {
	publish func(id string, sp serfcluster.Speed) // nil: keep the figures here only
	mu      sync.Mutex
	by      map[string]*learned
	errs    map[string]*EstimateError  // by placement kind
	pending map[string]pendingEstimate // by request id, until its timings come
	// onError, when set, also receives every estimate error (the metrics' histogram).
	onError func(kind, phase string, relErr float64)
}

// Placement kinds of estimate errors.
const (
	PlacementLocal  = "local"
	PlacementRemote = "remote"
)

// alpha is the weight of a new sample in each figure's running mean: about the last five requests count.
const alpha = 0.3

// publishChange is the least relative change of a figure that is worth publishing again.
const publishChange = 0.03

// Fewest tokens a sample needs to say something of a rate: below, fixed costs dominate.
const (
	minPrefillSample = 32
	minDecodeSample  = 4
	minKVSample      = 64 << 10
)

type ewma struct {
	v float64
	n int64
}

func (e *ewma) add(x float64) {
	if !(x > 0) || math.IsInf(x, 0) {
		return
	}
	if e.n == 0 {
		e.v = x
	} else {
		e.v += alpha * (x - e.v)
	}
	e.n++
}

// addZero adds a sample that may be zero (a queue wait).
func (e *ewma) addZero(x float64) {
	if e.n == 0 {
		e.v = x
	} else {
		e.v += alpha * (x - e.v)
	}
	e.n++
}

type learned struct {
	prefill   [router.PrefillBands]ewma
	decode    ewma
	queue     ewma // seconds
	ingest    ewma
	ingress   []ingressLink
	kvPerTok  int64
	kvState   int64
	samples   int64
	published serfcluster.Speed
	has       bool // published holds what went out last
}

type ingressLink struct {
	from    serfcluster.NodeID
	goodput ewma
	remote  [router.PrefillBands]ewma // prompt tokens per second of whole remote prefills (request to last byte), by band
	rtt     time.Duration
	at      time.Time
	probed  bool // goodput is from probes only (ObserveProbe), until a real transfer replaces it
}

// NewSpeeds returns an empty book; publish (when not nil) receives each instance's figures when they change.
func NewSpeeds(publish func(id string, sp serfcluster.Speed)) *Speeds {
	return &Speeds{publish: publish, by: map[string]*learned{}, errs: map[string]*EstimateError{}, pending: map[string]pendingEstimate{}}
}

// Speeds returns a book that publishes through this agent.
func (a *Agent) Speeds() *Speeds {
	a.speedsOnce.Do(func() {
		a.speeds = NewSpeeds(func(id string, sp serfcluster.Speed) {
			if err := a.c.SetSpeed(id, sp); err != nil {
				a.log.Warn("cluster: publish speed", "instance", id, "error", err)
			}
		})
	})
	return a.speeds
}

// Sample is what one finished request says of its instance's speed.
type Sample struct {
	Instance string
	// KV is the instance's KV layout, for the bytes per prompt token and the state bytes per transfer.
	KV    engine.KVLayout
	Usage engine.Usage
	engine.Timings
	// PrefillNode is the node that prefilled remotely (Timings.Remote), and RTT the network's round trip to
	// it as the cluster measured it (0: unknown).
	PrefillNode string
	RTT         time.Duration
}

// Observe learns from one finished request.
func (s *Speeds) Observe(sm Sample) {
	s.mu.Lock()
	l := s.by[sm.Instance]
	if l == nil {
		l = &learned{}
		s.by[sm.Instance] = l
	}
	if b := sm.KV.BytesPerToken(); sm.KV.NumLayers > 0 && (b > 0 || sm.KV.StateBytes > 0) {
		l.kvPerTok, l.kvState = b, sm.KV.StateBytes
	}
	l.samples++
	l.queue.addZero(max(sm.Queue, 0).Seconds())
	computed := sm.Usage.PromptTokens - sm.Usage.CachedTokens
	if sm.PrefillSource == engine.PrefillLocal && computed >= minPrefillSample && sm.Prefill > 0 {
		l.prefill[router.PrefillBand(computed)].add(float64(computed) / sm.Prefill.Seconds())
	}
	if n := sm.Usage.CompletionTokens - 1; n >= minDecodeSample && sm.Decode > 0 {
		l.decode.add(float64(n) / sm.Decode.Seconds())
	}
	if r := sm.Remote; r != nil && r.FallbackReason == "" && sm.PrefillSource == engine.PrefillRemote && r.Bytes >= minKVSample {
		if d := r.Transfer - r.Wait; d > 0 && sm.PrefillNode != "" {
			var tps float64
			if r.Tokens >= minPrefillSample && r.Transfer > 0 {
				tps = float64(r.Tokens) / r.Transfer.Seconds()
			}
			l.observeIngress(serfcluster.NodeID(sm.PrefillNode), float64(r.Bytes)/d.Seconds(), tps, r.Tokens, sm.RTT)
		}
		if r.Ingest > 0 {
			l.ingest.add(float64(r.Bytes) / r.Ingest.Seconds())
		}
	}
	sp, changed := l.speed()
	s.mu.Unlock()
	if changed && s.publish != nil {
		s.publish(sm.Instance, sp)
	}
}

func (l *learned) observeIngress(from serfcluster.NodeID, goodput, tps float64, tokens int, rtt time.Duration) {
	x := l.link(from)
	if x.probed {
		// A real transfer replaces what probes said: KV streams as it is computed, so its goodput is what a
		// remote prefill gets, where a probe's is the bare link's.
		x.goodput, x.probed = ewma{}, false
	}
	x.goodput.add(goodput)
	x.remote[router.PrefillBand(tokens)].add(tps)
	if rtt > 0 {
		x.rtt = rtt
	}
	x.at = time.Now()
}

// link is the ingress link from a node, added (forgetting the one measured longest ago when there are
// serfcluster.MaxSpeedIngress) when it is new.
func (l *learned) link(from serfcluster.NodeID) *ingressLink {
	i := slices.IndexFunc(l.ingress, func(x ingressLink) bool { return x.from == from })
	if i >= 0 {
		return &l.ingress[i]
	}
	if len(l.ingress) == serfcluster.MaxSpeedIngress {
		oldest := 0
		for j, x := range l.ingress {
			if x.at.Before(l.ingress[oldest].at) {
				oldest = j
			}
		}
		l.ingress = slices.Delete(l.ingress, oldest, oldest+1)
	}
	l.ingress = append(l.ingress, ingressLink{from: from})
	return &l.ingress[len(l.ingress)-1]
}

// ObserveProbe learns the link from a node into an instance from a probe: a timed transfer between the two
// gateways (not a prefill), made before any KV crossed the link, so that the router sees a slow link before
// a request pays for it. The probe's goodput seeds the link until the first real transfer replaces it.
func (s *Speeds) ObserveProbe(instance string, from serfcluster.NodeID, goodput float64, rtt time.Duration) {
	if !(goodput > 0) || math.IsInf(goodput, 0) {
		return
	}
	s.mu.Lock()
	l := s.by[instance]
	if l == nil {
		l = &learned{}
		s.by[instance] = l
	}
	x := l.link(from)
	if x.goodput.n > 0 && !x.probed {
		s.mu.Unlock()
		return // a real transfer measured it meanwhile
	}
	x.probed = true
	x.goodput.add(goodput)
	if rtt > 0 {
		x.rtt = rtt
	}
	x.at = time.Now()
	sp, changed := l.speed()
	s.mu.Unlock()
	if changed && s.publish != nil {
		s.publish(instance, sp)
	}
}

// NeedsProbe reports whether the link from a node into an instance wants a probe: no real transfer measured
// it, and no probe did within maxAge.
func (s *Speeds) NeedsProbe(instance string, from serfcluster.NodeID, maxAge time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.by[instance]
	if l == nil {
		return true
	}
	i := slices.IndexFunc(l.ingress, func(x ingressLink) bool { return x.from == from })
	if i < 0 {
		return true
	}
	x := &l.ingress[i]
	switch {
	case x.goodput.n == 0:
		return true
	case !x.probed:
		return false
	default:
		return time.Since(x.at) >= maxAge
	}
}

// speed is the instance's figures, and whether they moved enough since the last publication to publish
// (then they count as published).
func (l *learned) speed() (serfcluster.Speed, bool) {
	sp := l.figures()
	if l.has && !moved(&l.published, &sp) {
		return sp, false
	}
	l.published, l.has = sp, true
	return sp, true
}

func (l *learned) figures() serfcluster.Speed {
	sp := serfcluster.Speed{
		DecodeTPS: l.decode.v, QueueWait: time.Duration(l.queue.v * float64(time.Second)),
		KVBytesPerToken: l.kvPerTok, KVStateBytes: l.kvState, IngestBPS: l.ingest.v, Samples: l.samples,
		PrefillTPS: make([]float64, router.PrefillBands),
	}
	for i := range l.prefill {
		sp.PrefillTPS[i] = l.prefill[i].v
	}
	for _, x := range l.ingress {
		ls := serfcluster.LinkSpeed{From: x.from, BytesPerSecond: x.goodput.v, RTT: x.rtt, Samples: x.goodput.n, PrefillTPS: make([]float64, router.PrefillBands)}
		for i := range x.remote {
			ls.PrefillTPS[i] = x.remote[i].v
		}
		sp.Ingress = append(sp.Ingress, ls)
	}
	return sp
}

// moved reports whether some figure changed by more than publishChange (or appeared).
func moved(a, b *serfcluster.Speed) bool {
	far := func(x, y float64) bool { return math.Abs(x-y) > publishChange*math.Max(math.Abs(x), math.Abs(y)) }
	if far(a.DecodeTPS, b.DecodeTPS) || far(a.QueueWait.Seconds(), b.QueueWait.Seconds()) && math.Abs(a.QueueWait.Seconds()-b.QueueWait.Seconds()) > 0.005 ||
		far(a.IngestBPS, b.IngestBPS) || a.KVBytesPerToken != b.KVBytesPerToken || a.KVStateBytes != b.KVStateBytes || len(a.Ingress) != len(b.Ingress) {
		return true
	}
	for i := range a.PrefillTPS {
		if far(a.PrefillTPS[i], b.PrefillTPS[i]) {
			return true
		}
	}
	for i := range a.Ingress {
		if a.Ingress[i].From != b.Ingress[i].From || far(a.Ingress[i].BytesPerSecond, b.Ingress[i].BytesPerSecond) ||
			len(a.Ingress[i].PrefillTPS) != len(b.Ingress[i].PrefillTPS) {
			return true
		}
		for j := range a.Ingress[i].PrefillTPS {
			if far(a.Ingress[i].PrefillTPS[j], b.Ingress[i].PrefillTPS[j]) {
				return true
			}
		}
	}
	return false
}

// Forget drops an instance's figures (it was unloaded).
func (s *Speeds) Forget(id string) {
	s.mu.Lock()
	delete(s.by, id)
	s.mu.Unlock()
}

// Speed returns what the book learned of an instance so far.
func (s *Speeds) Speed(id string) (serfcluster.Speed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.by[id]
	if !ok {
		return serfcluster.Speed{}, false
	}
	return l.figures(), true
}

// EstimateError sums up how far the router's estimates were from what happened, for one kind of placement.
// Errors are relative: (actual − estimate) / estimate, so 0.2 is a request 20% slower than estimated.
type EstimateError struct {
	Count int64 `json:"count"`
	// MeanAbsTotal and MeanAbsFirstToken are running means (the last ~5 requests weigh most) of the absolute
	// relative error; LastTotal and LastFirstToken are the last request's signed errors.
	MeanAbsTotal      float64 `json:"mean_abs_total"`
	MeanAbsFirstToken float64 `json:"mean_abs_first_token"`
	LastTotal         float64 `json:"last_total"`
	LastFirstToken    float64 `json:"last_first_token"`
}

type pendingEstimate struct {
	kind              string
	firstToken, total float64
}

// maxPending bounds the estimates waiting for their requests' timings (one per request running here).
const maxPending = 1 << 14

// Expect remembers a request's estimate until Resolve gives its timings (or Forget drops it).
func (s *Speeds) Expect(requestID, kind string, estFirst, estTotal float64) {
	s.mu.Lock()
	if len(s.pending) < maxPending {
		s.pending[requestID] = pendingEstimate{kind: kind, firstToken: estFirst, total: estTotal}
	}
	s.mu.Unlock()
}

// Resolve compares a request's expected estimate, if any, with its timings.
func (s *Speeds) Resolve(requestID string, t engine.Timings) {
	s.mu.Lock()
	e, ok := s.pending[requestID]
	delete(s.pending, requestID)
	s.mu.Unlock()
	if ok {
		s.ObserveEstimate(e.kind, e.firstToken, e.total, t)
	}
}

// ForgetRequest drops a request's estimate (it ended without timings).
func (s *Speeds) ForgetRequest(requestID string) {
	s.mu.Lock()
	delete(s.pending, requestID)
	s.mu.Unlock()
}

// ObserveEstimate compares a request's estimate (seconds, from Decision.Scores) with its timings.
func (s *Speeds) ObserveEstimate(kind string, estFirst, estTotal float64, t engine.Timings) {
	if !(estTotal > 0) || !(estFirst > 0) || t.Total <= 0 {
		return
	}
	total := (t.Total.Seconds() - estTotal) / estTotal
	first := (t.FirstToken.Seconds() - estFirst) / estFirst
	s.mu.Lock()
	e := s.errs[kind]
	if e == nil {
		e = &EstimateError{}
		s.errs[kind] = e
	}
	if e.Count == 0 {
		e.MeanAbsTotal, e.MeanAbsFirstToken = math.Abs(total), math.Abs(first)
	} else {
		e.MeanAbsTotal += alpha * (math.Abs(total) - e.MeanAbsTotal)
		e.MeanAbsFirstToken += alpha * (math.Abs(first) - e.MeanAbsFirstToken)
	}
	e.Count++
	e.LastTotal, e.LastFirstToken = total, first
	hook := s.onError
	s.mu.Unlock()
	if hook != nil {
		hook(kind, "total", total)
		hook(kind, "first_token", first)
	}
}

// OnEstimateError sets a function that receives every estimate error as it is observed (for a histogram).
func (s *Speeds) OnEstimateError(f func(kind, phase string, relErr float64)) {
	s.mu.Lock()
	s.onError = f
	s.mu.Unlock()
}

// EstimateErrors returns the estimate errors so far, by placement kind.
func (s *Speeds) EstimateErrors() map[string]EstimateError {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]EstimateError, len(s.errs))
	for k, e := range s.errs {
		out[k] = *e
	}
	return out
}

// RouterSpeed converts a published speed for routers.
func RouterSpeed(sp *serfcluster.Speed) router.Speed {
	if sp == nil {
		return router.Speed{}
	}
	out := router.Speed{
		DecodeTPS: sp.DecodeTPS, QueueWait: sp.QueueWait, KVBytesPerToken: sp.KVBytesPerToken, KVStateBytes: sp.KVStateBytes,
		IngestBPS: sp.IngestBPS, Samples: sp.Samples,
	}
	copy(out.PrefillTPS[:], sp.PrefillTPS)
	for _, l := range sp.Ingress {
		ls := router.LinkSpeed{From: string(l.From), BytesPerSecond: l.BytesPerSecond, RTT: l.RTT, Samples: l.Samples}
		copy(ls.PrefillTPS[:], l.PrefillTPS)
		out.Ingress = append(out.Ingress, ls)
	}
	return out
}
