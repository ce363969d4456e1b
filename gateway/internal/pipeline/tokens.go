package pipeline

import (
	"context"
	"fmt"
	"io"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/sdk/engine"
)

// CountTokens counts a prompt's tokens as the engine renders them for a generation (template, tools and
// thinking included), with a local instance of the model, or has the gateway of a node that has one count
// them (Anthropic's /v1/messages/count_tokens).
func (p *Pipeline) CountTokens(c *fiber.Ctx, tc apicore.TokenCount) error {
	asked := tc.Model
	model := p.aliases.Resolve(tc.Model)
	var in *node.Instance
	if hop, ok := locals.Hop(c); ok {
		// The entry gateway picked this node's instance; a hop is never forwarded again.
		got, found := p.reg.Get(hop.DecodeInstance)
		// The entry gateway resolved the name with its own aliases, which this node may not have.
		if !found || got.Spec.Model != model && got.Spec.Model != asked {
			return apicore.Unavailable(fmt.Sprintf("instance %q of model %q is not served by this node now; retry (request id %s)", hop.DecodeInstance, model, locals.RequestID(c)))
		}
		in = got
	} else {
		for _, cand := range p.reg.ByModel(model) {
			if cand.Desc.Capabilities.Chat {
				in = cand
				break
			}
		}
		if in == nil {
			return p.forwardCountTokens(c, model)
		}
	}
	if !in.Desc.Capabilities.Chat {
		return apicore.BadRequest(tc.Param, "model %s (engine %s) has no chat template to render %s with", in.Desc.ModelID, in.Desc.Backend, tc.Param)
	}
	if err := supports(in.Desc, &tc.Generate); err != nil {
		return err
	}
	e, gen, err := p.engines.Get()
	if err != nil {
		return apicore.Unavailable(fmt.Sprintf("the engine plugin is not running now (it is being restarted); retry shortly (request id %s)", locals.RequestID(c)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	tr := tc.Tokenize
	tr.InstanceID = in.Desc.InstanceID
	res, err := e.Tokenize(ctx, tr)
	if err != nil {
		if engine.CodeOf(err) == engine.CodeUnavailable {
			err = p.engineUnavailable(locals.RequestID(c), gen, err)
		}
		return apicore.FromEngine(err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(tc.Render(nil, len(res.Tokens)))
}

// maxTokenCountBody bounds the answer of another node's token count.
const maxTokenCountBody = 1 << 20

// forwardCountTokens asks the gateway of a node with a ready instance of the model to count, with that
// instance pinned, and passes its answer through.
func (p *Pipeline) forwardCountTokens(c *fiber.Ctx, model string) error {
	requestID := locals.RequestID(c)
	snap := p.Snapshot()
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
		return apicore.ModelNotFound(model)
	case target == nil:
		return apicore.Unavailable(fmt.Sprintf("no instance of model %q is ready to count tokens now; retry shortly (request id %s)", model, requestID))
	}
	node := string(target.Node)
	var hostPort string
	var tls, ok bool
	if p.cluster != nil {
		hostPort, tls, ok = p.cluster.APIEndpoint(node)
	}
	if !ok {
		return apicore.Unavailable(fmt.Sprintf("node %s, which serves model %q, advertises no API address (request id %s)", node, model, requestID))
	}
	header := locals.RequestHeader(c)
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
		return apicore.Unavailable(fmt.Sprintf("node %s did not answer; retry (request id %s)", node, requestID))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenCountBody))
	if err != nil {
		return apicore.Unavailable(fmt.Sprintf("node %s broke off its answer (request id %s)", node, requestID))
	}
	c.Set(fiber.HeaderContentType, resp.Header.Get(fiber.HeaderContentType))
	c.Set("X-Duet-Forwarded-To", node)
	return c.Status(resp.StatusCode).Send(body)
}
