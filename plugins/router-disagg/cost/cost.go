package cost

import (
	"math"
	"time"

	"github.com/duet-ai/duet/sdk/router"
)

// Params are the model's assumptions where nothing is measured. Start from DefaultParams.
type Params struct {
	// OutputTokens is the output length assumed when a request does not bound it.
	OutputTokens int
	// NominalEfficiency is the share of a path's nominal speed that KV goodput is assumed to reach before a
	// transfer over it was measured.
	NominalEfficiency float64
	// SameNodeBPS is the KV goodput assumed between two instances of one node (loopback).
	SameNodeBPS float64
	// IngestBPS is the ingest rate assumed before the decode instance measured its own.
	IngestBPS float64
	// ChunkTokens is how many prompt tokens the prefill node computes before it sends their KV: the transfer
	// of the last chunk cannot overlap the prefill.
	ChunkTokens int
	// HopOverhead is a forwarded request's cost beyond the round trip.
	HopOverhead time.Duration
}

// DefaultParams are the assumptions the router runs with.
func DefaultParams() Params {
	return Params{
		OutputTokens: 256, NominalEfficiency: 0.6, SameNodeBPS: 1e9, IngestBPS: 2e9, ChunkTokens: 512,
		HopOverhead: time.Millisecond,
	}
}

// Missing names the measurement an estimate could not do without.
type Missing string

// What an estimate may lack.
const (
	MissingNone    Missing = ""
	MissingPrefill Missing = "prefill speed"
	MissingDecode  Missing = "decode speed"
	MissingKVSize  Missing = "KV bytes per token"
	MissingLink    Missing = "link speed"
)

// Estimate is one placement's expected timings.
type Estimate struct {
	// FirstToken and Total are counted from the request's arrival at the entry gateway.
	FirstToken, Total time.Duration
	// The parts: waits in the engines' queues, the prefill, the transfer that outlasts the prefill (with the
	// last chunk), ingest, the forwarding hop and decoding after the first token.
	Queue, Prefill, Transfer, Ingest, Hop, Decode time.Duration
	// Goodput is the KV bytes per second the transfer was estimated at (remote only); Nominal is true when it
	// came from the path's nominal speed, not a measured transfer.
	Goodput float64
	Nominal bool
	// Whole is true when the remote prefill's time (the prefill node's queue, its prefill and the transfer
	// that outlasted it) is what whole remote prefills from that node took lately, as the decode instance
	// measured them (LinkSpeed.PrefillTPS), rather than the sum of the prefill node's own figures.
	Whole bool
	// Missing is set, and the durations are meaningless, when a measurement the estimate needs is unknown.
	Missing Missing
	// Of names the instance whose measurement is missing.
	Of string
}

// Known reports whether the estimate rests on measurements.
func (e *Estimate) Known() bool { return e.Missing == MissingNone }

// PrefillTPS is the instance's measured prefill speed for a prompt of u tokens: the band of u, else the
// nearest measured band (the shorter on a tie); 0 when none is measured.
func PrefillTPS(s *router.Speed, u int) float64 { return bandRate(&s.PrefillTPS, u) }

// bandRate is the rate of u's band, else of the nearest band measured (the shorter on a tie); 0 when none is.
func bandRate(rates *[router.PrefillBands]float64, u int) float64 {
	b := router.PrefillBand(u)
	for d := 0; d < router.PrefillBands; d++ {
		for _, i := range [2]int{b - d, b + d} {
			if i >= 0 && i < router.PrefillBands && valid(rates[i]) {
				return rates[i]
			}
		}
	}
	return 0
}

