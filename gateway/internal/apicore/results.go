package apicore

import (
	"strconv"
	"strings"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

// Meta is what every response object of one request repeats.
type Meta struct {
	ID          string // e.g. "chatcmpl-<request id>"
	Created     int64  // unix seconds
	Model       string
	Fingerprint string // system_fingerprint
	// Route says where the request ran, for timings.route; nil leaves it out.
	Route *Route
}

// Route is where a request ran: the gateway that took it, the node and instance that decoded it, the
// prefill endpoint the router offered first, whether it was forwarded, the router's reason, what routing took
// (on the gateway the client called) and the wait for an admission slot (on the gateway that ran it).
type Route struct {
	EntryNode       string
	DecodeNode      string
	DecodeInstance  string
	PrefillInstance string
	PrefillNode     string
	PrefillAddress  string
	Forwarded       bool
	// Reason is the router's account of its choice ("auto: remote 14.9 s (first token 2.16 s) vs local
	// 32.7 s"); a forwarded request's comes with the hop.
	Reason    string
	Time      time.Duration
	Admission time.Duration
}

// Result accumulates one choice of a generation for a non-streamed response.
type Result struct {
	Text      strings.Builder
	Reasoning strings.Builder
	Logprobs  []engine.Logprob
	Final     *engine.Final
	Tokens    int
	// ReasoningTokens are the tokens that added to the reasoning (the Responses API reports them).
	ReasoningTokens int
}

// Add folds one event into the result.
func (r *Result) Add(ev engine.Event) {
	switch {
	case ev.Token != nil:
		r.Tokens++
		if ev.Token.Reasoning != "" {
			r.ReasoningTokens++
		}
		r.Text.WriteString(ev.Token.Text)
		r.Reasoning.WriteString(ev.Token.Reasoning)
		if ev.Token.Logprob != nil {
			r.Logprobs = append(r.Logprobs, *ev.Token.Logprob)
		}
	case ev.Final != nil:
		r.Final = ev.Final
		r.Text.WriteString(ev.Final.Text)
		r.Reasoning.WriteString(ev.Final.Reasoning)
	}
}

// Results accumulates every choice of a generation.
type Results []*Result

// NewResults makes n choices.
func NewResults(n int) Results {
	out := make(Results, max(n, 1))
	for i := range out {
		out[i] = &Result{}
	}
	return out
}

// Add folds an event into its choice's result (events of an unknown choice are dropped).
func (rs Results) Add(ev engine.Event) {
	if ev.Choice >= 0 && ev.Choice < len(rs) {
		rs[ev.Choice].Add(ev)
	}
}

// Done reports whether every choice has its final event; Failed returns the first that ended in an error.
func (rs Results) Done() bool {
	for _, r := range rs {
		if r.Final == nil {
			return false
		}
	}
	return true
}

// Usage adds the choices' completions to the prompt they share.
func (rs Results) Usage() engine.Usage {
	var u engine.Usage
	for i, r := range rs {
		if r.Final == nil {
			continue
		}
		if i == 0 || u.PromptTokens == 0 {
			u.PromptTokens, u.CachedTokens = r.Final.Usage.PromptTokens, r.Final.Usage.CachedTokens
		}
		u.CompletionTokens += r.Final.Usage.CompletionTokens
	}
	return u
}

// FinalError returns the API error of a final event that ended in an error or a cancellation not asked for
// by the client (an instance unloaded under the request), and nil otherwise.
func FinalError(f *engine.Final) *Error {
	switch f.FinishReason {
	case engine.FinishError:
		code := f.ErrorCode
		if code == "" {
			code = engine.CodeInternal
		}
		return FromEngine(&engine.Error{Code: code, Message: f.Error})
	case engine.FinishCancelled:
		return Unavailable("the generation was cancelled by the engine (the model instance was unloaded or restarted)")
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// AppendTimings appends duet's per-phase timings (milliseconds) and, when route is set, where the request ran:
// an extension field clients ignore.
func AppendTimings(dst []byte, t engine.Timings, route *Route) []byte {
	field := func(dst []byte, name string, d time.Duration) []byte {
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		return AppendFloat(dst, ms(d))
	}
	dst = append(dst, `{"prefill_source":`...)
	dst = AppendNullableString(dst, t.PrefillSource)
	dst = field(dst, "queue_ms", t.Queue)
	dst = field(dst, "prefill_ms", t.Prefill)
	dst = field(dst, "first_token_ms", t.FirstToken)
	dst = field(dst, "decode_ms", t.Decode)
	dst = field(dst, "total_ms", t.Total)
	if r := t.Remote; r != nil {
		dst = append(dst, `,"remote_prefill":{"endpoint":`...)
		dst = AppendString(dst, r.Endpoint)
		dst = append(dst, `,"instance_id":`...)
		dst = AppendString(dst, r.InstanceID)
		dst = append(dst, `,"tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.Tokens), 10)
		dst = append(dst, `,"bytes":`...)
		dst = strconv.AppendInt(dst, r.Bytes, 10)
		dst = field(dst, "wait_ms", r.Wait)
		dst = field(dst, "transfer_ms", r.Transfer)
		dst = field(dst, "ingest_ms", r.Ingest)
		dst = append(dst, `,"attempts":`...)
		dst = strconv.AppendInt(dst, int64(r.Attempts), 10)
		dst = append(dst, `,"fallback_reason":`...)
		dst = AppendNullableString(dst, r.FallbackReason)
		dst = append(dst, `,"exact":`...)
		dst = strconv.AppendBool(dst, !r.Approximate)
		dst = append(dst, '}')
	}
	if route != nil {
		dst = append(dst, `,"route":{"entry_node":`...)
		dst = AppendString(dst, route.EntryNode)
		dst = append(dst, `,"decode_node":`...)
		dst = AppendString(dst, route.DecodeNode)
		dst = append(dst, `,"decode_instance":`...)
		dst = AppendString(dst, route.DecodeInstance)
		dst = append(dst, `,"prefill_instance":`...)
		dst = AppendNullableString(dst, route.PrefillInstance)
		dst = append(dst, `,"prefill_node":`...)
		dst = AppendNullableString(dst, route.PrefillNode)
		dst = append(dst, `,"prefill_address":`...)
		dst = AppendNullableString(dst, route.PrefillAddress)
		dst = append(dst, `,"forwarded":`...)
		dst = strconv.AppendBool(dst, route.Forwarded)
		dst = append(dst, `,"reason":`...)
		dst = AppendNullableString(dst, route.Reason)
		dst = field(dst, "routing_ms", route.Time)
		dst = field(dst, "admission_ms", route.Admission)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
