package mlxengine

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

// parsedOutput splits a choice's text into content, reasoning and tool calls with the model family's parser.
// Calls are numbered as they start, so the indices a client sees have no gaps where the parser dropped one.
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

func (o *parsedOutput) Flush() (runner.Delta, []engine.ToolCall, error) {
	res, ds, err := o.p.Finish()
	d := o.convert(ds)
	var calls []engine.ToolCall
	for _, c := range res.Calls {
		if i, ok := o.index[c.Index]; ok && i == len(calls) {
			calls = append(calls, engine.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	// A call the model meant but wrote wrong (malformed, an unknown tool, arguments against the schema) is
	// an error the client sees, quoting the model's text; the whole text goes to the log. A call cut off by
	// the end of the output is not: the choice ends with finish_reason "length" and what it had.
	var bad []string
	for _, e := range callErrors(err) {
		if errors.Is(e, toolcall.ErrTruncated) {
			continue
		}
		bad = append(bad, e.Error())
		o.log.Warn("the model wrote a tool call that cannot be used", "request_id", o.request, "error", e, "text", e.Text)
	}
	if len(bad) > 0 {
		return d, calls, engine.Errorf(engine.CodeInvalidOutput, "the model wrote a tool call that cannot be used: %s", strings.Join(bad, "; "))
	}
	return d, calls, nil
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