func valid(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// prefill is how long in computes u tokens, sharing the engine with what it runs already.
func prefill(in *router.Instance, u int) (time.Duration, bool) {
	tps := PrefillTPS(&in.Speed, u)
	if tps == 0 {
		return 0, false
	}
	share := 1 + float64(max(in.Load.InFlight, 0))
	return seconds(float64(u) * share / tps), true
}

// decode is how long d takes for out tokens after the first, and one step.
func decode(d *router.Instance, out int) (rest, step time.Duration, ok bool) {
	if !valid(d.Speed.DecodeTPS) {
		return 0, 0, false
	}
	step = seconds(1 / d.Speed.DecodeTPS)
	return seconds(float64(max(out-1, 0)) / d.Speed.DecodeTPS), step, true
}

func (p *Params) out(maxTokens int) int {
	if maxTokens > 0 {
		return maxTokens
	}
	return p.OutputTokens
}

// Hop is the cost of forwarding a request from the entry node to the decode node over path (nil: none).
func (p *Params) Hop(entry, decodeNode string, path *router.Path) time.Duration {
	if entry == "" || entry == decodeNode {
		return 0
	}
	h := p.HopOverhead
	if path != nil {
		h += path.RTT
	}
	return h
}

// kvSize is what an instance's KV costs on the wire: bytes per prompt token and, once per transfer, its
// linear layers' states; ok is false when neither is known.
func kvSize(s *router.Speed) (perToken, state int64, ok bool) {
	perToken, state = max(s.KVBytesPerToken, 0), max(s.KVStateBytes, 0)
	return perToken, state, perToken > 0 || state > 0
}

// Local estimates prefilling and decoding on d: uncached prompt tokens, maxTokens out (0: unknown), hop the
// forwarding hop to d's node (Hop).
func (p *Params) Local(d *router.Instance, uncached, maxTokens int, hop time.Duration) Estimate {
	e := Estimate{Queue: d.Speed.QueueWait, Hop: hop}
	var ok bool
	if e.Prefill, ok = prefill(d, uncached); !ok {
		return Estimate{Missing: MissingPrefill, Of: d.ID}
	}
	if e.Decode, _, ok = decode(d, p.out(maxTokens)); !ok {
		return Estimate{Missing: MissingDecode, Of: d.ID}
	}
	e.FirstToken = e.Hop + e.Queue + e.Prefill
	e.Total = e.FirstToken + e.Decode
	return e
}

// Remote estimates prefilling on pi and decoding on d, the KV crossing path from pi's node to d's (nil when
// the snapshot has none; on one node it is not needed).
func (p *Params) Remote(pi, d *router.Instance, path *router.Path, uncached, maxTokens int, hop time.Duration) Estimate {
	e := Estimate{Queue: d.Speed.QueueWait + pi.Speed.QueueWait, Hop: hop}
	var ok bool
	if e.Prefill, ok = prefill(pi, uncached); !ok {
		return Estimate{Missing: MissingPrefill, Of: pi.ID}
	}
	rest, step, ok := decode(d, p.out(maxTokens))
	if !ok {
		return Estimate{Missing: MissingDecode, Of: d.ID}
	}
	e.Decode = rest
	kvpt, state, ok := kvSize(&d.Speed)
	if !ok {
		kvpt, state, ok = kvSize(&pi.Speed)
	}
	if !ok {
		return Estimate{Missing: MissingKVSize, Of: d.ID}
	}
	var rtt time.Duration
	switch l, measured := d.Speed.IngressFrom(pi.Node); {
	case pi.Node == d.Node:
		e.Goodput = p.SameNodeBPS
	case measured && valid(l.BytesPerSecond):
		e.Goodput = l.BytesPerSecond
		rtt = l.RTT
	case path != nil && path.SpeedMbps > 0:
		e.Goodput, e.Nominal = float64(path.SpeedMbps)*1e6/8*p.NominalEfficiency, true
	default:
		return Estimate{Missing: MissingLink, Of: pi.Node + "→" + d.Node}
	}
	if rtt == 0 && path != nil {
		rtt = path.RTT
	}
	// The linear layers' states go out once the whole prompt is computed: with the last chunk, after the
	// prefill.
	bytes := float64(uncached)*float64(kvpt) + float64(state)
	xfer := seconds(float64(uncached) * float64(kvpt) / e.Goodput)
	tail := seconds((float64(min(uncached, max(p.ChunkTokens, 1)))*float64(kvpt) + float64(state)) / e.Goodput)
	e.Transfer = max(0, xfer-e.Prefill) + tail
	if l, ok := d.Speed.IngressFrom(pi.Node); ok && pi.Node != d.Node && bandRate(&l.PrefillTPS, uncached) > 0 {
		// What whole remote prefills from there took lately, shared with what the prefill node runs now.
		share := 1 + float64(max(pi.Load.InFlight, 0))
		e.Prefill, e.Transfer, e.Whole = seconds(float64(uncached)*share/bandRate(&l.PrefillTPS, uncached)), 0, true
		e.Queue = d.Speed.QueueWait
	}
	ingest := d.Speed.IngestBPS
	if !valid(ingest) {
		ingest = p.IngestBPS
	}
	e.Ingest = seconds(bytes / ingest)
	e.FirstToken = e.Hop + e.Queue + rtt + e.Prefill + e.Transfer + e.Ingest + step
	e.Total = e.FirstToken + e.Decode
	return e
}
