package toolcall

import (
	"errors"
	"strconv"
	"strings"
)

// The kinds of CallError; test for them with errors.Is.
var (
	// ErrMalformed: the call's text does not follow the format (bad JSON, no name, an unexpected tag).
	ErrMalformed = errors.New("malformed tool call")
	// ErrUnknownTool: the call names a function that is not among the request's tools.
	ErrUnknownTool = errors.New("call to a tool the request does not define")
	// ErrInvalidArguments: the arguments are JSON but do not match the tool's parameters schema.
	ErrInvalidArguments = errors.New("arguments do not match the tool's parameters")
	// ErrTruncated: generation ended in the middle of the call (max_tokens, a stop string). Not the model's
	// fault: engines finish with finish_reason "length" and keep what was streamed rather than fail.
	ErrTruncated = errors.New("tool call cut off by the end of generation")
)

// CallError reports a tool call the parser could not turn into a valid call. The model wrote it, so it is
// neither the client's fault nor a server bug; an engine reports it to the client (OpenAI servers answer such
// output with an error or return the text as content; this package leaves the choice to the engine).
type CallError struct {
	// Index is the call's position among the calls of the output, from 0: the index its deltas carry if it
	// started streaming. Calls after a failed one keep counting, so indices stay in the model's order.
	Index int
	// Name is the function name, when the parser got that far.
	Name string
	// Kind is ErrMalformed, ErrUnknownTool, ErrInvalidArguments or ErrTruncated.
	Kind error
	// Detail says what is wrong, e.g. `parameter "unit": "kelvin" is not one of "celsius", "fahrenheit"`.
	Detail string
	// Text is the call's text as the model wrote it, markers included.
	Text string
}

// maxQuoted bounds how much of the model's text an error message quotes.
const maxQuoted = 200

func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString("toolcall: call ")
	b.WriteString(strconv.Itoa(e.Index))
	if e.Name != "" {
		b.WriteString(" (")
		b.WriteString(strconv.Quote(e.Name))
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Text != "" {
		t := e.Text
		if len(t) > maxQuoted {
			t = t[:maxQuoted] + "..."
		}
		b.WriteString(" in ")
		b.WriteString(strconv.Quote(t))
	}
	return b.String()
}

func (e *CallError) Unwrap() error { return e.Kind }
