package pipeline

import (
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/sdk/engine"
)

// The parse stage is each client API's own (packages openai, responses, anthropic, ollama): its handlers read
// a request in their dialect and hand it to the pipeline as an apicore.Call. What they call of the pipeline
// (apicore.Pipeline) is here and in tokens.go; serve (pipeline.go) takes the request on.

var _ apicore.Pipeline = (*Pipeline)(nil)

// Serve takes an API's parsed generation through the stages.
func (p *Pipeline) Serve(c *fiber.Ctx, call apicore.Call) error {
	return p.serve(c, &request{
		model:        call.Model,
		stream:       call.Stream,
		dialect:      call.Dialect,
		idPrefix:     call.IDPrefix,
		generate:     call.Generate,
		promptBytes:  call.PromptBytes,
		cacheKey:     call.CacheKey,
		fitMaxTokens: call.FitMaxTokens,
	})
}

// RequestID is the id the requestID middleware gave c's request.
func (p *Pipeline) RequestID(c *fiber.Ctx) string { return locals.RequestID(c) }

// RefuseOverlong answers context_length_exceeded, before the body is parsed, for a prompt that cannot fit the
// context of any instance of its model in the cluster: its decoded length over the instance's
// MaxBytesPerToken is a lower bound on its tokens. So a prompt of megabytes costs a scan of its bytes, not
// copies of it in the gateway and the engine. The API may have renamed the model first (Ollama's
// "name:latest"); aliases are resolved here.
func (p *Pipeline) RefuseOverlong(model string, promptBytes, promptTokens int, param string) error {
	if model == "" || promptBytes == 0 && promptTokens == 0 {
		return nil
	}
	model = p.aliases.Resolve(model)
	least, limit := 0, 0
	for _, in := range p.Snapshot().Instances {
		if in.Model != model {
			continue
		}
		f, err := cluster.FactsFromLabels(in.Labels)
		mb, ctx := f.MaxBytesPerToken, f.ContextLength
		if err != nil || ctx <= 0 || mb <= 0 && promptTokens == 0 {
			return nil // no bound: the engine decides
		}
		n := promptTokens
		if mb > 0 {
			n = max(n, (promptBytes+mb-1)/mb)
		}
		if n < ctx {
			return nil
		}
		least, limit = n, max(limit, ctx)
	}
	if limit == 0 {
		return nil // no instance: parsing and routing say so
	}
	return apicore.FromEngine(&engine.Error{Code: engine.CodeContextLength, Param: param, Message: fmt.Sprintf(
		"This model's maximum context length is %d tokens, but the prompt has at least %d tokens.", limit, least)})
}
