package server

import (
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// The parse stage: the OpenAI handlers read a request in its dialect (package openai) and refuse a prompt that
// cannot fit any instance's context before parsing it; serve (pipeline.go) takes the parsed request on. The
// other APIs' handlers are their adapters, api_*.go.

// openaiAPI is OpenAI's chat completions and completions over the pipeline.
type openaiAPI struct{ *pipeline }

// openaiRoutes serves OpenAI's chat completions and completions.
func openaiRoutes(v1 fiber.Router, pipe *pipeline) {
	p := openaiAPI{pipe}
	v1.Post("/chat/completions", p.chatCompletions)
	v1.Post("/completions", p.completions)
}

func (p openaiAPI) chatCompletions(c *fiber.Ctx) error {
	scan, err := p.refuseOverlong(c.Body(), "messages")
	if err != nil {
		return err
	}
	req, perr := openai.ParseChat(c.Body())
	if perr != nil {
		return perr
	}
	return p.serve(c, &request{
		model:    req.Model,
		stream:   req.Stream,
		dialect:  openaiChat{usage: req.IncludeUsage, logprobs: req.Sampling.Logprobs},
		idPrefix: "chatcmpl-",
		generate: engine.GenerateRequest{Messages: req.Messages, Sampling: req.Sampling, Tools: req.Tools,
			ToolChoice: req.ToolChoice, ParallelToolCalls: req.ParallelToolCalls, ResponseFormat: req.ResponseFormat,
			TemplateVars: req.TemplateVars, N: req.N},
		promptBytes: scan.PromptBytes,
	})
}

func (p openaiAPI) completions(c *fiber.Ctx) error {
	scan, err := p.refuseOverlong(c.Body(), "prompt")
	if err != nil {
		return err
	}
	req, perr := openai.ParseCompletion(c.Body())
	if perr != nil {
		return perr
	}
	return p.serve(c, &request{
		model:       req.Model,
		stream:      req.Stream,
		dialect:     openaiCompletions{usage: req.IncludeUsage, logprobs: req.Logprobs != nil},
		idPrefix:    "cmpl-",
		generate:    engine.GenerateRequest{Prompt: req.Prompt, PromptTokens: req.PromptTokens, Sampling: req.Sampling},
		promptBytes: scan.PromptBytes,
	})
}

// refuseOverlong answers context_length_exceeded, before the body is parsed, for a prompt that cannot fit the
// context of any instance of its model in the cluster: its decoded length over the instance's
// MaxBytesPerToken is a lower bound on its tokens. So a prompt of megabytes costs a scan of its bytes, not
// copies of it in the gateway and the engine (without the check, eight 15 MB prompts at once take the engine
// to 3.5 GB). It returns what the scan learned.
func (p *pipeline) refuseOverlong(body []byte, param string) (openai.PromptScan, error) {
	scan, ok := openai.ScanPrompt(body)
	if !ok {
		return scan, nil
	}
	return scan, p.refuseScanned(scan, param)
}

// refuseScanned is refuseOverlong for a body already scanned, whose model an API may have renamed first
// (Ollama's "name:latest").
func (p *pipeline) refuseScanned(scan openai.PromptScan, param string) error {
	if scan.Model == "" || scan.PromptBytes == 0 && scan.PromptTokens == 0 {
		return nil
	}
	scan.Model = p.aliases.Resolve(scan.Model)
	least, limit := 0, 0
	for _, in := range p.snapshot().Instances {
		if in.Model != scan.Model {
			continue
		}
		f, err := cluster.FactsFromLabels(in.Labels)
		mb, ctx := f.MaxBytesPerToken, f.ContextLength
		if err != nil || ctx <= 0 || mb <= 0 && scan.PromptTokens == 0 {
			return nil // no bound: the engine decides
		}
		n := scan.PromptTokens
		if mb > 0 {
			n = max(n, (scan.PromptBytes+mb-1)/mb)
		}
		if n < ctx {
			return nil
		}
		least, limit = n, max(limit, ctx)
	}
	if limit == 0 {
		return nil // no instance: parsing and routing say so
	}
	return openai.FromEngine(&engine.Error{Code: engine.CodeContextLength, Param: param, Message: fmt.Sprintf(
		"This model's maximum context length is %d tokens, but the prompt has at least %d tokens.", limit, least)})
}
