package apicore

import (
	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/sdk/engine"
)

// The contract between a client API (packages openai, responses, anthropic, ollama) and the request pipeline
// (package pipeline). An API parses a request in its own terms and hands it on as a Call, with the Dialect its
// answer is rendered in; everything between parsing and rendering (routing, forwarding, admission, the
// engine, the mechanics of streaming) is the pipeline's, so every API gets the same routing, P/D and limits.

// A Dialect renders generations and errors in one client API's shapes: OpenAI chat completions and
// completions, OpenAI Responses, Anthropic Messages, Ollama.
type Dialect interface {
	// Answer renders a whole non-streamed answer.
	Answer(dst []byte, m Meta, rs Results) []byte
	// Encoder starts rendering a stream of a generation of n choices.
	Encoder(m Meta, n int) Encoder
	// StreamType is the Content-Type of a stream.
	StreamType() string
	// ErrorBody renders an error in the API's envelope, with the status to send it with.
	ErrorBody(dst []byte, e *Error) (status int, body []byte)
}

// An Encoder renders one stream, event by event. It is used by one goroutine.
type Encoder interface {
	// Start is what the stream says before its first event (nothing, for OpenAI chat).
	Start(dst []byte) []byte
	// Event renders a token (or progress, which most APIs do not show).
	Event(dst []byte, ev engine.Event) []byte
	// Final renders the end of a choice, which ended without an error; over says the stream is complete.
	Final(dst []byte, choice int, f *engine.Final) (out []byte, over bool)
	// Fail renders an error that ends the stream.
	Fail(dst []byte, e *Error) []byte
	// Heartbeat keeps an idle stream open through proxies.
	Heartbeat(dst []byte) []byte
}

// A Call is a generation an API hands to the pipeline: the request in the engine's terms, how its answer is
// rendered, and what the router is told of it.
type Call struct {
	// Model is the name the client asked for (the pipeline resolves aliases).
	Model  string
	Stream bool
	// Dialect renders the answer, and the errors after the pipeline took the request.
	Dialect Dialect
	// IDPrefix starts the response's id, before the request id ("chatcmpl-", "msg_").
	IDPrefix string
	Generate engine.GenerateRequest
	// PromptBytes is the prompt's size, exact or estimated, for the router.
	PromptBytes int
	// CacheKey is the client's name for a conversation whose turns share a prefix (the Responses API's
	// prompt_cache_key): routing keeps its turns together.
	CacheKey string
	// FitMaxTokens lets a max_tokens that the instance's context cannot hold mean "as many as fit":
	// Anthropic's API requires max_tokens, and agents send the most their vendor's model can write (Claude
	// Code 32000 to 128000), more than the context of most models duet serves.
	FitMaxTokens bool
}

// A TokenCount asks how many tokens a prompt is as an instance of Model renders it for a generation.
type TokenCount struct {
	Model string
	// Generate is what a generation of the prompt would ask (tools, tool choice, response format): an
	// instance whose engine could not serve it refuses, as it would refuse the generation.
	Generate engine.GenerateRequest
	// Tokenize is the prompt to count; the pipeline names the instance.
	Tokenize engine.TokenizeRequest
	// Param is the prompt's field, named in the error of a model that has no chat template.
	Param string
	// Render writes the answer: the count, in the API's shape.
	Render func(dst []byte, tokens int) []byte
}

// A Pipeline runs what an API hands it. Package server's request path is the one a gateway runs.
type Pipeline interface {
	// Serve takes a parsed generation through the pipeline: where it runs (the router), forwarded to the
	// gateway that runs it or run on this node's engine, and rendered in call's dialect, whole or streamed.
	// The Call is a value, so that handing it over costs no allocation.
	Serve(c *fiber.Ctx, call Call) error
	// RefuseOverlong answers context_length_exceeded (in param's name) for a prompt of model that cannot fit
	// the context of any instance of it in the cluster, given its size in bytes or tokens (0: unknown), so
	// that a prompt of megabytes is refused before it is parsed. nil: it may fit, or nothing says.
	RefuseOverlong(model string, promptBytes, promptTokens int, param string) error
	// CountTokens answers a token count with the count as tc renders it, counted by a local instance of the
	// model, or by the gateway of a node that has one.
	CountTokens(c *fiber.Ctx, tc TokenCount) error
	// RequestID is the id of c's request, as the gateway logs it and answers it in X-Request-Id.
	RequestID(c *fiber.Ctx) string
}
