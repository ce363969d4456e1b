package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// generation is one parsed request on its way to an engine.
type generation struct {
	model    string
	stream   bool
	dialect  dialect // how the answer is rendered
	idPrefix string  // of the response id, before the request id
	request  engine.GenerateRequest

	// What the router is told: the prompt's size, exact or estimated, and its prefix hashes.
	promptBytes  int
	promptTokens int
	prefixHashes []uint64
	// cacheKey is the client's name for a conversation whose turns share a prefix (the Responses API's
	// prompt_cache_key): routing keeps its turns together (see keyedHashes).
	cacheKey string
	// routeTime is what tokenizing for the router and routing took.
	routeTime time.Duration
	// fitMaxTokens lets a max_tokens that the instance's context cannot hold mean "as many as fit": Anthropic's
	// API requires max_tokens, and agents send the most their vendor's model can write (Claude Code 32000 to
	// 128000), more than the context of most models duet serves.
	fitMaxTokens bool
}

// fitMaxTokens lowers max_tokens to "as many as the context allows" (0) when the instance could never write
// that many after this prompt: its context, less the least number of tokens the prompt can be, is no more than
// max_tokens. The answer is then bounded by the context, as it would have been, rather than refused.
func fitMaxTokens(d engine.Description, g *generation) {
	ctx, mb := d.ContextLength, d.MaxBytesPerToken
	if ctx <= 0 || g.request.Sampling.MaxTokens == 0 {
		return
	}
	least := 0
	if mb > 0 {
		least = (g.promptBytes + mb - 1) / mb
	}
	if g.request.Sampling.MaxTokens >= ctx-least {
		g.request.Sampling.MaxTokens = 0
	}
}

// supports refuses a request for what the instance's engine cannot do: a 400 that names the param, rather
// than an answer that quietly ignores it.
func supports(d engine.Description, r *engine.GenerateRequest) error {
	c := d.Capabilities
	forced := r.ToolChoice.Mode == engine.ToolChoiceRequired || r.ToolChoice.Mode == engine.ToolChoiceFunction
	switch {
	case len(r.Tools) > 0 && r.ToolChoice.Mode != engine.ToolChoiceNone && !c.Tools:
		return openai.BadRequest("tools", "model %s (engine %s) cannot call tools", d.ModelID, d.Backend)
	case forced && !c.Grammar:
		return openai.BadRequest("tool_choice", "model %s (engine %s) cannot guarantee a tool call (it has no constrained decoding); use tool_choice auto", d.ModelID, d.Backend)
	case r.ResponseFormat.Type != "" && r.ResponseFormat.Type != engine.FormatText && !c.Grammar:
		return openai.BadRequest("response_format", "model %s (engine %s) cannot constrain its output to JSON", d.ModelID, d.Backend)
	case r.N > max(1, c.MaxChoices):
		return openai.BadRequest("n", "model %s (engine %s) returns at most %d choices per request", d.ModelID, d.Backend, max(1, c.MaxChoices))
	case len(r.Sampling.LogitBias) > 0 && !c.LogitBias:
		return openai.BadRequest("logit_bias", "model %s (engine %s) does not support logit_bias", d.ModelID, d.Backend)
	}
	for id := range r.Sampling.LogitBias {
		if d.VocabSize > 0 && int(id) >= d.VocabSize {
			return openai.BadRequest("logit_bias", "token %d is not in the vocabulary of %d tokens", id, d.VocabSize)
		}
	}
	return nil
}

// staticPrefill offers the configured prefill endpoints (--prefill), when the router offered none: a fixed
// prefill node outside the cluster, an exo one say.
func (s *Server) staticPrefill(g *generation) {
	if len(g.request.PrefillEndpoints) > 0 {
		return
	}
	for _, addr := range s.cfg.PrefillEndpoints {
		g.request.PrefillEndpoints = append(g.request.PrefillEndpoints, engine.PrefillEndpoint{Address: addr})
	}
}

