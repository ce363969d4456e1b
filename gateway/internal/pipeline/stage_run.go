package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/sdk/engine"
)

// The run stage: a request placed on this node's instance runs on the engine plugin, under admission
// control. A whole answer is generated on the handler's goroutine and rendered at once; a stream runs on a
// goroutine of its own (run.go) and is rendered as its events come (stage_render.go).

// run runs r on r.local.
func (p *Pipeline) run(c *fiber.Ctx, r *request) error {
	in := r.local
	if err := supports(in.Desc, &r.generate); err != nil {
		return err
	}
	if r.fitMaxTokens {
		fitMaxTokens(in.Desc, r)
	}
	route := &r.route
	route.DecodeNode, route.DecodeInstance, route.Reason = r.node, in.Desc.InstanceID, clip(r.decision.Reason, forward.MaxReason)
	if eps := r.decision.PrefillEndpoints; len(eps) > 0 {
		route.PrefillInstance, route.PrefillNode, route.PrefillAddress = eps[0].InstanceID, eps[0].Node, eps[0].Address
	}
	route.Time = r.routeTime
	r.generate.PrefillEndpoints = engineEndpoints(r.decision.PrefillEndpoints)
	p.staticPrefill(r)

	wait, err := p.admit(r.ctx)
	if err != nil {
		return err
	}
	route.Admission = wait
	r.generate.RequestID = r.id
	r.generate.InstanceID = in.Desc.InstanceID
	meta := apicore.Meta{
		ID: r.idPrefix + r.id, Created: time.Now().Unix(), Model: r.model, Fingerprint: fingerprint(in.Desc),
		Route: route,
	}
	if !r.stream {
		return p.runWhole(c, r, meta)
	}
	return p.runStream(c, r, meta)
}

// runWhole generates on this goroutine: nothing is committed until the whole answer is there.
func (p *Pipeline) runWhole(c *fiber.Ctx, r *request, meta apicore.Meta) error {
	res := apicore.NewResults(r.generate.N)
	released := false
	err := p.generate(r, func(ev engine.Event) error {
		if !released {
			locals.ReleaseBody(c) // the engine has the request
			released = true
		}
		res.Add(ev)
		return nil
	})
	if err != nil {
		return runError(r, err)
	}
	for _, rs := range res {
		if rs.Final != nil {
			if apiErr := apicore.FinalError(rs.Final); apiErr != nil {
				return runError(r, apiErr)
			}
		}
	}
	if !res.Done() {
		return apicore.Internal("the engine ended the generation without a final event for every choice")
	}
	r.answer.results = res
	var buf [256]byte // the header copies it
	timing := gatewayTiming(buf[:0], &r.route)
	if res[0].Final != nil {
		timing = engineTiming(timing, res[0].Final.Timings)
	}
	setServerTiming(c, timing)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	sendAnswer(c, r.dialect, meta, res)
	return nil
}

// runStream starts the generation on its own goroutine and, once its first event is there, hands the
// response to a stream writer. Errors before the first event are HTTP errors with their own status.
func (p *Pipeline) runStream(c *fiber.Ctx, r *request, meta apicore.Meta) error {
	q := p.start(r)
	evs, closed, _ := q.take(nil, nil)
	firstEvent := time.Since(r.arrived)
	locals.ReleaseBody(c) // the engine has the request
	if len(evs) == 0 {
		<-q.finished
		return runError(r, q.err)
	}
	first := evs[0]
	if first.Final != nil {
		if apiErr := apicore.FinalError(first.Final); apiErr != nil {
			drain(q)
			return runError(r, apiErr)
		}
	}
	c.Set(fiber.HeaderContentType, r.dialect.StreamType())
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	var buf [96]byte // the header copies it
	setServerTiming(c, appendServerTiming(gatewayTiming(buf[:0], &r.route), "first_event", firstEvent))
	w := &streamWriter{
		enc: r.dialect.Encoder(meta, r.generate.N), run: q, first: first, evs: evs, next: 1, closed: closed, ctx: r.ctx,
		conn: c.Context().Conn(), writeTimeout: p.cfg.WriteTimeout, heartbeat: p.heartbeat(c), req: r,
		done: func() { r.watch.stop(); r.cancel() },
	}
	r.handOver()
	c.Context().Response.SetBodyStream(w, -1)
	return nil
}

// handOver gives the request to a stream's writer: the handler no longer owns its watch and deadline, and the
// request is recorded when the stream ends.
func (r *request) handOver() {
	r.handedOver, r.streaming = true, true
	r.c = nil
}

// runError explains why a run failed: the client left, the request timed out, or the engine failed.
func runError(r *request, err error) error {
	select {
	case <-r.watch.gone:
		return &apicore.Error{Status: 499, Type: apicore.TypeInvalidRequest, Code: "client_closed_request", Message: "the client closed the connection"}
	default:
	}
	if errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	var apiErr *apicore.Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return apicore.FromEngine(err)
}

// generate runs r's generation on the engine, counting it against the instance's load and the admission slot
// the caller acquired, which it releases. Each event goes to the observers, then to emit.
func (p *Pipeline) generate(r *request, emit func(engine.Event) error) error {
	in := r.local
	p.reg.Begin(in)
	defer p.reg.End(in)
	defer p.limiter.release()
	e, gen, err := p.engines.Get()
	if err != nil {
		p.log.Warn("engine unavailable", "request_id", r.id, "error", err)
		return apicore.Unavailable(fmt.Sprintf("the engine plugin is not running now (it is being restarted); retry shortly (request id %s)", r.id))
	}
	err = e.Generate(r.ctx, r.generate, func(ev engine.Event) error {
		p.event(r, &ev)
		return emit(ev)
	})
	if err != nil && r.ctx.Err() == nil && engine.CodeOf(err) == engine.CodeUnavailable {
		err = p.engineUnavailable(r.id, gen, err)
	}
	return err
}

