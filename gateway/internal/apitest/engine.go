package apitest

import (
	"context"
	"sync"

	"github.com/duet-ai/duet/sdk/engine"
)

// Engine is an engine that loads whatever it is asked for (described as Describe says, if set) and answers
// every generation with Events, in order, unless the context ends first (then a cancelled final). It records
// the requests it got. Tests of the gateway's request path run it in place of a plugin.
type Engine struct {
	Events   []engine.Event
	Describe func(req engine.LoadRequest) engine.Description
	// Tokens, when set, is what Tokenize answers.
	Tokens []int32

	mu        sync.Mutex
	generated []engine.GenerateRequest
}

var _ engine.Engine = (*Engine)(nil)

func (e *Engine) Load(_ context.Context, req engine.LoadRequest) (engine.Description, error) {
	if e.Describe != nil {
		return e.Describe(req), nil
	}
	return engine.Description{InstanceID: req.InstanceID, ModelID: req.Model}, nil
}

func (e *Engine) Unload(context.Context, string) error { return nil }

func (e *Engine) Instances(context.Context) ([]engine.Description, error) { return nil, nil }

func (e *Engine) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Event) error) error {
	e.mu.Lock()
	e.generated = append(e.generated, req)
	e.mu.Unlock()
	for _, ev := range e.Events {
		if ctx.Err() != nil {
			return emit(engine.Event{Final: &engine.Final{FinishReason: engine.FinishCancelled}})
		}
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

// Generated are the generation requests the engine got, in order.
func (e *Engine) Generated() []engine.GenerateRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.GenerateRequest(nil), e.generated...)
}

func (e *Engine) Tokenize(context.Context, engine.TokenizeRequest) (engine.TokenizeResponse, error) {
	return engine.TokenizeResponse{Tokens: e.Tokens}, nil
}

func (e *Engine) Stats(context.Context) (engine.Stats, error) { return engine.Stats{}, nil }

func (e *Engine) Health(context.Context) error { return nil }
