package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/tracing"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// Pipeline runs generation requests. It holds what the stages need of the node and of the server, each
// behind the narrowest type that serves, so that a stage's tests build one from fakes.
type Pipeline struct {
	cfg     *Config
	reg     *node.Registry
	cluster clusterState // nil: no cluster (stage tests)
	view    snapshotter
	engines node.EngineProvider
	routers node.RouterProvider
	fwd     *forward.Client
	limiter *Limiter
	aliases *alias.Table
	log     *slog.Logger
	// heartbeat is a stream's keep-alive interval for a request (shorter on a hop that asks for it).
	heartbeat func(*fiber.Ctx) time.Duration
	// metrics counts routing, admission and hops (nil: none); what it counts of each request is an observer's.
	metrics *metrics.Metrics
	// recent is the ring the recent-requests observer records in, which the dashboard reads.
	recent *Recent
	// observers watch every request; registered once, in New. perToken are those of them told of every
	// token, not only the first (the metrics, for the inter-token latency): the others cost a token nothing.
	observers, perToken []observer
}

// Config is what the request path takes of the server's configuration.
type Config struct {
	// RequestTimeout bounds a whole generation (and a token count).
	RequestTimeout time.Duration
	// WriteTimeout bounds each write of a response; a stream extends it at every flush.
	WriteTimeout time.Duration
	// Heartbeat is the interval of SSE comments on an idle stream.
	Heartbeat time.Duration
	// PrefillEndpoints are static KV wire endpoints offered to the engine for every request the router gives
	// none.
	PrefillEndpoints []string
	// TokenizeMinBytes: prompts of at least this many bytes are tokenized for the router; shorter ones are
	// estimated from their bytes.
	TokenizeMinBytes int
}

// DefaultTokenizeMinBytes is the default Config.TokenizeMinBytes (and the server's): a shorter prompt has at
// most as many tokens as bytes, too few for remote prefill to pay, and its prefix gains little from
// affinity, so the router gets an estimate rather than a round trip to the engine's tokenizer (which costs as
// much as the rest of the gateway's work on a short request).
const DefaultTokenizeMinBytes = 1024

// Deps are what the request path runs on: the node's parts, and the server's that it shares.
type Deps struct {
	Registry *node.Registry
	// Agent is the cluster membership (nil: no cluster); View is the router's view of it with this node's load.
	Agent   *cluster.Agent
	View    *cluster.LocalView
	Engines node.EngineProvider
	Routers node.RouterProvider
	// Forward is the hop client to other gateways.
	Forward *forward.Client
	// Limiter is admission control, which the admin API's status reads too.
	Limiter *Limiter
	// Aliases resolve the model names clients ask for.
	Aliases *alias.Table
	// Metrics (nil: none) and Tracer (nil: no OTLP export) are observers of every request.
	Metrics *metrics.Metrics
	Tracer  *tracing.Tracer
	Log     *slog.Logger
}

// clusterState is what the request path reads of the cluster: its tables, the speed book, and where another
// node's gateway answers.
type clusterState interface {
	Snapshot() *cluster.Snapshot
	Speeds() *cluster.Speeds
	// APIEndpoint is the address this node reaches node's gateway at (ok false: it has none).
	APIEndpoint(node string) (hostPort string, tls bool, ok bool)
}

// agentState is the cluster agent as the request path reads it.
type agentState struct {
	*cluster.Agent
	self string
}

func (a agentState) APIEndpoint(node string) (string, bool, bool) {
	return cluster.APIEndpoint(a.Snapshot(), a.self, node)
}

// snapshotter gives the router's view of the cluster, with this node's local load.
type snapshotter interface {
	Current() *router.Snapshot
}

