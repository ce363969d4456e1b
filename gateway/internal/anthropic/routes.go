package anthropic

import (
	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// Routes serves Anthropic's Messages API on v1: POST /messages, a generation like chat's that pipe runs,
// rendered as Anthropic's message or stream, and POST /messages/count_tokens, which pipe counts.
func Routes(v1 fiber.Router, pipe apicore.Pipeline) {
	a := api{pipe}
	v1.Post("/messages", a.messages)
	v1.Post("/messages/count_tokens", a.countTokens)
}

// api is the Messages API over a pipeline.
type api struct{ pipe apicore.Pipeline }

func (a api) messages(c *fiber.Ctx) error {
	a.setRequestIDHeader(c)
	// The body scans as a chat body does: a prompt that cannot fit is refused before it is parsed.
	scan, err := openai.RefuseOverlong(a.pipe, c.Body(), "messages")
	if err != nil {
		return err
	}
	req, perr := ParseMessages(c.Body())
	if perr != nil {
		return perr
	}
	return a.pipe.Serve(c, apicore.Call{
		Model:    req.Model,
		Stream:   req.Stream,
		Dialect:  Dialect{},
		IDPrefix: "msg_",
		Generate: engine.GenerateRequest{Messages: req.Messages, Sampling: req.Sampling, Tools: req.Tools,
			ToolChoice: req.ToolChoice, ParallelToolCalls: req.ParallelToolCalls, ResponseFormat: req.ResponseFormat,
			TemplateVars: req.TemplateVars},
		PromptBytes:  scan.PromptBytes,
		FitMaxTokens: true,
	})
}

// countTokens is the prompt's tokens as the engine renders them for a generation (template, tools and
// thinking included).
func (a api) countTokens(c *fiber.Ctx) error {
	a.setRequestIDHeader(c)
	req, perr := ParseCountTokens(c.Body())
	if perr != nil {
		return perr
	}
	return a.pipe.CountTokens(c, apicore.TokenCount{
		Model:    req.Model,
		Generate: engine.GenerateRequest{Messages: req.Messages, Tools: req.Tools, ToolChoice: req.ToolChoice, ResponseFormat: req.ResponseFormat},
		Tokenize: engine.TokenizeRequest{Messages: req.Messages, AddGenerationPrompt: true, Tools: req.Tools, TemplateVars: req.TemplateVars},
		Param:    "messages",
		Render:   AppendTokenCount,
	})
}

// setRequestIDHeader gives the request id where Anthropic's SDKs read it (request-id), besides X-Request-Id.
func (a api) setRequestIDHeader(c *fiber.Ctx) { c.Set("Request-Id", a.pipe.RequestID(c)) }

// Dialect renders /v1/messages, and the errors of every path under it, in Anthropic's shapes. Messages has
// one choice per request.
type Dialect struct{}

var (
	_ apicore.Dialect = Dialect{}
	_ apicore.Encoder = encoder{}
)

func (Dialect) Answer(dst []byte, m apicore.Meta, rs apicore.Results) []byte {
	return AppendMessage(dst, m, rs[0])
}

func (Dialect) Encoder(m apicore.Meta, _ int) apicore.Encoder {
	return encoder{NewStream(m)}
}

func (Dialect) StreamType() string { return "text/event-stream" }

func (Dialect) ErrorBody(dst []byte, e *apicore.Error) (int, []byte) {
	return e.Status, AppendError(dst, e)
}

// encoder adapts a Stream to the pipeline's stream mechanics. Its message_start waits for the first event,
// which may say how long the prompt is; an encoder made only to report a broken hop thus sends the error
// event alone, after the owner's message_start.
type encoder struct{ s *Stream }

func (e encoder) Start(dst []byte) []byte                    { return dst }
func (e encoder) Event(dst []byte, ev engine.Event) []byte   { return e.s.Event(dst, ev) }
func (e encoder) Fail(dst []byte, err *apicore.Error) []byte { return e.s.Fail(dst, err) }
func (e encoder) Heartbeat(dst []byte) []byte                { return Ping(dst) }

func (e encoder) Final(dst []byte, _ int, f *engine.Final) ([]byte, bool) {
	return e.s.Final(dst, f), true
}
