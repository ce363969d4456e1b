package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/duet-ai/duet/sdk/engine"
)

// The api label: the client API a request spoke.
const (
	APIChat        = "chat"        // POST /v1/chat/completions
	APICompletions = "completions" // POST /v1/completions
	APIResponses   = "responses"   // POST /v1/responses
	APIAnthropic   = "anthropic"   // POST /v1/messages
	APIOllama      = "ollama"      // POST /api/chat, /api/generate
)

// Outcomes of a hop, for duet_forward_hops_total.
const (
	HopAnswered    = "answered"    // the owner answered (whatever its status), and it reached the client
	HopUnreachable = "unreachable" // sent: no address for the owner, or it did not answer
	HopUnavailable = "unavailable" // sent: the owner could not take it (502/503 before answering); retried
	HopBroken      = "broken"      // sent: the owner's stream broke off mid-way
	HopCancelled   = "cancelled"   // sent: the client left or the request timed out during the hop
	HopOK          = "ok"          // received: answered below 400
	HopError       = "error"       // received: answered 400 or above
	HopRefused     = "refused"     // received: its cluster credential or route was refused
)

// Outcomes of admission and of a routing decision.
const (
	Admitted  = "admitted"
	Rejected  = "rejected"  // the queue was full or the wait too long: 429
	Cancelled = "cancelled" // the client left or the request timed out while waiting

	Routed      = "routed"
	NoCandidate = "no_candidate"
	RouteError  = "error"
)

// MaxModels bounds the model label's values; further models a cluster serves are counted as "other".
const MaxModels = 64

// Label values of a model that is not one of the cluster's.
const (
	ModelUnknown = "unknown" // no model was named, or one nobody serves
	ModelOther   = "other"   // served, but past MaxModels
)

// Buckets, in base units. Latencies follow vLLM's where they measure the same thing, widened for the echo
// engine's microseconds and for prompts of minutes.
var (
	requestBuckets    = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}
	ttftBuckets       = []float64{.001, .0025, .005, .01, .02, .04, .06, .08, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160}
	itlBuckets        = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2.5, 5, 10}
	transferBuckets   = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	throughputBuckets = prometheus.ExponentialBuckets(1e6, 3.1622776601683795, 11) // 1 MB/s to 100 GB/s, half decades
	decisionBuckets   = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, .01, .1}
	admissionBuckets  = []float64{1e-5, 1e-4, 1e-3, .01, .1, .5, 1, 5, 10, 30}
)

// Metrics is one gateway's series. Its methods are safe for concurrent use, and do nothing on a nil
// *Metrics, so a server built without metrics (unit tests) needs no checks.
type Metrics struct {
	reg   *prometheus.Registry
	src   Sources
	stats *statsCache

	requests        *prometheus.CounterVec   // api, model, status
	requestSeconds  *prometheus.HistogramVec // api, model
	ttft            *prometheus.HistogramVec // api, model
	itl             *prometheus.HistogramVec // model
	promptTokens    *prometheus.CounterVec   // model
	cachedTokens    *prometheus.CounterVec   // model
	genTokens       *prometheus.CounterVec   // model
	prefills        *prometheus.CounterVec   // model, source
	remoteAttempts  *prometheus.CounterVec   // model
	remoteSuccesses *prometheus.CounterVec   // model
	remoteFallbacks *prometheus.CounterVec   // model, reason
	kvBytes         *prometheus.CounterVec   // model
	kvSeconds       *prometheus.HistogramVec // model
	kvThroughput    *prometheus.HistogramVec // model
	decisions       *prometheus.CounterVec   // outcome
	decisionSeconds prometheus.Observer
	admissions      *prometheus.CounterVec // outcome
	admissionWait   prometheus.Observer
	hops            *prometheus.CounterVec // direction, outcome
	hopSeconds      prometheus.Observer

	// The outcome children, resolved in New (read only after): the hot path does not hash label values.
	estimateError *prometheus.HistogramVec
	decisionsBy   map[string]prometheus.Counter
	admissionsBy  map[string]prometheus.Counter
	hopsBy        map[[2]string]prometheus.Counter

	// Children resolved once per label set: the request path looks each up in a sync.Map, not through the
	// vectors' hashing of label values.
	models   sync.Map // model name -> label value (admitted models only)
	nModels  atomic.Int32
	modelsMu sync.Mutex
	bySeries sync.Map // seriesKey -> *series
}

// Sources are what the state series are read from when scraped; any may be nil.
type Sources struct {
	// Node and Version label duet_build_info.
	Node, Version string
	// KnownModel says whether the cluster serves a model, for the model label.
	KnownModel func(model string) bool
	// EngineStats calls the engine's Stats; it is polled at most once per StatsEvery (default 1s), each call
	// bounded by a deadline of 2s.
	EngineStats func(context.Context) (engine.Stats, error)
	StatsEvery  time.Duration
	// Instances are this node's loaded instances and the generations the gateway runs on each now.
	Instances func() []Instance
	// Admission is the gateway's admission state.
	Admission func() AdmissionState
	// Cluster counts the cluster's members and instances by status.
	Cluster func() (members, instances map[string]int)
	// Plugins are the supervised plugins.
	Plugins func() []Plugin
}

