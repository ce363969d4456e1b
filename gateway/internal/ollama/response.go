package ollama

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Kind is the endpoint an answer belongs to: its text is a message (chat) or a response (generate).
type Kind int

// Kinds.
const (
	Chat Kind = iota
	Generate
)

// ContentType is the Content-Type of a stream: one JSON object a line.
const ContentType = "application/x-ndjson"

// Reply says how the answers of one request are rendered.
type Reply struct {
	Kind Kind
	// Model is the model as the client named it, which every object repeats.
	Model string
	// Logprobs: the request asked for log probabilities.
	Logprobs bool
	// Route, when set, is where the request ran, for the timings extension of the last object.
	Route *apicore.Route
}

// object is one rendered object: a chunk, or with final set the done object (or a whole answer).
type object struct {
	content, thinking string
	calls             []engine.ToolCall
	firstCall         int // index of calls[0] among the choice's calls
	logprobs          []engine.Logprob
	final             *engine.Final
	loadReason        string // a done object that generated nothing: "load" or "unload"
}

// AppendAnswer appends the one object of a non-streamed answer ("stream": false).
func (r Reply) AppendAnswer(dst []byte, at time.Time, res *apicore.Result) []byte {
	o := object{content: res.Text.String(), thinking: res.Reasoning.String(), final: res.Final}
	if r.Kind == Chat {
		o.calls = res.Final.ToolCalls
	}
	if r.Logprobs {
		o.logprobs = res.Logprobs
	}
	return r.appendObject(dst, at, o)
}

// AppendLoad appends the answer to a body that asks for no generation: done at once, with reason "load" or
// "unload".
func (r Reply) AppendLoad(dst []byte, at time.Time, reason string) []byte {
	return r.appendObject(dst, at, object{loadReason: reason})
}

// AppendError appends Ollama's error object.
func AppendError(dst []byte, message string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendString(dst, message)
	return append(dst, '}')
}

// doneReason maps an engine finish reason to Ollama's: a model that called tools stopped.
func doneReason(f engine.FinishReason) string {
	if f == engine.FinishLength {
		return "length"
	}
	return "stop"
}

func (r Reply) appendObject(dst []byte, at time.Time, o object) []byte {
	dst = append(dst, `{"model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"created_at":"`...)
	dst = at.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if r.Kind == Chat {
		dst = append(dst, `,"message":{"role":"assistant","content":`...)
		dst = appendString(dst, o.content)
		if o.thinking != "" {
			dst = append(dst, `,"thinking":`...)
			dst = appendString(dst, o.thinking)
		}
		dst = appendToolCalls(dst, o.firstCall, o.calls)
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"response":`...)
		dst = appendString(dst, o.content)
		if o.thinking != "" {
			dst = append(dst, `,"thinking":`...)
			dst = appendString(dst, o.thinking)
		}
	}
	switch {
	case o.loadReason != "":
		dst = append(dst, `,"done":true,"done_reason":`...)
		dst = appendString(dst, o.loadReason)
	case o.final != nil:
		f := o.final
		dst = append(dst, `,"done":true,"done_reason":"`...)
		dst = append(dst, doneReason(f.FinishReason)...)
		dst = append(dst, '"')
		// Ollama's timings, in nanoseconds. Models stay loaded in duet: the time a request waited for the
		// engine stands where Ollama reports loading its model.
		for _, m := range []struct {
			name string
			v    int64
		}{
			{"total_duration", int64(f.Timings.Total)},
			{"load_duration", int64(f.Timings.Queue)},
			{"prompt_eval_count", int64(f.Usage.PromptTokens)},
			{"prompt_eval_duration", int64(f.Timings.Prefill)},
			{"eval_count", int64(f.Usage.CompletionTokens)},
			{"eval_duration", int64(f.Timings.Decode)},
		} {
			dst = append(dst, `,"`...)
			dst = append(dst, m.name...)
			dst = append(dst, `":`...)
			dst = strconv.AppendInt(dst, m.v, 10)
		}
	default:
		dst = append(dst, `,"done":false`...)
	}
	if len(o.logprobs) > 0 {
		dst = append(dst, `,"logprobs":`...)
		dst = appendLogprobs(dst, o.logprobs)
	}
	if o.final != nil {
		// duet's per-phase timings and route, as its OpenAI answers carry them: an extension clients ignore.
		dst = append(dst, `,"timings":`...)
		dst = apicore.AppendTimings(dst, o.final.Timings, r.Route)
	}
	return append(dst, '}')
}

