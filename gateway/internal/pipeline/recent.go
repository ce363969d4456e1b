package pipeline

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// The recent requests: a bounded ring of the last generations this gateway served (those that entered here,
// whether it ran them or forwarded them, and those other gateways forwarded to it), each with its route and
// timings, for the dashboard (GET /admin/v1/requests). A request is recorded once, when it is over: when its
// handler returns, or when its stream ends.

// RecentCapacity is how many requests the ring keeps. A record is bounded (strings are cut, a timings object
// larger than maxRecentTimings is dropped), so the ring holds at most a few megabytes.
const RecentCapacity = 512

const (
	maxRecentString  = 256
	maxRecentError   = 512
	maxRecentTimings = 4 << 10
	// recentTail is how much of a forwarded stream's end is kept to find the owner's timings and usage in.
	recentTail = 16 << 10
)

// RecentRequest is one request as GET /admin/v1/requests shows it: the client's RequestRecord, with the
// answer's timings object kept as the answer rendered it (for a forwarded request, the owner's) instead of
// decoded. Its Timings stands for the record's in the JSON (encoding/json takes the shallower of two fields of
// one name).
type RecentRequest struct {
	client.RequestRecord
	Timings json.RawMessage `json:"timings,omitempty"`

	// engine holds the timings of a generation that ran here until since renders them as Timings: a request
	// costs a copy of them, and only a record someone reads costs its JSON.
	engine *engineTimings
}

// engineTimings are a local generation's timings and route, as its answer rendered them.
type engineTimings struct {
	timings engine.Timings
	route   apicore.Route
}

// Recent is the ring of the last RecentCapacity requests, which the dashboard lists
// (GET /admin/v1/requests). Its zero value is ready to use.
type Recent struct {
	mu   sync.Mutex
	buf  []RecentRequest
	next int // where the next record goes once buf is full
	seq  uint64
}

func (r *Recent) add(rec RecentRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if len(r.buf) < RecentCapacity {
		r.buf = append(r.buf, rec)
		return
	}
	r.buf[r.next] = rec
	r.next = (r.next + 1) % RecentCapacity
}

// Since returns the records after seq (0: all) that started at or after t (zero: any), oldest first, and the
// last seq recorded.
func (r *Recent) Since(seq uint64, t time.Time) ([]RecentRequest, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecentRequest, 0, len(r.buf))
	for i := range r.buf {
		rec := &r.buf[(r.next+i)%len(r.buf)]
		if rec.engine != nil {
			if b := apicore.AppendTimings(nil, rec.engine.timings, &rec.engine.route); len(b) <= maxRecentTimings {
				rec.Timings = b
			}
			rec.engine = nil
		}
		if rec.Seq > seq && !rec.Start.Before(t) {
			out = append(out, *rec)
		}
	}
	return out, r.seq
}

// recentObserver records each request in the ring when it is over.
type recentObserver struct {
	nopObserver
	ring *Recent
}

func (o *recentObserver) finished(r *request) {
	a := &r.answer
	// The request's id, path and model are its own copies already.
	rec := RecentRequest{RequestRecord: client.RequestRecord{RequestID: clip(r.id, maxRecentString), Path: r.path,
		Model: clip(r.model, maxRecentString), Stream: r.stream, Node: r.node, Hop: r.hopped, Start: r.arrived,
		Status: a.status, DurationMS: msOf(time.Since(r.arrived)), Route: r.placement()}}
	if a.status >= 400 {
		rec.Error = cut(a.err, maxRecentError)
	}
	if a.firstByte > 0 {
		rec.FirstByteMS = msOf(a.firstByte)
	}
	rec.Route.Reason = clip(r.decision.Reason, maxRecentError) // the router's, or a decoded hop's: its own
	rec.Route.RoutingMS = msOf(r.routeTime)
	switch {
	case r.forwarded:
		if raw := a.owner.timings; raw != nil && len(raw) <= maxRecentTimings {
			rec.Timings = raw
		}
		if u := a.owner.usage; u != nil {
			rec.Usage = &client.RequestUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens}
		}
	case a.results != nil:
		if len(a.results) > 0 && a.results[0].Final != nil {
			rec.engine = &engineTimings{timings: a.results[0].Final.Timings, route: r.route}
			u := a.results.Usage()
			rec.Usage = &client.RequestUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens}
		}
	case a.finals > 0:
		rec.engine = &engineTimings{timings: *a.timings, route: r.route}
		rec.Usage = &client.RequestUsage{PromptTokens: a.usage.PromptTokens, CompletionTokens: a.usage.CompletionTokens, CachedTokens: a.usage.CachedTokens}
	}
	o.ring.add(rec)
}

// placement is where the request ran as this gateway knows it.
func (r *request) placement() client.RequestRoute {
	if r.forwarded {
		f := client.RequestRoute{EntryNode: r.route.EntryNode, DecodeNode: r.decision.DecodeNode, DecodeInstance: r.decision.DecodeInstance, Forwarded: true}
		if eps := r.decision.PrefillEndpoints; len(eps) > 0 {
			f.PrefillNode, f.PrefillInstance, f.PrefillAddress = eps[0].Node, eps[0].InstanceID, eps[0].Address
		}
		return f
	}
	rt := &r.route
	return client.RequestRoute{EntryNode: rt.EntryNode, DecodeNode: rt.DecodeNode, DecodeInstance: rt.DecodeInstance,
		PrefillNode: rt.PrefillNode, PrefillInstance: rt.PrefillInstance, PrefillAddress: rt.PrefillAddress, Forwarded: rt.Forwarded}
}

// timings are the engine's timings of a generation that ran here (its first choice's), or nil.
func (r *request) timings() *engine.Timings {
	a := &r.answer
	switch {
	case len(a.results) > 0 && a.results[0].Final != nil:
		return &a.results[0].Final.Timings
	case a.finals > 0:
		return a.timings
	}
	return nil
}

// settleStream says how a stream ended, from what its writer (or a forwarded stream's) saw: complete, failed,
// or cut off by the client.
func (r *request) settleStream() {
	a := &r.answer
	switch {
	case a.failure != nil:
		a.status, a.err = a.failure.Status, a.failure.Message
	case r.forwarded:
		a.owner = ownerFiguresOf(a.tail)
		a.tail = nil
		if a.owner.timings == nil {
			a.status, a.err = 499, "the stream ended before the answer did (the client left, or the owner's stream was cut)"
			return
		}
		a.status = fiber.StatusOK
	case a.complete:
		a.status = fiber.StatusOK
	default:
		a.status, a.err = 499, "the stream ended before the answer did (the client left)"
	}
}

// cut copies at most n bytes of s (not splitting a UTF-8 sequence).
func cut(s string, n int) string { return strings.Clone(clip(s, n)) }

// clip is at most n bytes of s (not splitting a UTF-8 sequence), for a string the caller owns.
func clip(s string, n int) string {
	if len(s) > n {
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		s = s[:n]
	}
	return s
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