// Instance is one of this node's instances.
type Instance struct {
	ID, Model string
	InFlight  int64
}

// AdmissionState is the admission limiter's occupancy and bounds.
type AdmissionState struct {
	InFlight, Queued, MaxInFlight, MaxQueue int
}

// Plugin is a supervised plugin's state.
type Plugin struct {
	Name     string // e.g. "engine mlx-engine"
	Running  bool
	Restarts int
}

// New registers every series, with Go's runtime and the process's own.
func New(src Sources) *Metrics {
	if src.StatsEvery <= 0 {
		src.StatsEvery = time.Second
	}
	m := &Metrics{reg: prometheus.NewRegistry(), src: src}
	m.stats = &statsCache{every: src.StatsEvery, fetch: src.EngineStats}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(v)
		return v
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(v)
		return v
	}
	m.requests = counter("duet_requests_total",
		"Generation requests, by client API, model and final HTTP status (a stream that failed or was cut off counts with the status it ended with: 499 when the client left); counted by the gateway the client called.",
		"api", "model", "status")
	m.requestSeconds = histogram("duet_request_duration_seconds",
		"End-to-end time of requests answered 200, to the last byte, as the gateway the client called saw it.",
		requestBuckets, "api", "model")
	m.ttft = histogram("duet_time_to_first_token_seconds",
		"From a request's arrival at the gateway whose engine ran it to the first token from the engine.",
		ttftBuckets, "api", "model")
	m.itl = histogram("duet_inter_token_latency_seconds",
		"Time between consecutive tokens of a generation (its first choice), as they arrived from the engine.",
		itlBuckets, "model")
	m.promptTokens = counter("duet_prompt_tokens_total", "Prompt tokens of the generations this node's engine ran.", "model")
	m.cachedTokens = counter("duet_cached_prompt_tokens_total", "Prompt tokens served from a prefix cache instead of being computed.", "model")
	m.genTokens = counter("duet_generation_tokens_total", "Tokens generated (every choice).", "model")
	m.prefills = counter("duet_prefills_total",
		"Generations by where their prompt was prefilled: local, remote (KV fetched over the KV wire) or cache.", "model", "source")
	m.remoteAttempts = counter("duet_remote_prefill_attempts_total",
		"Prefill endpoints tried over the KV wire (a request that tried two endpoints counts two).", "model")
	m.remoteSuccesses = counter("duet_remote_prefill_successes_total", "Generations prefilled remotely.", "model")
	m.remoteFallbacks = counter("duet_remote_prefill_fallbacks_total",
		"Generations whose remote prefill failed on every endpoint, so the engine prefilled locally, by reason: "+reasonsHelp+".",
		"model", "reason")
	m.kvBytes = counter("duet_kv_received_bytes_total", "KV cache bytes received over the KV wire by this node's engine.", "model")
	m.kvSeconds = histogram("duet_kv_transfer_duration_seconds",
		"From a KV request to its last byte, per remote prefill that moved bytes.", transferBuckets, "model")
	m.kvThroughput = histogram("duet_kv_transfer_throughput_bytes_per_second",
		"KV bytes over transfer time, per remote prefill that moved bytes.", throughputBuckets, "model")
	m.decisions = counter("duet_router_decisions_total", "Routing decisions by outcome: routed, no_candidate, error.", "outcome")
	m.decisionSeconds = histogram("duet_router_decision_duration_seconds",
		"Time the router plugin took to decide (the Route call).", decisionBuckets).WithLabelValues()
	m.admissions = counter("duet_admission_total",
		"Generations through admission control, by outcome: admitted, rejected (429), cancelled.", "outcome")
	m.admissionWait = histogram("duet_admission_wait_duration_seconds",
		"Time admitted generations waited for a slot.", admissionBuckets).WithLabelValues()
	m.hops = counter("duet_forward_hops_total",
		"Requests forwarded between gateways: sent (answered, unreachable, unavailable, broken, cancelled) and received (ok, error, refused).",
		"direction", "outcome")
	m.hopSeconds = histogram("duet_forward_duration_seconds",
		"Sent hops: from sending to the owner's answer starting (its headers; for a whole answer, the generation).",
		ttftBuckets).WithLabelValues()

	m.estimateError = histogram("duet_pd_estimate_error_ratio",
		"How far the router's estimate of a request it placed by estimated time (router-disagg's PD auto) was from its timings: (actual − estimate) / estimate, by placement (local or remote prefill) and phase (total or first_token); observed by the gateway that decided and ran it.",
		estimateBuckets, "placement", "phase")
	for _, p := range []string{"local", "remote"} {
		for _, ph := range []string{"total", "first_token"} {
			m.estimateError.WithLabelValues(p, ph)
		}
	}

	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "duet_build_info", Help: "Always 1: this gateway's version and node id."}, []string{"version", "node"})
	build.WithLabelValues(src.Version, src.Node).Set(1)
	m.reg.MustRegister(build, &stateCollector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every outcome from the start, so that rates exist before the first event.
	m.decisionsBy, m.admissionsBy, m.hopsBy = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}, map[[2]string]prometheus.Counter{}
	for _, o := range []string{Admitted, Rejected, Cancelled} {
		m.admissionsBy[o] = m.admissions.WithLabelValues(o)
	}
	for _, o := range []string{Routed, NoCandidate, RouteError} {
		m.decisionsBy[o] = m.decisions.WithLabelValues(o)
	}
	for _, o := range []string{HopAnswered, HopUnreachable, HopUnavailable, HopBroken, HopCancelled} {
		m.hopsBy[[2]string{"sent", o}] = m.hops.WithLabelValues("sent", o)
	}
	for _, o := range []string{HopOK, HopError, HopRefused} {
		m.hopsBy[[2]string{"received", o}] = m.hops.WithLabelValues("received", o)
	}
	return m
}

