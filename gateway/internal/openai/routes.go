package openai

import (
	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Routes serves OpenAI's chat completions and completions on v1: each handler refuses a prompt that cannot
// fit (RefuseOverlong), parses the body and hands the generation to pipe, in its dialect.
func Routes(v1 fiber.Router, pipe apicore.Pipeline) {
	a := api{pipe}
	v1.Post("/chat/completions", a.chatCompletions)
	v1.Post("/completions", a.completions)
}

// api is OpenAI's chat completions and completions over a pipeline.
type api struct{ pipe apicore.Pipeline }

func (a api) chatCompletions(c *fiber.Ctx) error {
	scan, err := RefuseOverlong(a.pipe, c.Body(), "messages")
	if err != nil {
		return err
	}
	req, perr := ParseChat(c.Body())
	if perr != nil {
		return perr
	}
	return a.pipe.Serve(c, apicore.Call{
		Model:    req.Model,
		Stream:   req.Stream,
		Dialect:  ChatDialect{Usage: req.IncludeUsage, Logprobs: req.Sampling.Logprobs},
		IDPrefix: "chatcmpl-",
		Generate: engine.GenerateRequest{Messages: req.Messages, Sampling: req.Sampling, Tools: req.Tools,
			ToolChoice: req.ToolChoice, ParallelToolCalls: req.ParallelToolCalls, ResponseFormat: req.ResponseFormat,
			TemplateVars: req.TemplateVars, N: req.N},
		PromptBytes: scan.PromptBytes,
	})
}

func (a api) completions(c *fiber.Ctx) error {
	scan, err := RefuseOverlong(a.pipe, c.Body(), "prompt")
	if err != nil {
		return err
	}
	req, perr := ParseCompletion(c.Body())
	if perr != nil {
		return perr
	}
	return a.pipe.Serve(c, apicore.Call{
		Model:       req.Model,
		Stream:      req.Stream,
		Dialect:     CompletionsDialect{Usage: req.IncludeUsage, Logprobs: req.Logprobs != nil},
		IDPrefix:    "cmpl-",
		Generate:    engine.GenerateRequest{Prompt: req.Prompt, PromptTokens: req.PromptTokens, Sampling: req.Sampling},
		PromptBytes: scan.PromptBytes,
	})
}

// RefuseOverlong scans body (ScanPrompt) and asks pipe to refuse a prompt that cannot fit the context of
// any instance of its model, before the body is parsed: a prompt of megabytes then costs a scan of its
// bytes, not copies of it in the gateway and the engine (without the check, eight 15 MB prompts at once take
// the engine to 3.5 GB). It returns what the scan learned. Anthropic's Messages, whose body scans alike, uses
// it too.
func RefuseOverlong(pipe apicore.Pipeline, body []byte, param string) (PromptScan, error) {
	scan, ok := ScanPrompt(body)
	if !ok {
		return scan, nil
	}
	return scan, pipe.RefuseOverlong(scan.Model, scan.PromptBytes, scan.PromptTokens, param)
}
