package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"time"

	echo "github.com/duet-ai/duet/plugins/echo-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// faultyEngine is the echo engine with faults on demand, for the gateway's end-to-end tests. It runs as a
// real plugin subprocess: the test binary re-executes itself (see TestMain). A directive in the last user
// message (or the prompt) picks the fault:
//
//	fail:internal     a final event with an internal error before any token (500)
//	fail:busy         Generate refuses with resource_exhausted (429)
//	fail:unavailable  Generate refuses with unavailable (503)
//	fail:midstream    two tokens, then a final event with an error
//	panic             one token, then the plugin panics
//	slow              20 ms per token
type faultyEngine struct {
	*echo.Engine
	cancelled atomic.Int64
}

var errStopped = errors.New("stopped after a fault")

func newFaultyEngine() *faultyEngine { return &faultyEngine{Engine: echo.New()} }

func directive(req engine.GenerateRequest) string {
	if req.Prompt != "" {
		return req.Prompt
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}

func (f *faultyEngine) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Event) error) error {
	d := directive(req)
	switch {
	case strings.HasPrefix(d, "fail:busy"):
		return engine.Errorf(engine.CodeResourceExhausted, "the test engine is busy")
	case strings.HasPrefix(d, "fail:unavailable"):
		return engine.Errorf(engine.CodeUnavailable, "the test engine is unavailable")
	case strings.HasPrefix(d, "fail:internal"):
		return emit(engine.Event{Final: &engine.Final{FinishReason: engine.FinishError, ErrorCode: engine.CodeInternal, Error: "the test engine failed"}})
	}
	n := 0
	inner := func(ev engine.Event) error {
		if ev.Token != nil {
			n++
			switch {
			case strings.HasPrefix(d, "fail:midstream") && n == 3:
				if err := emit(engine.Event{Final: &engine.Final{FinishReason: engine.FinishError, ErrorCode: engine.CodeInternal, Error: "the test engine failed mid-stream"}}); err != nil {
					return err
				}
				return errStopped
			case strings.HasPrefix(d, "panic") && n == 2:
				os.Stderr.WriteString("about to panic\n")
				panic("boom: the test asked for it")
			case strings.HasPrefix(d, "slow"):
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
				}
			}
		}
		if ev.Final != nil && ev.Final.FinishReason == engine.FinishCancelled {
			f.cancelled.Add(1)
		}
		return emit(ev)
	}
	err := f.Engine.Generate(ctx, req, inner)
	if err != nil && ctx.Err() != nil {
		f.cancelled.Add(1)
	}
	return err
}

// Stats adds how many generations ended cancelled.
func (f *faultyEngine) Stats(ctx context.Context) (engine.Stats, error) {
	st, err := f.Engine.Stats(ctx)
	st.Metrics = map[string]float64{"cancelled": float64(f.cancelled.Load())}
	return st, err
}