// Handler serves the series in Prometheus' text format (or OpenMetrics, when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// Registry is where the series are registered, for tests that gather them.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Model is the model label of a request for name: name itself when the cluster serves it (the first MaxModels
// such names), ModelOther past them, ModelUnknown when nobody serves it.
func (m *Metrics) Model(name string) string {
	if m == nil {
		return ""
	}
	if v, ok := m.models.Load(name); ok {
		return v.(string)
	}
	if name == "" || m.src.KnownModel == nil || !m.src.KnownModel(name) {
		return ModelUnknown
	}
	m.modelsMu.Lock()
	defer m.modelsMu.Unlock()
	if v, ok := m.models.Load(name); ok {
		return v.(string)
	}
	if m.nModels.Load() >= MaxModels {
		return ModelOther
	}
	name = string([]byte(name)) // the caller's string may point into a reused buffer
	m.models.Store(name, name)
	m.nModels.Add(1)
	return name
}

// series are the children of one (api, model) pair, resolved once.
type series struct {
	ttft, itl, kvSeconds, kvThroughput                      prometheus.Observer
	requestSeconds                                          prometheus.Observer
	prompt, cached, generated, attempts, successes, kvBytes prometheus.Counter
	prefillLocal, prefillRemote, prefillCache               prometheus.Counter
	fallbacks                                               map[string]prometheus.Counter // by reason
	api, model                                              string
	statusMu                                                sync.Mutex
	status                                                  map[int]prometheus.Counter
}

type seriesKey struct{ api, model string }

// seriesOf returns the children of (api, model); model is a label value from Model.
func (m *Metrics) seriesOf(api, model string) *series {
	k := seriesKey{api, model}
	if s, ok := m.bySeries.Load(k); ok {
		return s.(*series)
	}
	s := &series{
		api: api, model: model, status: map[int]prometheus.Counter{},
		ttft: m.ttft.WithLabelValues(api, model), itl: m.itl.WithLabelValues(model),
		requestSeconds: m.requestSeconds.WithLabelValues(api, model),
		kvSeconds:      m.kvSeconds.WithLabelValues(model), kvThroughput: m.kvThroughput.WithLabelValues(model),
		prompt: m.promptTokens.WithLabelValues(model), cached: m.cachedTokens.WithLabelValues(model),
		generated: m.genTokens.WithLabelValues(model), attempts: m.remoteAttempts.WithLabelValues(model),
		successes: m.remoteSuccesses.WithLabelValues(model), kvBytes: m.kvBytes.WithLabelValues(model),
		prefillLocal:  m.prefills.WithLabelValues(model, engine.PrefillLocal),
		prefillRemote: m.prefills.WithLabelValues(model, engine.PrefillRemote),
		prefillCache:  m.prefills.WithLabelValues(model, engine.PrefillCache),
		fallbacks:     map[string]prometheus.Counter{},
	}
	for _, r := range FallbackReasons {
		s.fallbacks[r] = m.remoteFallbacks.WithLabelValues(model, r)
	}
	got, _ := m.bySeries.LoadOrStore(k, s)
	return got.(*series)
}

func (s *series) requestsWith(m *Metrics, status int) prometheus.Counter {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	c, ok := s.status[status]
	if !ok {
		c = m.requests.WithLabelValues(s.api, s.model, strconv.Itoa(status))
		s.status[status] = c
	}
	return c
}