// start runs r's generation on its own goroutine, for a stream: its events queue in the run (see run), so the
// engine rarely waits on the HTTP side; when it does, that is the backpressure of a slow client.
func (p *Pipeline) start(r *request) *run {
	q := newRun(r.cancel)
	go func() {
		q.close(p.generate(r, func(ev engine.Event) error { return q.push(r.ctx, ev) }))
	}()
	return q
}

// engineUnavailable explains a call that failed as unavailable. The plugin may have died under it: the log
// gets its last stderr lines and the transport's message, the client a plain sentence and the request id
// (stderr and gRPC messages name temporary paths and carry unrelated records).
func (p *Pipeline) engineUnavailable(requestID string, gen uint64, err error) error {
	var detail string
	var ee *engine.Error
	if errors.As(err, &ee) {
		detail = ee.Detail
	}
	if died, lastWords := p.engines.Explain(gen); died {
		p.log.Warn("the engine plugin died during a request", "request_id", requestID, "error", err, "detail", detail, "last_words", lastWords)
		return &engine.Error{Code: engine.CodeUnavailable, Message: fmt.Sprintf(
			"the engine plugin stopped during the request and is being restarted; retry shortly (request id %s)", requestID)}
	}
	if detail != "" {
		p.log.Warn("the engine plugin is unreachable", "request_id", requestID, "detail", detail)
		return &engine.Error{Code: engine.CodeUnavailable, Message: fmt.Sprintf(
			"the engine plugin is unreachable; retry shortly (request id %s)", requestID)}
	}
	return err // the engine's own answer (e.g. an instance shutting down), meant for the client
}

// admit takes an admission slot, counting the outcome and the wait.
func (p *Pipeline) admit(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := p.limiter.acquire(ctx)
	wait := time.Since(start)
	if p.metrics != nil {
		outcome := metrics.Admitted
		var apiErr *apicore.Error
		switch {
		case err == nil:
		case errors.As(err, &apiErr) && apiErr.Status == fiber.StatusTooManyRequests:
			outcome = metrics.Rejected
		default:
			outcome = metrics.Cancelled
		}
		p.metrics.Admission(wait, outcome)
	}
	return wait, err
}

// fitMaxTokens lowers max_tokens to "as many as the context allows" (0) when the instance could never write
// that many after this prompt: its context, less the least number of tokens the prompt can be, is no more than
// max_tokens. The answer is then bounded by the context, as it would have been, rather than refused.
func fitMaxTokens(d engine.Description, r *request) {
	ctx, mb := d.ContextLength, d.MaxBytesPerToken
	if ctx <= 0 || r.generate.Sampling.MaxTokens == 0 {
		return
	}
	least := 0
	if mb > 0 {
		least = (r.promptBytes + mb - 1) / mb
	}
	if r.generate.Sampling.MaxTokens >= ctx-least {
		r.generate.Sampling.MaxTokens = 0
	}
}

// supports refuses a request for what the instance's engine cannot do: a 400 that names the param, rather
// than an answer that quietly ignores it.
func supports(d engine.Description, r *engine.GenerateRequest) error {
	c := d.Capabilities
	forced := r.ToolChoice.Mode == engine.ToolChoiceRequired || r.ToolChoice.Mode == engine.ToolChoiceFunction
	switch {
	case len(r.Tools) > 0 && r.ToolChoice.Mode != engine.ToolChoiceNone && !c.Tools:
		return apicore.BadRequest("tools", "model %s (engine %s) cannot call tools", d.ModelID, d.Backend)
	case forced && !c.Grammar:
		return apicore.BadRequest("tool_choice", "model %s (engine %s) cannot guarantee a tool call (it has no constrained decoding); use tool_choice auto", d.ModelID, d.Backend)
	case r.ResponseFormat.Type != "" && r.ResponseFormat.Type != engine.FormatText && !c.Grammar:
		return apicore.BadRequest("response_format", "model %s (engine %s) cannot constrain its output to JSON", d.ModelID, d.Backend)
	case r.N > max(1, c.MaxChoices):
		return apicore.BadRequest("n", "model %s (engine %s) returns at most %d choices per request", d.ModelID, d.Backend, max(1, c.MaxChoices))
	case len(r.Sampling.LogitBias) > 0 && !c.LogitBias:
		return apicore.BadRequest("logit_bias", "model %s (engine %s) does not support logit_bias", d.ModelID, d.Backend)
	}
	for id := range r.Sampling.LogitBias {
		if d.VocabSize > 0 && int(id) >= d.VocabSize {
			return apicore.BadRequest("logit_bias", "token %d is not in the vocabulary of %d tokens", id, d.VocabSize)
		}
	}
	return nil
}

// staticPrefill offers the configured prefill endpoints (--prefill), when the router offered none: a fixed
// prefill node outside the cluster, an exo one say.
func (p *Pipeline) staticPrefill(r *request) {
	if len(r.generate.PrefillEndpoints) > 0 {
		return
	}
	for _, addr := range p.cfg.PrefillEndpoints {
		r.generate.PrefillEndpoints = append(r.generate.PrefillEndpoints, engine.PrefillEndpoint{Address: addr})
	}
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
