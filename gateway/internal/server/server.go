package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/anthropic"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/ollama"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/gateway/internal/pipeline"
	"github.com/duet-ai/duet/gateway/internal/responses"
	"github.com/duet-ai/duet/gateway/internal/tracing"
)

// Config is the HTTP server's configuration.
type Config struct {
	Listen string
	// APIKeys, when any, are required as "Authorization: Bearer <key>" on the API.
	APIKeys []string
	// BodyLimit bounds a request body in bytes (413 beyond).
	BodyLimit int
	// MaxBodyBytesInFlight bounds the bytes of request bodies the gateway holds at once: a body larger than
	// a few kilobytes waits (up to QueueTimeout) until its size fits, and gives it back once the engine has the
	// request. One body up to BodyLimit is always admitted on its own.
	MaxBodyBytesInFlight int64
	// MaxHeaderBytes bounds a request's headers together, request line included (431 beyond). Real clients send
	// large cookies and JWTs; fasthttp's default of 4 KiB refuses some of them.
	MaxHeaderBytes int
	// ReadTimeout bounds reading a request; WriteTimeout bounds each write of a response (a stream extends it
	// at every flush, so it bounds a stalled client, not a long stream); IdleTimeout bounds keep-alive waits.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// RequestTimeout bounds a whole generation.
	RequestTimeout time.Duration
	// HopIdleTimeout bounds how long a request forwarded to another gateway waits for any sign of life from
	// it (headers, a keep-alive, body bytes): before the first byte the request fails over to the router's
	// next candidate, after it the client hears an error. Owners send keep-alives at a third of it, so a long
	// generation is never cut. 0: only RequestTimeout bounds a hop.
	HopIdleTimeout time.Duration
	// MaxInFlight generations run at once; MaxQueue more wait up to QueueTimeout; beyond that, 429.
	MaxInFlight, MaxQueue int
	QueueTimeout          time.Duration
	// Heartbeat is the interval of SSE comments on an idle stream.
	Heartbeat time.Duration
	// PrefillEndpoints are static KV wire endpoints offered to the engine for every request the router gives
	// none (the engine decides by prompt length whether to use them).
	PrefillEndpoints []string
	// AdminKeys, when any, are required for the writes of the cluster API (loading instances, instance links,
	// swapping the router); otherwise an API key suffices, and only from loopback unless AllowRemoteAdmin
	// (protected mode; see protect.go).
	AdminKeys []string
	// AllowRemoteAdmin takes the cluster API's writes from clients beyond loopback without an admin key.
	AllowRemoteAdmin bool
	// ListensBeyondLoopback says the API is reachable from other machines: Exposure then says what is open.
	ListensBeyondLoopback bool
	// TokenizeMinBytes: prompts of at least this many bytes are tokenized for the router (exact length, prefix
	// hashes for affinity); shorter ones are estimated from their bytes, at no cost.
	TokenizeMinBytes int
	// LinkProbeEvery is how often a link into this node's instances that no KV transfer measured yet is
	// probed (a timed download from the peer's gateway; see node/linkprobe.go); 0: never. The node probes;
	// it is here because the flag is the server's.
	LinkProbeEvery time.Duration
	// ModelsDir, when set, is the directory under which a load over the API (POST /v1/instances) may name a
	// local model directory; without it only Hugging Face ids, "embedded" and OperatorModels load over the
	// API.
	ModelsDir string
	// OperatorModels are the models the operator named at start (--model): a load over the API may name them.
	OperatorModels []string
	// ModelAliases map the model names clients ask for onto served models (--model-alias); this node's own,
	// changed at run time by PUT /admin/v1/model-aliases.
	ModelAliases map[string]string
	// HostedTools is what /v1/responses does with OpenAI's hosted tools (web_search, ...): drop them from what
	// the model sees and say so, or refuse the request.
	HostedTools responses.HostedTools
	Logger      *slog.Logger
}