// serve runs a generation where the router says: on this node's engine, or forwarded to the gateway of the
// node that serves the instance (one hop, streamed through). A hop from another gateway carries the decision;
// it is not routed again.
func (s *Server) serve(c *fiber.Ctx, g *generation) error {
	requestID := requestIDOf(c)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	watch := watchDisconnect(c.Context().Conn(), cancel)
	// Until the response is committed, the handler owns the watch; a stream hands it over to its writer.
	handedOver := false
	defer func() {
		if !handedOver {
			watch.stop()
			if watch.pipelined {
				c.Context().SetConnectionClose()
			}
			cancel()
		}
	}()

	g.model = s.aliases.Resolve(g.model)
	var d *decision
	route := &openai.Route{EntryNode: s.reg.Node()}
	rec := s.recent.open(c, g, route, s.metrics, s.tracer)
	if hop, ok := c.Locals(hopRouteKey).(forward.Route); ok {
		var err error
		if d, err = s.fromPinned(hop, requestID, s.view.Current()); err != nil {
			return err
		}
		route.EntryNode, route.Forwarded = hop.EntryNode, true
	} else {
		if err := s.promptInfo(ctx, g); err != nil {
			return err
		}
		g.prefixHashes = keyedHashes(g.cacheKey, g.prefixHashes)
		var exclude []string
		for attempt := 1; ; attempt++ {
			var err error
			if d, err = s.decide(ctx, g, requestID, exclude); err != nil {
				return err
			}
			if d.local != nil {
				break
			}
			done, err := s.proxy(c, ctx, watch, g, d, attempt, &handedOver)
			if done || err != nil || attempt > 1 {
				if !done && err == nil {
					err = openai.Unavailable(fmt.Sprintf("node %s could not take the request, nor could the next candidate; retry shortly (request id %s)", d.DecodeNode, requestID))
				}
				return err
			}
			// The owner failed before answering: once more, on the router's next candidate.
			exclude = append(exclude, d.DecodeInstance)
		}
	}
	in := d.local
	rec.decided(d)
	s.expectEstimate(requestID, d)
	if err := supports(in.Desc, &g.request); err != nil {
		return err
	}
	if g.fitMaxTokens {
		fitMaxTokens(in.Desc, g)
	}
	route.DecodeNode, route.DecodeInstance, route.Reason = s.reg.Node(), in.Desc.InstanceID, cut(d.Reason, forward.MaxReason)
	if len(d.PrefillEndpoints) > 0 {
		pe := d.PrefillEndpoints[0]
		route.PrefillInstance, route.PrefillNode, route.PrefillAddress = pe.InstanceID, pe.Node, pe.Address
	}
	route.Time = g.routeTime
	g.request.PrefillEndpoints = engineEndpoints(d.PrefillEndpoints)
	s.staticPrefill(g)

	wait, err := s.admit(ctx)
	if err != nil {
		return err
	}
	route.Admission = wait
	g.request.RequestID = requestID
	g.request.InstanceID = in.Desc.InstanceID
	meta := openai.Meta{
		ID: g.idPrefix + requestID, Created: time.Now().Unix(), Model: g.model, Fingerprint: fingerprint(in.Desc),
		Route: route,
	}
	var obs *metrics.Generation
	if rec != nil && s.metrics != nil {
		obs = s.metrics.StartGeneration(rec.api, rec.model, arrival(c))
	}

	if !g.stream {
		// Generate on this goroutine: nothing is committed until the whole answer is there.
		res := openai.NewResults(g.request.N)
		err := s.generate(ctx, in, g.request, obs, func(ev engine.Event) error {
			releaseBody(c) // the engine has the request
			res.Add(ev)
			return nil
		})
		if err != nil {
			return s.runError(ctx, watch, err)
		}
		for _, r := range res {
			if r.Final != nil {
				if apiErr := openai.FinalError(r.Final); apiErr != nil {
					return s.runError(ctx, watch, apiErr)
				}
			}
		}
		if !res.Done() {
			return openai.Internal("the engine ended the generation without a final event for every choice")
		}
		rec.answered(res)
		timing := gatewayTiming(make([]byte, 0, 256), route)
		if res[0].Final != nil {
			timing = engineTiming(timing, res[0].Final.Timings)
		}
		setServerTiming(c, timing)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		sendAnswer(c, g.dialect, meta, res)
		return nil
	}

	r := s.start(ctx, cancel, in, g.request, obs)
	// Errors before the first event are HTTP errors with their own status.
	evs, closed, _ := r.take(nil, nil)
	firstEvent := time.Since(arrival(c))
	releaseBody(c) // the engine has the request
	if len(evs) == 0 {
		<-r.finished
		return s.runError(ctx, watch, r.err)
	}
	first := evs[0]
	if first.Final != nil {
		if apiErr := openai.FinalError(first.Final); apiErr != nil {
			drain(r)
			return s.runError(ctx, watch, apiErr)
		}
	}
	c.Set(fiber.HeaderContentType, g.dialect.streamType())
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	setServerTiming(c, appendServerTiming(gatewayTiming(make([]byte, 0, 96), route), "first_event", firstEvent))
	conn := c.Context().Conn()
	handedOver = true
	sw := &streamWriter{
		s: s, enc: rec.encoder(g.dialect.encoder(meta, g.request.N)), run: r, first: first, evs: evs, next: 1, closed: closed, ctx: ctx, conn: conn,
		done: func() { watch.stop(); cancel(); rec.streamEnded() }, heartbeat: heartbeatFor(c, s.cfg.Heartbeat),
	}
	c.Context().Response.SetBodyStream(sw, -1)
	return nil
}

