package server

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/gateway/internal/responses"
	"github.com/duet-ai/duet/sdk/engine"
)

// responsesAPI is OpenAI's Responses API over the pipeline.
type responsesAPI struct{ *pipeline }

// responsesRoutes serves OpenAI's Responses API (POST /v1/responses). duet stores no responses, so the
// routes that read or change a stored one answer 404 saying so.
func responsesRoutes(v1 fiber.Router, pipe *pipeline) {
	p := responsesAPI{pipe}
	v1.Post("/responses", p.createResponse)
	v1.Get("/responses/:id", notStored)
	v1.Delete("/responses/:id", notStored)
	v1.Get("/responses/:id/input_items", notStored)
	v1.Post("/responses/:id/cancel", notStored)
}

// ignoredToolsHeader names the hosted tools of a request that the model did not see.
const ignoredToolsHeader = "Duet-Ignored-Tools"

func notStored(c *fiber.Ctx) error { return responses.NotStored(c.Params("id")) }

func (p responsesAPI) createResponse(c *fiber.Ctx) error {
	req, perr := responses.Parse(c.Body(), responses.Options{HostedTools: p.cfg.HostedTools, Sealer: p.reasoning})
	if perr != nil {
		return perr
	}
	if len(req.IgnoredTools) > 0 {
		// Also in the response object (ignored_tools); a header tells a client that reads neither body nor
		// stream closely, and the logs of proxies.
		c.Set(ignoredToolsHeader, strings.Join(req.IgnoredTools, ", "))
	}
	err := p.serve(c, &request{
		model:       req.Model,
		stream:      req.Stream,
		dialect:     openaiResponses{echo: req.Echo},
		idPrefix:    "resp_",
		generate:    req.Generate,
		promptBytes: req.PromptBytes,
		cacheKey:    req.CacheKey,
	})
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return responses.Rename(apiErr)
	}
	return err
}

// openaiResponses is /v1/responses. Its errors are OpenAI's envelope, as chat's are.
type openaiResponses struct{ echo *responses.Echo }

func (d openaiResponses) answer(dst []byte, m openai.Meta, rs openai.Results) []byte {
	return responses.AppendResponse(dst, m, d.echo, rs[0])
}

func (openaiResponses) streamType() string { return "text/event-stream" }

func (openaiResponses) errorBody(dst []byte, e *openai.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d openaiResponses) encoder(m openai.Meta, _ int) encoder {
	return responsesEncoder{responses.NewStream(m, d.echo)}
}

// responsesEncoder adapts a responses.Stream, which renders the events, to the server's stream mechanics.
type responsesEncoder struct{ s *responses.Stream }

func (e responsesEncoder) start(dst []byte) []byte     { return e.s.Start(dst) }
func (e responsesEncoder) heartbeat(dst []byte) []byte { return append(dst, ": keep-alive\n\n"...) }

func (e responsesEncoder) event(dst []byte, ev engine.Event) []byte {
	if ev.Token == nil {
		return dst // progress has no Responses form
	}
	return e.s.Token(dst, ev.Token)
}

func (e responsesEncoder) final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true // one choice: its end is the stream's
}

func (e responsesEncoder) fail(dst []byte, err *openai.Error) []byte {
	return e.s.Fail(dst, responses.Rename(err))
}