// DefaultConfig returns the defaults the duet flags start from.
func DefaultConfig() Config {
	return Config{
		Listen:               "127.0.0.1:8000",
		BodyLimit:            16 << 20,
		MaxHeaderBytes:       16 << 10,
		MaxBodyBytesInFlight: 16 << 20,
		ReadTimeout:          60 * time.Second,
		WriteTimeout:         60 * time.Second,
		IdleTimeout:          120 * time.Second,
		RequestTimeout:       30 * time.Minute,
		HopIdleTimeout:       DefaultHopIdleTimeout,
		MaxInFlight:          256,
		MaxQueue:             1024,
		QueueTimeout:         30 * time.Second,
		Heartbeat:            10 * time.Second,
		LinkProbeEvery:       node.DefaultLinkProbeEvery,
		TokenizeMinBytes:     pipeline.DefaultTokenizeMinBytes,
		HostedTools:          responses.HostedToolsDrop,
	}
}

// DefaultHopIdleTimeout is the default Config.HopIdleTimeout: a frozen owner (a laptop asleep) is given up on
// in seconds, and a keep-alive every 5 s costs nothing.
const DefaultHopIdleTimeout = 15 * time.Second

// StatusFunc reports extra state for GET /admin/v1/status (plugin supervisors).
type StatusFunc func() any

// Server is the gateway's HTTP server: it builds the owners of the jobs beside the request path (the guard,
// the body reader, the cluster and admin APIs, the dashboard, the link probes), wires their routes, and holds
// what the request path runs on.
type Server struct {
	cfg       Config
	app       *fiber.App
	reg       *node.Registry
	agent     *cluster.Agent
	view      *cluster.LocalView
	engines   node.EngineProvider
	routers   node.RouterProvider
	fwd       *forward.Client
	limiter   *pipeline.Limiter
	log       *slog.Logger
	metrics   *metrics.Metrics // nil: none
	tracer    *tracing.Tracer  // nil: no OTLP export
	reasoning *responses.Sealer
	aliases   *alias.Table
	catalog   *modelCatalog

	// The owners of the jobs beside the request path, each with its own routes.
	guard      *guard
	bodies     *bodyReader
	clusterAPI *clusterAPI
	adminAPI   *adminAPI
	dashboard  *dashboard
	probes     *linkProbes
	pipe       *pipeline.Pipeline // the request path
}

// Node is what the server runs on besides its own parts: the gateway's node (node.Node), which owns the
// instances, the cluster membership, the engine and the router.
type Node interface {
	Registry() *node.Registry
	Agent() *cluster.Agent
	View() *cluster.LocalView
	Engines() node.EngineProvider
	Routers() node.RouterProvider
	Swapper() node.RouterSwapper
	Forward() *forward.Client
}

var _ Node = (*node.Node)(nil)

// Deps are what the server runs on.
type Deps struct {
	Node Node
	// HopKeys verify hops from other gateways (current first); nil: an unauthenticated cluster.
	HopKeys [][]byte
	Status  StatusFunc
	// Metrics, when set, counts what the server does and is served at GET /metrics (behind the API key, when
	// one is set; a --metrics-listen listener serves it without).
	Metrics *metrics.Metrics
	// Tracer, when set, exports each request's spans over OTLP.
	Tracer *tracing.Tracer
	// Reasoning seals the reasoning of /v1/responses into encrypted_content and opens it on a later turn; nil:
	// reasoning items carry none.
	Reasoning *responses.Sealer
}