// answerBufs are buffers to render whole answers in: the response copies the answer into its own pooled body
// buffer, so the rendering need not allocate.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

// sendAnswer renders a whole answer as the response's body.
func sendAnswer(c *fiber.Ctx, d dialect, m openai.Meta, rs openai.Results) {
	buf := answerBufs.Get().(*[]byte)
	*buf = d.answer((*buf)[:0], m, rs)
	c.Response().SetBody(*buf)
	if cap(*buf) <= 64<<10 { // a rare large answer is not kept
		answerBufs.Put(buf)
	}
}

// runError explains why a run failed: the client left, the request timed out, or the engine failed.
func (s *Server) runError(ctx context.Context, watch *disconnectWatcher, err error) error {
	select {
	case <-watch.gone:
		return &openai.Error{Status: 499, Type: openai.TypeInvalidRequest, Code: "client_closed_request", Message: "the client closed the connection"}
	default:
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return openai.FromEngine(err)
}

func fingerprint(d engine.Description) string {
	fp := d.Fingerprint
	if i := strings.LastIndexByte(fp, ':'); i >= 0 {
		fp = fp[i+1:] // drop a scheme prefix such as "fp1:"
	}
	if len(fp) > 12 {
		fp = fp[:12]
	}
	if fp == "" {
		return ""
	}
	return "fp_" + fp
}

// generate runs a generation on the engine, counting it against the instance's load and the admission slot
// the caller acquired, which it releases.
func (s *Server) generate(ctx context.Context, in *node.Instance, req engine.GenerateRequest, obs *metrics.Generation, emit func(engine.Event) error) error {
	s.reg.Begin(in)
	defer s.reg.End(in)
	defer s.limiter.release()
	emit, forget := s.observeSpeed(in, req, emit)
	defer forget()
	e, gen, err := s.engines.Get()
	if err != nil {
		s.log.Warn("engine unavailable", "request_id", req.RequestID, "error", err)
		return openai.Unavailable(fmt.Sprintf("the engine plugin is not running now (it is being restarted); retry shortly (request id %s)", req.RequestID))
	}
	err = e.Generate(ctx, req, observed(obs, emit))
	if ctx.Err() == nil && engine.CodeOf(err) == engine.CodeUnavailable {
		err = s.engineUnavailable(req.RequestID, gen, err)
	}
	return err
}

// engineUnavailable explains a call that failed as unavailable. The plugin may have died under it: the log
// gets its last stderr lines and the transport's message, the client a plain sentence and the request id
// (stderr and gRPC messages name temporary paths and carry unrelated records).
func (s *Server) engineUnavailable(requestID string, gen uint64, err error) error {
	var detail string
	var ee *engine.Error
	if errors.As(err, &ee) {
		detail = ee.Detail
	}
	if died, lastWords := s.engines.Explain(gen); died {
		s.log.Warn("the engine plugin died during a request", "request_id", requestID, "error", err, "detail", detail, "last_words", lastWords)
		return &engine.Error{Code: engine.CodeUnavailable, Message: fmt.Sprintf(
			"the engine plugin stopped during the request and is being restarted; retry shortly (request id %s)", requestID)}
	}
	if detail != "" {
		s.log.Warn("the engine plugin is unreachable", "request_id", requestID, "detail", detail)
		return &engine.Error{Code: engine.CodeUnavailable, Message: fmt.Sprintf(
			"the engine plugin is unreachable; retry shortly (request id %s)", requestID)}
	}
	return err // the engine's own answer (e.g. an instance shutting down), meant for the client
}

// start runs a generation on its own goroutine, for a stream: its events queue in the run (see run), so the
// engine rarely waits on the HTTP side; when it does, that is the backpressure of a slow client.
func (s *Server) start(ctx context.Context, cancel context.CancelFunc, in *node.Instance, req engine.GenerateRequest, obs *metrics.Generation) *run {
	r := newRun(cancel)
	go func() {
		r.close(s.generate(ctx, in, req, obs, func(ev engine.Event) error { return r.push(ctx, ev) }))
	}()
	return r
}