// Request counts a request that ended at the gateway the client called, with the status it ended with, and
// the time it took when it was answered 200. model is a label value from Model.
func (m *Metrics) Request(api, model string, status int, d time.Duration) {
	if m == nil {
		return
	}
	s := m.seriesOf(api, model)
	s.requestsWith(m, status).Inc()
	if status == http.StatusOK {
		s.requestSeconds.Observe(d.Seconds())
	}
}

// Generation observes one generation this node's engine runs: its tokens as they arrive, then its finals.
// Start it with StartGeneration; its methods are called from one goroutine at a time.
type Generation struct {
	s       *series
	arrived time.Time
	last    time.Time
}

// StartGeneration starts observing a generation of a request that arrived at this gateway at arrived. model
// is a label value from Model. It returns nil on a nil *Metrics (Generation's methods accept a nil receiver).
func (m *Metrics) StartGeneration(api, model string, arrived time.Time) *Generation {
	if m == nil {
		return nil
	}
	return &Generation{s: m.seriesOf(api, model), arrived: arrived}
}

// Token notes a token of choice 0 that arrived at now: the first gives the time to first token, the others
// the inter-token latency.
func (g *Generation) Token(now time.Time) {
	if g == nil {
		return
	}
	if g.last.IsZero() {
		g.s.ttft.Observe(now.Sub(g.arrived).Seconds())
	} else {
		g.s.itl.Observe(now.Sub(g.last).Seconds())
	}
	g.last = now
}

// Final counts a choice's end: its generated tokens, and for choice 0 the prompt's tokens and its prefill.
func (g *Generation) Final(choice int, f *engine.Final) {
	if g == nil || f == nil {
		return
	}
	s := g.s
	s.generated.Add(float64(f.Usage.CompletionTokens))
	if choice != 0 {
		return
	}
	s.prompt.Add(float64(f.Usage.PromptTokens))
	s.cached.Add(float64(f.Usage.CachedTokens))
	t := f.Timings
	switch t.PrefillSource {
	case engine.PrefillLocal:
		s.prefillLocal.Inc()
	case engine.PrefillRemote:
		s.prefillRemote.Inc()
		s.successes.Inc()
	case engine.PrefillCache:
		s.prefillCache.Inc()
	}
	r := t.Remote
	if r == nil {
		return
	}
	s.attempts.Add(float64(r.Attempts))
	if r.Bytes > 0 {
		s.kvBytes.Add(float64(r.Bytes))
		if r.Transfer > 0 {
			s.kvSeconds.Observe(r.Transfer.Seconds())
			s.kvThroughput.Observe(float64(r.Bytes) / r.Transfer.Seconds())
		}
	}
	if r.FallbackReason != "" {
		s.fallbacks[FallbackClass(r.FallbackReason)].Inc()
	}
}

// estimateBuckets bound relative errors: 0.1 is 10% slower than estimated, −0.5 twice as fast.
var estimateBuckets = []float64{-0.75, -0.5, -0.25, -0.1, -0.05, 0, 0.05, 0.1, 0.25, 0.5, 1, 2, 4}

// EstimateError observes the relative error of one estimate: placement "local" or "remote", phase "total"
// or "first_token" (other values are dropped: the labels stay a fixed set).
func (m *Metrics) EstimateError(placement, phase string, relErr float64) {
	if m == nil || placement != "local" && placement != "remote" || phase != "total" && phase != "first_token" {
		return
	}
	m.estimateError.WithLabelValues(placement, phase).Observe(relErr)
}

// RouterDecision observes one Route call.
func (m *Metrics) RouterDecision(d time.Duration, outcome string) {
	if m == nil {
		return
	}
	m.decisionSeconds.Observe(d.Seconds())
	if c := m.decisionsBy[outcome]; c != nil {
		c.Inc()
	}
}

// Admission observes admission control: the wait of an admitted generation, or the outcome of one that was not.
func (m *Metrics) Admission(wait time.Duration, outcome string) {
	if m == nil {
		return
	}
	if outcome == Admitted {
		m.admissionWait.Observe(wait.Seconds())
	}
	if c := m.admissionsBy[outcome]; c != nil {
		c.Inc()
	}
}

// HopSent counts a hop this gateway sent, by outcome; for an answered one, d is the time until the owner's
// answer began.
func (m *Metrics) HopSent(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	if c := m.hopsBy[[2]string{"sent", outcome}]; c != nil {
		c.Inc()
	}
	if outcome == HopAnswered && d > 0 {
		m.hopSeconds.Observe(d.Seconds())
	}
}

// HopReceived counts a hop another gateway sent here, by outcome.
func (m *Metrics) HopReceived(outcome string) {
	if m == nil {
		return
	}
	if c := m.hopsBy[[2]string{"received", outcome}]; c != nil {
		c.Inc()
	}
}