// New builds the request path with its observers: the recent ring, and the metrics, the trace and the speed
// book when d has them.
func New(cfg Config, d Deps) *Pipeline {
	p := &Pipeline{
		cfg: &cfg, reg: d.Registry, view: d.View, engines: d.Engines, routers: d.Routers, fwd: d.Forward,
		limiter: d.Limiter, aliases: d.Aliases, log: d.Log, metrics: d.Metrics, recent: &Recent{},
		heartbeat: func(c *fiber.Ctx) time.Duration { return locals.Heartbeat(c, cfg.Heartbeat) },
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if d.Agent != nil {
		p.cluster = agentState{Agent: d.Agent, self: d.Registry.Node()}
	}
	p.observe(&recentObserver{ring: p.recent}, false)
	if d.Metrics != nil {
		p.observe(metricsObserver{m: d.Metrics}, true)
	}
	if d.Tracer != nil {
		p.observe(traceObserver{t: d.Tracer}, false)
	}
	if p.cluster != nil {
		p.observe(speedObserver{cluster: p.cluster, node: d.Registry.Node()}, false)
	}
	return p
}

// Recent is the ring of the requests this gateway served lately, for the dashboard.
func (p *Pipeline) Recent() *Recent { return p.recent }

// request is one generation request on its way through the pipeline: what parse read, where place put it,
// how it ran, and what the client got. The stages fill it in order; observers read it.
type request struct {
	p *Pipeline
	// c is the request's fiber context while its handler owns it: nil once a stream's writer has the request.
	c  *fiber.Ctx
	id string // the request id
	// node is this gateway's; path is the request's path (cut), api its metrics label.
	node, path, api string
	arrived         time.Time
	// hop is the decision a forwarding gateway pinned (hopped: the request came as a hop).
	hop    forward.Route
	hopped bool

	// Parse: the request in the engine's terms, and how its answer is rendered.
	model    string
	stream   bool
	dialect  apicore.Dialect
	idPrefix string // of the response id, before the request id
	generate engine.GenerateRequest
	// What the router is told: the prompt's size, exact or estimated, and its prefix hashes.
	promptBytes  int
	promptTokens int
	prefixHashes []uint64
	// cacheKey is the client's name for a conversation whose turns share a prefix (the Responses API's
	// prompt_cache_key): routing keeps its turns together (see keyedHashes).
	cacheKey string
	// fitMaxTokens lets a max_tokens that the instance's context cannot hold mean "as many as fit": Anthropic's
	// API requires max_tokens, and agents send the most their vendor's model can write (Claude Code 32000 to
	// 128000), more than the context of most models duet serves.
	fitMaxTokens bool

	// Place: the router's decision as the gateway acts on it; local is the instance when it is this node's.
	decision router.Decision
	local    *node.Instance
	exclude  []string // instances that failed the request already
	// forwarded: the request went to the owner's gateway (this gateway is its entry).
	forwarded bool
	// routeTime is what tokenizing for the router and routing took.
	routeTime time.Duration
	// route is what the answer's timings.route says of where it ran.
	route apicore.Route

	// Run: the request's deadline and cancellation, and the watch on its client's connection. Until the
	// response is committed the handler owns them; a stream hands them over to its writer (handedOver).
	ctx        context.Context
	cancel     context.CancelFunc
	watch      disconnectWatcher
	handedOver bool

	answer answer
	// observed is what observers keep of the request between lifecycle calls.
	observed observed
	// streaming: the request is recorded when its stream ends, not when its handler returns.
	streaming bool
	finished  bool
}

// answer is what the client got, as the run, render and forward stages saw it.
type answer struct {
	status int
	err    string // the error's message, when status is 400 or more
	// firstByte, for a stream, is when its first token (or forwarded chunk) was rendered.
	firstByte time.Duration
	// results is a whole answer that ran here.
	results apicore.Results
	// A stream that ran here: its first final's timings, the usage of its finals, how many were rendered,
	// whether it completed, and the error that ended it.
	timings  *engine.Timings
	usage    engine.Usage
	finals   int
	complete bool
	failure  *apicore.Error
	// A forwarded answer: the owner's timings object and usage, read from its answer (owner), and the end
	// of its stream, where they are.
	owner ownerFigures
	tail  []byte
}

const requestKey = "duet.request"

// begin starts a request's run: its identity, deadline and disconnect watch. c's strings point into buffers
// fasthttp reuses for the next request; the request, which may outlive the handler, keeps copies.
func (p *Pipeline) begin(c *fiber.Ctx, r *request) {
	r.p, r.c = p, c
	r.id = strings.Clone(locals.RequestID(c))
	r.path = cut(c.Path(), maxRecentString)
	r.api = APIOf(r.path)
	r.arrived = arrival(c)
	r.model = strings.Clone(p.aliases.Resolve(r.model))
	r.node = p.reg.Node()
	r.route.EntryNode = r.node
	if hop, ok := locals.Hop(c); ok {
		r.hop, r.hopped = hop, true
	}
	r.ctx, r.cancel = context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	r.watch.start(c.Context().Conn(), r.cancel)
	c.Locals(requestKey, r)
}

// end releases what the handler owns of a request whose response it did not hand over to a stream.
func (r *request) end(c *fiber.Ctx) {
	if r.handedOver {
		return
	}
	r.watch.stop()
	if r.watch.pipelined {
		c.Context().SetConnectionClose()
	}
	r.cancel()
}

// serve takes a parsed request through the stages: place, then forward it to its owner or run it here.
func (p *Pipeline) serve(c *fiber.Ctx, r *request) error {
	p.begin(c, r)
	defer r.end(c)
	for attempt := 1; ; attempt++ {
		if err := p.place(r); err != nil {
			return err
		}
		p.decided(r)
		if r.local != nil {
			return p.run(c, r)
		}
		done, err := p.forward(c, r, attempt)
		if done || err != nil {
			return err
		}
		if attempt > 1 {
			return apicore.Unavailable(fmt.Sprintf("node %s could not take the request, nor could the next candidate; retry shortly (request id %s)", r.decision.DecodeNode, r.id))
		}
		// The owner failed before answering: once more, on the router's next candidate.
		r.exclude = append(r.exclude, r.decision.DecodeInstance)
	}
}

// Finish ends the request of c when its handler returns (the server's access log calls it for every
// request), unless a stream's writer ends it. It reports whether c served a generation (ended now or later).
func Finish(c *fiber.Ctx, status int, err error) bool {
	r, _ := c.Locals(requestKey).(*request)
	if r == nil {
		return false
	}
	if r.streaming {
		return true
	}
	r.answer.status = status
	if err != nil && status >= 400 {
		r.answer.err = apicore.ErrorOf(err).Message
	}
	r.p.finished(r)
	return true
}

// Snapshot is the cluster's tables (empty without a cluster).
func (p *Pipeline) Snapshot() *cluster.Snapshot {
	if p.cluster == nil {
		return &cluster.Snapshot{}
	}
	return p.cluster.Snapshot()
}
