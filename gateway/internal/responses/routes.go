package responses

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Routes serves OpenAI's Responses API on v1: POST /responses parses the body with opts and hands the
// generation to pipe. duet stores no responses, so the routes that read or change a stored one answer 404
// saying so.
func Routes(v1 fiber.Router, pipe apicore.Pipeline, opts Options) {
	a := api{pipe: pipe, opts: opts}
	v1.Post("/responses", a.createResponse)
	v1.Get("/responses/:id", notStored)
	v1.Delete("/responses/:id", notStored)
	v1.Get("/responses/:id/input_items", notStored)
	v1.Post("/responses/:id/cancel", notStored)
}

// api is the Responses API over a pipeline.
type api struct {
	pipe apicore.Pipeline
	opts Options
}

// ignoredToolsHeader names the hosted tools of a request that the model did not see.
const ignoredToolsHeader = "Duet-Ignored-Tools"

func notStored(c *fiber.Ctx) error { return NotStored(c.Params("id")) }

func (a api) createResponse(c *fiber.Ctx) error {
	req, perr := Parse(c.Body(), a.opts)
	if perr != nil {
		return perr
	}
	if len(req.IgnoredTools) > 0 {
		// Also in the response object (ignored_tools); a header tells a client that reads neither body nor
		// stream closely, and the logs of proxies.
		c.Set(ignoredToolsHeader, strings.Join(req.IgnoredTools, ", "))
	}
	err := a.pipe.Serve(c, apicore.Call{
		Model:       req.Model,
		Stream:      req.Stream,
		Dialect:     Dialect{Echo: req.Echo},
		IDPrefix:    "resp_",
		Generate:    req.Generate,
		PromptBytes: req.PromptBytes,
		CacheKey:    req.CacheKey,
	})
	var apiErr *apicore.Error
	if errors.As(err, &apiErr) {
		return Rename(apiErr)
	}
	return err
}

// Dialect renders /v1/responses: a response object, or the stream of its events. Its errors are OpenAI's
// envelope, as chat's are.
type Dialect struct {
	// Echo is what the response repeats of the request.
	Echo *Echo
}

var (
	_ apicore.Dialect = Dialect{}
	_ apicore.Encoder = encoder{}
)

func (d Dialect) Answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return AppendResponse(dst, m, d.Echo, rs[0])
}

func (Dialect) StreamType() string { return "text/event-stream" }

func (Dialect) ErrorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, e.AppendEnvelope(dst)
}

func (d Dialect) Encoder(m apicore.Meta, _ int) apicore.Encoder {
	return encoder{NewStream(m, d.Echo)}
}

// encoder adapts a Stream, which renders the events, to the pipeline's stream mechanics.
type encoder struct{ s *Stream }

func (e encoder) Start(dst []byte) []byte     { return e.s.Start(dst) }
func (e encoder) Heartbeat(dst []byte) []byte { return append(dst, ": keep-alive\n\n"...) }

func (e encoder) Event(dst []byte, ev engine.Event) []byte {
	if ev.Token == nil {
		return dst // progress has no Responses form
	}
	return e.s.Token(dst, ev.Token)
}

func (e encoder) Final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true // one choice: its end is the stream's
}

func (e encoder) Fail(dst []byte, err *apicore.Error) []byte {
	return e.s.Fail(dst, Rename(err))
}