// appendToolCalls appends ,"tool_calls":[...] (nothing for no calls). A call whose arguments are not a
// JSON object (one the model did not finish) is left out: Ollama's clients decode arguments as an object.
func appendToolCalls(dst []byte, first int, calls []engine.ToolCall) []byte {
	open := false
	for i, c := range calls {
		args := bytes.TrimSpace([]byte(c.Arguments))
		if len(args) == 0 {
			args = []byte("{}")
		}
		var compact bytes.Buffer
		// Compact also keeps the object on one line, as NDJSON needs.
		if args[0] != '{' || json.Compact(&compact, args) != nil {
			continue
		}
		if !open {
			dst = append(dst, `,"tool_calls":[`...)
			open = true
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if c.ID != "" {
			dst = append(dst, `"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, ',')
		}
		dst = append(dst, `"function":{"index":`...)
		dst = strconv.AppendInt(dst, int64(first+i), 10)
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, c.Name)
		dst = append(dst, `,"arguments":`...)
		dst = append(dst, compact.Bytes()...)
		dst = append(dst, "}}"...)
	}
	if open {
		dst = append(dst, ']')
	}
	return dst
}

func appendLogprobs(dst []byte, lps []engine.Logprob) []byte {
	dst = append(dst, '[')
	for i, lp := range lps {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendTokenLogprob(dst, lp.Token, lp.Logprob, lp.Bytes)
		dst = dst[:len(dst)-1] // reopen the object for its alternatives
		if len(lp.Top) > 0 {
			dst = append(dst, `,"top_logprobs":[`...)
			for j, alt := range lp.Top {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendTokenLogprob(dst, alt.Token, alt.Logprob, alt.Bytes)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendTokenLogprob(dst []byte, token string, logprob float64, b []byte) []byte {
	dst = append(dst, `{"token":`...)
	dst = appendString(dst, token)
	dst = append(dst, `,"logprob":`...)
	if math.IsInf(logprob, 0) || math.IsNaN(logprob) {
		logprob = -9999 // JSON has no -Inf; a token the model all but ruled out
	}
	dst = strconv.AppendFloat(dst, logprob, 'g', -1, 64)
	if len(b) > 0 {
		dst = append(dst, `,"bytes":[`...)
		for i, c := range b {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(c), 10)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendString appends s as a JSON string, as encoding/json writes it (invalid UTF-8 becomes U+FFFD).
func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// Stream renders one streamed answer, object by object, each on its own line. A tool call streams from the
// engine in pieces; Ollama's clients read each call whole, so a call is held until the next one starts or
// the choice ends. It is used by one goroutine.
type Stream struct {
	reply Reply
	now   func() time.Time
	calls []heldCall // the choice's calls so far, by index
	sent  int        // calls already written
}

type heldCall struct {
	id, name string
	args     []byte
}

// NewStream starts rendering a stream; now stamps each object (time.Now when nil).
func (r Reply) NewStream(now func() time.Time) *Stream {
	if now == nil {
		now = time.Now
	}
	return &Stream{reply: r, now: now}
}

// Event renders one engine event: a line when the token says something (text, thinking, a finished tool
// call, a log probability), nothing otherwise.
func (s *Stream) Event(dst []byte, ev engine.Event) []byte {
	tok := ev.Token
	if tok == nil {
		return dst // Ollama shows no prompt progress
	}
	o := object{content: tok.Text, thinking: tok.Reasoning, firstCall: s.sent}
	if s.reply.Kind == Chat {
		o.calls = s.hold(tok.ToolCalls)
	}
	if s.reply.Logprobs && tok.Logprob != nil {
		o.logprobs = []engine.Logprob{*tok.Logprob}
	}
	if o.content == "" && o.thinking == "" && len(o.calls) == 0 && o.logprobs == nil {
		return dst // held-back bytes: nothing to say yet
	}
	return s.line(dst, o)
}

// hold adds tool call pieces to the calls they belong to and returns the calls a new one's start
// completed.
func (s *Stream) hold(deltas []engine.ToolCallDelta) []engine.ToolCall {
	var done []engine.ToolCall
	for _, d := range deltas {
		if d.Index < s.sent || d.Index > len(s.calls) {
			continue // not a call in progress, nor the next one: the final's calls will say
		}
		if d.Index == len(s.calls) {
			// A new call: those before it are complete.
			done = append(done, s.take(d.Index)...)
			s.calls = append(s.calls, heldCall{})
		}
		c := &s.calls[d.Index]
		if d.ID != "" {
			c.id = d.ID
		}
		if d.Name != "" {
			c.name = d.Name
		}
		c.args = append(c.args, d.Arguments...)
	}
	return done
}

// take marks the held calls before end as sent and returns them.
func (s *Stream) take(end int) []engine.ToolCall {
	var out []engine.ToolCall
	for ; s.sent < end; s.sent++ {
		c := s.calls[s.sent]
		out = append(out, engine.ToolCall{ID: c.id, Name: c.name, Arguments: string(c.args)})
	}
	return out
}

// Final renders the end of the choice: what the engine held back and the calls not yet written (as the
// final event has them, whole), then the done object.
func (s *Stream) Final(dst []byte, f *engine.Final) []byte {
	o := object{content: f.Text, thinking: f.Reasoning, firstCall: s.sent}
	if s.reply.Kind == Chat && len(f.ToolCalls) > s.sent {
		o.calls = f.ToolCalls[s.sent:]
		s.sent = len(f.ToolCalls)
	}
	if o.content != "" || o.thinking != "" || len(o.calls) > 0 {
		dst = s.line(dst, o)
	}
	return s.line(dst, object{final: f})
}

// Fail renders an error that ends the stream, as Ollama does: a last line {"error": ...}.
func (s *Stream) Fail(dst []byte, e *apicore.Error) []byte {
	return append(AppendError(dst, e.Message), '\n')
}

func (s *Stream) line(dst []byte, o object) []byte {
	return append(s.reply.appendObject(dst, s.now(), o), '\n')
}
