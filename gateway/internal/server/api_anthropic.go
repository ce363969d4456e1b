package server

import (
	"context"
	"fmt"
	"io"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/anthropic"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// anthropicAPI is Anthropic's Messages API over the pipeline.
type anthropicAPI struct{ *pipeline }

// anthropicRoutes serves Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens).
func anthropicRoutes(v1 fiber.Router, pipe *pipeline) {
	p := anthropicAPI{pipe}
	v1.Post("/messages", p.messages)
	v1.Post("/messages/count_tokens", p.countTokens)
}

// anthropicErrors is the dialect of errors under /v1/messages.
func anthropicErrors() dialect { return anthropicMessages{} }

// messages is POST /v1/messages: a generation like chat's, rendered as Anthropic's message or stream.
func (p anthropicAPI) messages(c *fiber.Ctx) error {
	setRequestIDHeader(c)
	scan, err := p.refuseOverlong(c.Body(), "messages")
	if err != nil {
		return err
	}
	req, perr := anthropic.ParseMessages(c.Body())
	if perr != nil {
		return perr
	}
	return p.serve(c, &request{
		model:    req.Model,
		stream:   req.Stream,
		dialect:  anthropicMessages{},
		idPrefix: "msg_",
		generate: engine.GenerateRequest{Messages: req.Messages, Sampling: req.Sampling, Tools: req.Tools,
			ToolChoice: req.ToolChoice, ParallelToolCalls: req.ParallelToolCalls, ResponseFormat: req.ResponseFormat,
			TemplateVars: req.TemplateVars},
		promptBytes:  scan.PromptBytes,
		fitMaxTokens: true,
	})
}

// setRequestIDHeader gives the request id where Anthropic's SDKs read it (request-id), besides X-Request-Id.
func setRequestIDHeader(c *fiber.Ctx) { c.Set("Request-Id", requestIDOf(c)) }

// anthropicMessages is /v1/messages. Messages has one choice per request.
type anthropicMessages struct{}

var (
	_ dialect = anthropicMessages{}
	_ encoder = anthropicEncoder{}
)

func (anthropicMessages) answer(dst []byte, m openai.Meta, rs openai.Results) []byte {
	return anthropic.AppendMessage(dst, m, rs[0])
}

func (anthropicMessages) encoder(m openai.Meta, _ int) encoder {
	return anthropicEncoder{anthropic.NewStream(m)}
}

func (anthropicMessages) streamType() string { return "text/event-stream" }

func (anthropicMessages) errorBody(dst []byte, e *openai.Error) (int, []byte) {
	return e.Status, anthropic.AppendError(dst, e)
}

// anthropicEncoder adapts anthropic.Stream to the gateway's encoder. Its message_start waits for the first
// event, which may say how long the prompt is; an encoder made only to report a broken hop (stage_forward.go) thus
// sends the error event alone, after the owner's message_start.
type anthropicEncoder struct{ s *anthropic.Stream }

func (e anthropicEncoder) start(dst []byte) []byte                   { return dst }
func (e anthropicEncoder) event(dst []byte, ev engine.Event) []byte  { return e.s.Event(dst, ev) }
func (e anthropicEncoder) fail(dst []byte, err *openai.Error) []byte { return e.s.Fail(dst, err) }
func (e anthropicEncoder) heartbeat(dst []byte) []byte               { return anthropic.Ping(dst) }

func (e anthropicEncoder) final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true
}