// New builds the server. Call Listen or Serve to run it.
func New(cfg Config, d Deps) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := d.Node
	s := &Server{
		cfg: cfg, reg: n.Registry(), agent: n.Agent(), view: n.View(), engines: n.Engines(), routers: n.Routers(),
		fwd: n.Forward(), log: cfg.Logger, metrics: d.Metrics, tracer: d.Tracer, reasoning: d.Reasoning,
		limiter: pipeline.NewLimiter(cfg.MaxInFlight, cfg.MaxQueue, cfg.QueueTimeout),
		aliases: alias.New(cfg.ModelAliases),
		guard:   newGuard(cfg, d.HopKeys, d.Metrics),
		bodies:  newBodyReader(cfg),
		probes:  &linkProbes{},
	}
	s.catalog = &modelCatalog{agent: s.agent, reg: s.reg, aliases: s.aliases, started: time.Now()}
	s.clusterAPI = &clusterAPI{agent: s.agent, reg: s.reg, engines: s.engines, fwd: s.fwd, catalog: s.catalog,
		load: newLoadPolicy(cfg, s.log), requestTimeout: cfg.RequestTimeout, log: s.log}
	s.adminAPI = &adminAPI{agent: s.agent, reg: s.reg, engines: s.engines, swap: n.Swapper(), aliases: s.aliases,
		limiter: s.limiter, status: d.Status, exposure: s.guard.exposure, log: s.log}
	s.pipe = pipeline.New(pipeline.Config{
		RequestTimeout: cfg.RequestTimeout, WriteTimeout: cfg.WriteTimeout, Heartbeat: cfg.Heartbeat,
		PrefillEndpoints: cfg.PrefillEndpoints, TokenizeMinBytes: cfg.TokenizeMinBytes,
	}, pipeline.Deps{
		Registry: s.reg, Agent: s.agent, View: s.view, Engines: s.engines, Routers: s.routers, Forward: s.fwd,
		Limiter: s.limiter, Aliases: s.aliases, Metrics: s.metrics, Tracer: s.tracer, Log: s.log,
	})
	s.dashboard = &dashboard{agent: s.agent, reg: s.reg, engines: s.engines, fwd: s.fwd, recent: s.pipe.Recent()}
	s.app = fiber.New(fiber.Config{
		AppName:               "duet",
		BodyLimit:             cfg.BodyLimit,
		ReadBufferSize:        cfg.MaxHeaderBytes,
		StreamRequestBody:     true, // bodyReader reads bodies, within MaxBodyBytesInFlight
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleError,
		StrictRouting:         false,
	})
	s.routes()
	return s
}

// App exposes the fiber app, for tests that call app.Test.
func (s *Server) App() *fiber.App { return s.app }

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(ln) }

// Shutdown stops accepting connections and waits for requests in flight, up to ctx's deadline.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.app.ShutdownWithContext(ctx)
	if s.fwd != nil {
		s.fwd.CloseIdle()
	}
	return err
}

// Exposure says, in words, what this gateway leaves open to whoever reaches its API (the guard's answer):
// nothing when it listens on loopback only.
func (s *Server) Exposure() []string { return s.guard.exposure() }

// routes wires every owner's routes behind the middleware. Each group authenticates (guard) before it reads a
// body (bodyReader), and checks a hop's body against its proof after.
func (s *Server) routes() {
	g := s.guard
	finished := func(c *fiber.Ctx, status int, err error) {
		if !pipeline.Finish(c, status, err) && s.metrics != nil {
			countUnserved(s.metrics, c, status)
		}
	}
	s.app.Use(requestID, accessLog(s.log, finished), rejectAmbiguousFraming)
	s.app.Get("/healthz", s.healthz)
	// Peers pull this node's cluster tables here; in an encrypted cluster the answer is sealed with the gossip
	// key, so it needs no API key. Without a secret it is plain JSON (every node, instance and address): it
	// takes an API key when the gateway has keys, and peers pull it with theirs.
	s.app.Get(cluster.StatePath, g.stateAuth, adaptor.HTTPHandler(s.agent.StateHandler()))
	if s.metrics != nil {
		// Prometheus scrapes with a bearer token (scrape_config's authorization), so /metrics takes an API key
		// like every read; a --metrics-listen listener serves it without one, for a private network.
		s.app.Get("/metrics", g.auth, adaptor.HTTPHandler(s.metrics.Handler()))
	}
	v1 := s.app.Group("/v1", g.authOrHop, s.bodies.read, g.verifyHop, hopKeepalive)
	// The client APIs: each parses its requests and hands them to the pipeline, which renders in their dialect.
	openai.Routes(v1, s.pipe)
	s.clusterAPI.routes(v1, g)
	responses.Routes(v1, s.pipe, responses.Options{HostedTools: s.cfg.HostedTools, Sealer: s.reasoning})
	anthropic.Routes(v1, s.pipe)
	ollama.Routes(s.app.Group("/api", g.authOrHop, s.bodies.read, g.verifyHop, hopKeepalive), s.pipe, ollama.Options{
		Catalog: s.catalog.clusterModels, Cluster: s.pipe.Snapshot, Self: s.reg.Node(), Local: s.localInstances,
		Aliases: s.aliases.All,
	})
	admin := s.app.Group("/admin/v1", g.authOrHop, s.bodies.read, g.verifyHop, hopKeepalive)
	s.adminAPI.routes(s.app, v1, admin, g)
	s.probes.routes(admin)
	s.dashboard.routes(s.app, admin)
	s.app.Use(func(c *fiber.Ctx) error {
		return &apicore.Error{
			Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "unknown_url",
			Message: fmt.Sprintf("Unknown request URL: %s %s.", c.Method(), c.Path()),
		}
	})
}

