package mlxengine

import (
	"errors"
	"log/slog"

	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

// parsedOutput splits a choice's text into content, reasoning and tool calls with the model family's parser.
// Calls are numbered as they start, so the indices a client sees have no gaps where the parser dropped a call.
type parsedOutput struct {
	p       *toolcall.Parser
	log     *slog.Logger
	request string
	index   map[int]int // parser's call index -> ours
}

var _ runner.Output = (*parsedOutput)(nil)

func (o *parsedOutput) Add(text string) runner.Delta {
	if text == "" {
		return runner.Delta{}
	}
	return o.convert(o.p.Feed(text))
}

func (o *parsedOutput) Flush() (runner.Delta, []engine.ToolCall) {
	res, ds, err := o.p.Finish()
	d := o.convert(ds)
	var calls []engine.ToolCall
	for _, c := range res.Calls {
		if i, ok := o.index[c.Index]; ok && i == len(calls) {
			calls = append(calls, engine.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	// What the model wrote is never lost: a call the parser could not use comes back as content, in the
	// model's words, and the log says why.
	for _, e := range callErrors(err) {
		switch {
		case errors.Is(e, toolcall.ErrMalformed), errors.Is(e, toolcall.ErrUnknownTool):
			if _, streamed := o.index[e.Index]; !streamed {
				d.Content += e.Text
			}
			o.log.Warn("the model wrote a tool call that cannot be used; returned as content", "request", o.request, "error", e)
		case errors.Is(e, toolcall.ErrInvalidArguments):
			o.log.Warn("tool call arguments do not match the tool's parameters", "request", o.request, "error", e)
		}
	}
	return d, calls
}

func (o *parsedOutput) convert(ds []toolcall.Delta) runner.Delta {
	var d runner.Delta
	for _, x := range ds {
		switch x.Kind {
		case toolcall.Content:
			d.Content += x.Text
		case toolcall.Reasoning:
			d.Reasoning += x.Text
		case toolcall.CallStart:
			if o.index == nil {
				o.index = map[int]int{}
			}
			i := len(o.index)
			o.index[x.Index] = i
			d.ToolCalls = append(d.ToolCalls, engine.ToolCallDelta{Index: i, ID: x.ID, Name: x.Name})
		case toolcall.CallArguments:
			i, ok := o.index[x.Index]
			if !ok {
				continue
			}
			if n := len(d.ToolCalls); n > 0 && d.ToolCalls[n-1].Index == i {
				d.ToolCalls[n-1].Arguments += x.Text
			} else {
				d.ToolCalls = append(d.ToolCalls, engine.ToolCallDelta{Index: i, Arguments: x.Text})
			}
		}
	}
	return d
}

// callErrors unpacks the errors Finish returns (one, or several joined).
func callErrors(err error) []*toolcall.CallError {
	if err == nil {
		return nil
	}
	var out []*toolcall.CallError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, callErrors(e)...)
		}
		return out
	}
	var ce *toolcall.CallError
	if errors.As(err, &ce) {
		out = append(out, ce)
	}
	return out
}