// countTokens is POST /v1/messages/count_tokens: the prompt's tokens as the engine renders them for a
// generation (template, tools and thinking included), counted by a local instance of the model, or by the
// gateway of a node that has one.
func (p anthropicAPI) countTokens(c *fiber.Ctx) error {
	setRequestIDHeader(c)
	req, perr := anthropic.ParseCountTokens(c.Body())
	if perr != nil {
		return perr
	}
	asked := req.Model
	req.Model = p.aliases.Resolve(req.Model)
	var in *node.Instance
	if hop, ok := c.Locals(hopRouteKey).(forward.Route); ok {
		// The entry gateway picked this node's instance; a hop is never forwarded again.
		got, found := p.reg.Get(hop.DecodeInstance)
		// The entry gateway resolved the name with its own aliases, which this node may not have.
		if !found || got.Spec.Model != req.Model && got.Spec.Model != asked {
			return openai.Unavailable(fmt.Sprintf("instance %q of model %q is not served by this node now; retry (request id %s)", hop.DecodeInstance, req.Model, requestIDOf(c)))
		}
		in = got
	} else {
		for _, cand := range p.reg.ByModel(req.Model) {
			if cand.Desc.Capabilities.Chat {
				in = cand
				break
			}
		}
		if in == nil {
			return p.forwardCountTokens(c, req.Model)
		}
	}
	if !in.Desc.Capabilities.Chat {
		return openai.BadRequest("messages", "model %s (engine %s) has no chat template to render messages with", in.Desc.ModelID, in.Desc.Backend)
	}
	gr := engine.GenerateRequest{Messages: req.Messages, Tools: req.Tools, ToolChoice: req.ToolChoice, ResponseFormat: req.ResponseFormat}
	if err := supports(in.Desc, &gr); err != nil {
		return err
	}
	e, gen, err := p.engines.Get()
	if err != nil {
		return openai.Unavailable(fmt.Sprintf("the engine plugin is not running now (it is being restarted); retry shortly (request id %s)", requestIDOf(c)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	res, err := e.Tokenize(ctx, engine.TokenizeRequest{
		InstanceID: in.Desc.InstanceID, Messages: req.Messages, AddGenerationPrompt: true,
		Tools: req.Tools, TemplateVars: req.TemplateVars,
	})
	if err != nil {
		if engine.CodeOf(err) == engine.CodeUnavailable {
			err = p.engineUnavailable(requestIDOf(c), gen, err)
		}
		return openai.FromEngine(err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(anthropic.AppendTokenCount(nil, len(res.Tokens)))
}

// maxTokenCountBody bounds the answer of another node's count_tokens.
const maxTokenCountBody = 1 << 20

// forwardCountTokens asks the gateway of a node with a ready instance of the model to count, with that
// instance pinned, and passes its answer through.
func (p anthropicAPI) forwardCountTokens(c *fiber.Ctx, model string) error {
	requestID := requestIDOf(c)
	snap := p.snapshot()
	var target *cluster.Record
	known := false
	for i := range snap.Instances {
		in := &snap.Instances[i]
		if in.Model != model {
			continue
		}
		known = true
		if in.Status == cluster.InstanceReady && string(in.Node) != p.reg.Node() {
			target = in
			break
		}
	}
	switch {
	case !known:
		return openai.ModelNotFound(model)
	case target == nil:
		return openai.Unavailable(fmt.Sprintf("no instance of model %q is ready to count tokens now; retry shortly (request id %s)", model, requestID))
	}
	node := string(target.Node)
	hostPort, tls, ok := p.cluster.APIEndpoint(node)
	if !ok {
		return openai.Unavailable(fmt.Sprintf("node %s, which serves model %q, advertises no API address (request id %s)", node, model, requestID))
	}
	header := requestHeader(c)
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	// The body's buffer goes back to the pool when the handler returns: wait until the transport is done.
	sent := make(chan struct{})
	resp, err := p.fwd.Send(ctx, forward.Target{HostPort: hostPort, TLS: tls}, forward.Request{
		Method: fiber.MethodPost, Path: c.Path(), Body: c.Body(), RequestID: requestID,
		Route:  forward.Route{EntryNode: p.reg.Node(), DecodeNode: node, DecodeInstance: target.ID, Attempt: 1},
		Header: header, BodyDone: func() { close(sent) },
	})
	<-sent
	if err != nil {
		p.log.Warn("forward: count_tokens", "request_id", requestID, "node", node, "error", err)
		return openai.Unavailable(fmt.Sprintf("node %s did not answer; retry (request id %s)", node, requestID))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenCountBody))
	if err != nil {
		return openai.Unavailable(fmt.Sprintf("node %s broke off its answer (request id %s)", node, requestID))
	}
	c.Set(fiber.HeaderContentType, resp.Header.Get(fiber.HeaderContentType))
	c.Set("X-Duet-Forwarded-To", node)
	return c.Status(resp.StatusCode).Send(body)
}