// handleError renders every error in the envelope of the API its path belongs to (dialectForPath).
func (s *Server) handleError(c *fiber.Ctx, err error) error {
	apiErr := apicore.ErrorOf(err)
	if apiErr.Status >= 500 {
		s.log.Warn("request failed", "request_id", requestIDOf(c), "status", apiErr.Status, "error", apiErr.Message, "detail", err)
	}
	if apiErr.Status == fiber.StatusInternalServerError && apiErr.Code == "internal_error" && apiErr.Message == "" {
		apiErr.Message = fmt.Sprintf("internal error (request id %s)", requestIDOf(c))
	}
	status, body := dialectForPath(c.Path()).ErrorBody(nil, apiErr)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(body)
}

// dialectForPath picks the dialect of errors raised before a handler knows its request, e.g. by
// authentication: the API the path belongs to. OpenAI's Responses API shares chat's error envelope, and so do
// the paths of no client API.
func dialectForPath(path string) apicore.Dialect {
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		return anthropic.Dialect{}
	case strings.HasPrefix(path, "/api/"):
		return ollama.Dialect{}
	}
	return openai.ChatDialect{}
}

// Instances are this node's loaded instances and the generations the gateway runs on each, for the metrics.
func (s *Server) Instances() []metrics.Instance {
	all := s.reg.All()
	out := make([]metrics.Instance, 0, len(all))
	for _, in := range all {
		out = append(out, metrics.Instance{ID: in.Desc.InstanceID, Model: in.Desc.ModelID, InFlight: in.InFlight()})
	}
	return out
}

// Admission is the admission limiter's occupancy and bounds, for the metrics.
func (s *Server) Admission() metrics.AdmissionState {
	return metrics.AdmissionState{InFlight: s.limiter.InFlight(), Queued: s.limiter.Queued(),
		MaxInFlight: s.cfg.MaxInFlight, MaxQueue: s.cfg.MaxQueue}
}

// localInstances describes this node's instances, for Ollama's model endpoints.
func (s *Server) localInstances() []ollama.Instance {
	all := s.reg.All()
	out := make([]ollama.Instance, len(all))
	for i, in := range all {
		out[i] = ollama.Instance{Model: in.Spec.Model, Desc: in.Desc}
	}
	return out
}

func (s *Server) healthz(c *fiber.Ctx) error {
	e, _, err := s.engines.Get()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = e.Health(ctx)
		cancel()
	}
	if err != nil {
		// No key guards this endpoint: the detail (plugin stderr, socket paths) goes to the log only.
		s.log.Debug("health check failed", "error", err)
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "unavailable", "error": "the engine plugin is not ready"})
	}
	return c.JSON(fiber.Map{"status": "ok", "instances": len(s.reg.All())})
}
