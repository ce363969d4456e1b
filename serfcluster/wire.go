package serfcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	"github.com/duet-ai/duet/serfcluster/internal/lww"
)

// Names of this package's user events and queries. Everything it sends is prefixed, so that other users of
// the same serf cluster cannot collide with it and it ignores theirs.
const (
	namePrefix  = "duet:"
	eventDelta  = namePrefix + "d"
	eventLoad   = namePrefix + "l"
	queryDigest = namePrefix + "ae"
)

// wireVersion is the version of every message and state document; a peer refuses other versions.
const wireVersion = 1

// Table tags in wire entries.
const (
	tableInstances = "i"
	tableLinks     = "l"
)

// eventOverhead is room left in MaxEventBytes for serf's own encoding of a user event (message type, Lamport
// time, the name and payload headers, the coalesce flag).
const eventOverhead = 64

// maxClockJump bounds how far ahead of this node's Lamport clock a peer's entry may be. A real cluster never
// gets near it; a bogus peer sending 2^64-1 would otherwise wrap every clock in the cluster to zero.
const maxClockJump = 1 << 40

// wireInstance is an instance on the wire: short keys, because deltas ride in gossip packets.
type wireInstance struct {
	ID          string            `json:"id"`
	Model       string            `json:"m"`
	Node        string            `json:"n"`
	Engine      string            `json:"e"`
	Role        string            `json:"r"`
	Status      string            `json:"s"`
	KVEndpoint  string            `json:"kv,omitempty"`
	Fingerprint string            `json:"fp,omitempty"`
	Labels      map[string]string `json:"lb,omitempty"`
}

type wireLink struct {
	ID      string   `json:"id"`
	Prefill []string `json:"p"`
	Decode  []string `json:"d"`
}

// wireEntry is one table entry: a value, a tombstone, or a stub (a revision without its value, sent when the
// value does not fit an event; the receiver pulls the sender's state if the stub is newer than what it has).
type wireEntry struct {
	Table   string        `json:"tb"`
	Key     string        `json:"k"`
	LTime   uint64        `json:"t"`
	Origin  string        `json:"o"`
	Deleted bool          `json:"x,omitempty"`
	TTLms   int64         `json:"ttl,omitempty"`
	Stub    bool          `json:"h,omitempty"`
	Inst    *wireInstance `json:"i,omitempty"`
	Link    *wireLink     `json:"l,omitempty"`
}

// wireLoad is one instance's load. Origin is the measuring node: implied by the sender in load events,
// explicit in state documents.
type wireLoad struct {
	ID       string `json:"i"`
	Origin   string `json:"o,omitempty"`
	LTime    uint64 `json:"t"`
	InFlight int    `json:"f"`
	Queued   int    `json:"q"`
	AtMs     int64  `json:"a"`
	// S is the instance's speed: in a load event only when it changed (receivers keep the last one), always
	// in state documents.
	S *wireSpeed `json:"s,omitempty"`
}

// wireSpeed is a Speed with short keys and rates rounded to 4 significant digits, to keep load events small.
type wireSpeed struct {
	P []float64       `json:"p,omitempty"`
	D float64         `json:"d,omitempty"`
	Q int64           `json:"q,omitempty"` // queue wait, µs
	K int64           `json:"k,omitempty"`
	S int64           `json:"s,omitempty"` // KV state bytes; absent from older nodes, which ignore it
	I float64         `json:"i,omitempty"`
	L []wireLinkSpeed `json:"l,omitempty"`
	N int64           `json:"n,omitempty"`
}

type wireLinkSpeed struct {
	F string    `json:"f"`
	B float64   `json:"b"`
	R int64     `json:"r,omitempty"` // µs
	N int64     `json:"n,omitempty"`
	P []float64 `json:"p,omitempty"`
}

func round4(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return f
}

func round4s(vs []float64) []float64 {
	var out []float64
	for _, v := range vs {
		out = append(out, round4(v))
	}
	return out
}

func speedToWire(s *Speed) *wireSpeed {
	w := &wireSpeed{D: round4(s.DecodeTPS), Q: s.QueueWait.Microseconds(), K: s.KVBytesPerToken, S: s.KVStateBytes, I: round4(s.IngestBPS), N: s.Samples}
	for _, v := range s.PrefillTPS {
		w.P = append(w.P, round4(v))
	}
	for _, l := range s.Ingress {
		w.L = append(w.L, wireLinkSpeed{F: string(l.From), B: round4(l.BytesPerSecond), R: l.RTT.Microseconds(), N: l.Samples, P: round4s(l.PrefillTPS)})
	}
	return w
}

func (w *wireSpeed) speed() (*Speed, error) {
	if len(w.P) > MaxSpeedBands || len(w.L) > MaxSpeedIngress {
		return nil, fmt.Errorf("speed with %d bands and %d links, over the limits of %d and %d", len(w.P), len(w.L), MaxSpeedBands, MaxSpeedIngress)
	}
	if w.Q < 0 || w.Q > int64(time.Duration(math.MaxInt64).Microseconds()) {
		return nil, fmt.Errorf("speed queue wait %dµs out of range", w.Q)
	}
	s := &Speed{PrefillTPS: w.P, DecodeTPS: w.D, QueueWait: time.Duration(w.Q) * time.Microsecond, KVBytesPerToken: w.K, KVStateBytes: w.S, IngestBPS: w.I, Samples: w.N}
	for _, l := range w.L {
		if l.R < 0 || l.R > int64(time.Duration(math.MaxInt64).Microseconds()) {
			return nil, fmt.Errorf("speed link RTT %dµs out of range", l.R)
		}
		if len(l.P) > MaxSpeedBands {
			return nil, fmt.Errorf("speed link with %d prefill bands, over the limit of %d", len(l.P), MaxSpeedBands)
		}
		s.Ingress = append(s.Ingress, LinkSpeed{From: NodeID(l.F), BytesPerSecond: l.B, RTT: time.Duration(l.R) * time.Microsecond, Samples: l.N, PrefillTPS: l.P})
	}
	return s, s.validate()
}

// msgHeader starts every event and query payload: the wire version and the sending node.
type msgHeader struct {
	V      int    `json:"v"`
	Sender string `json:"s"`
}

func newHeader(sender NodeID) msgHeader { return msgHeader{V: wireVersion, Sender: string(sender)} }

// decodeMsg unmarshals a payload into msg, whose header is h, and checks the header.
func decodeMsg(payload []byte, msg any, h *msgHeader) error {
	if err := json.Unmarshal(payload, msg); err != nil {
		return err
	}
	if h.V != wireVersion {
		return fmt.Errorf("wire version %d, want %d", h.V, wireVersion)
	}
	return checkID("sender", h.Sender)
}

type deltaMsg struct {
	msgHeader
	Entries []wireEntry `json:"e"`
}

type loadMsg struct {
	msgHeader
	Loads []wireLoad `json:"l"`
}

// digestMsg is the anti-entropy query and its answer.
type digestMsg struct {
	msgHeader
	Digest string `json:"d"`
}

// stateDoc is a node's full table state, as StateHandler serves it.
type stateDoc struct {
	V       int         `json:"v"`
	Node    string      `json:"node"`
	Clock   uint64      `json:"clock"`
	Digest  string      `json:"digest"`
	Entries []wireEntry `json:"entries"`
	Loads   []wireLoad  `json:"loads"`
}

func instanceToWire(in Instance) *wireInstance {
	return &wireInstance{
		ID: in.ID, Model: in.Model, Node: string(in.Node), Engine: in.Engine, Role: string(in.Role),
		Status: string(in.Status), KVEndpoint: in.KVEndpoint, Fingerprint: in.Fingerprint, Labels: in.Labels,
	}
}

func (w *wireInstance) instance() Instance {
	return Instance{
		ID: w.ID, Model: w.Model, Node: NodeID(w.Node), Engine: w.Engine, Role: Role(w.Role),
		Status: InstanceStatus(w.Status), KVEndpoint: w.KVEndpoint, Fingerprint: w.Fingerprint,
		Labels: maps.Clone(w.Labels),
	}
}

func linkToWire(l InstanceLink) *wireLink {
	return &wireLink{ID: l.LinkID, Prefill: l.PrefillInstances, Decode: l.DecodeInstances}
}

func (w *wireLink) link() InstanceLink {
	return InstanceLink{LinkID: w.ID, PrefillInstances: w.Prefill, DecodeInstances: w.Decode}
}

func entryHead[V any](table string, e lww.Entry[V]) wireEntry {
	w := wireEntry{Table: table, Key: e.Key, LTime: e.Rev.LTime, Origin: e.Rev.Origin, Deleted: e.Deleted}
	if e.Deleted {
		w.TTLms = max(e.TTL.Milliseconds(), 1)
	}
	return w
}

func instanceEntryToWire(e lww.Entry[Instance]) wireEntry {
	w := entryHead(tableInstances, e)
	if !e.Deleted {
		w.Inst = instanceToWire(e.Value)
	}
	return w
}

func linkEntryToWire(e lww.Entry[InstanceLink]) wireEntry {
	w := entryHead(tableLinks, e)
	if !e.Deleted {
		w.Link = linkToWire(e.Value)
	}
	return w
}

// decodedEntry is a validated wire entry for one of the two tables.
type decodedEntry struct {
	table string
	inst  lww.Entry[Instance]
	link  lww.Entry[InstanceLink]
	stub  bool
}

func (d decodedEntry) rev() lww.Rev {
	if d.table == tableInstances {
		return d.inst.Rev
	}
	return d.link.Rev
}

func (d decodedEntry) key() string {
	if d.table == tableInstances {
		return d.inst.Key
	}
	return d.link.Key
}

// decode validates a wire entry as strictly as a local write; maxTTL caps a tombstone's TTL.
func (w *wireEntry) decode(maxTTL time.Duration) (decodedEntry, error) {
	d, err := w.decodeInner(maxTTL)
	if err != nil {
		return decodedEntry{}, fmt.Errorf("entry %s/%q: %w", w.Table, w.Key, err)
	}
	return d, nil
}

func (w *wireEntry) decodeInner(maxTTL time.Duration) (decodedEntry, error) {
	if err := checkID("key", w.Key); err != nil {
		return decodedEntry{}, err
	}
	if err := checkID("origin", w.Origin); err != nil {
		return decodedEntry{}, err
	}
	if w.LTime == 0 {
		return decodedEntry{}, fmt.Errorf("zero Lamport time")
	}
	rev := lww.Rev{LTime: w.LTime, Origin: w.Origin}
	hasValue := w.Inst != nil || w.Link != nil
	switch {
	case w.Stub && (hasValue || w.Deleted):
		return decodedEntry{}, fmt.Errorf("a stub carries no value and is no delete")
	case w.Deleted && hasValue:
		return decodedEntry{}, fmt.Errorf("a delete carries a value")
	case w.Deleted && w.TTLms <= 0:
		return decodedEntry{}, fmt.Errorf("a delete without time to live")
	case !w.Stub && !w.Deleted && !hasValue:
		return decodedEntry{}, fmt.Errorf("no value")
	}
	ttl := min(time.Duration(min(w.TTLms, maxTTL.Milliseconds()))*time.Millisecond, maxTTL)
	d := decodedEntry{table: w.Table, stub: w.Stub}
	switch w.Table {
	case tableInstances:
		if w.Link != nil {
			return decodedEntry{}, fmt.Errorf("a link value in the instance table")
		}
		d.inst = lww.Entry[Instance]{Key: w.Key, Rev: rev, Deleted: w.Deleted, TTL: ttl}
		if w.Inst != nil {
			in := w.Inst.instance()
			if err := in.validate(); err != nil {
				return decodedEntry{}, err
			}
			if in.ID != w.Key {
				return decodedEntry{}, fmt.Errorf("instance id %q under key %q", in.ID, w.Key)
			}
			if string(in.Node) != w.Origin {
				return decodedEntry{}, fmt.Errorf("instance of node %q written by %q; only its node writes an instance", in.Node, w.Origin)
			}
			d.inst.Value = in
		}
	case tableLinks:
		if w.Inst != nil {
			return decodedEntry{}, fmt.Errorf("an instance value in the link table")
		}
		d.link = lww.Entry[InstanceLink]{Key: w.Key, Rev: rev, Deleted: w.Deleted, TTL: ttl}
		if w.Link != nil {
			l := w.Link.link()
			if err := l.validate(); err != nil {
				return decodedEntry{}, err
			}
			if l.LinkID != w.Key {
				return decodedEntry{}, fmt.Errorf("link id %q under key %q", l.LinkID, w.Key)
			}
			d.link.Value = l
		}
	default:
		return decodedEntry{}, fmt.Errorf("unknown table %q", w.Table)
	}
	return d, nil
}

// loadEntry is a load as a node holds it.
type loadEntry struct {
	origin NodeID
	ltime  uint64
	load   Load
	seen   time.Time // local receipt, for collecting loads of instances that never appear
}

func (w *wireLoad) decode(origin string) (string, loadEntry, error) {
	if w.Origin != "" {
		origin = w.Origin
	}
	if err := checkID("load instance", w.ID); err != nil {
		return "", loadEntry{}, err
	}
	if err := checkID("load origin", origin); err != nil {
		return "", loadEntry{}, err
	}
	if w.LTime == 0 {
		return "", loadEntry{}, fmt.Errorf("load of %q: zero Lamport time", w.ID)
	}
	ld := Load{InFlight: w.InFlight, Queued: w.Queued, UpdatedAt: time.UnixMilli(w.AtMs)}
	if w.S != nil {
		sp, err := w.S.speed()
		if err != nil {
			return "", loadEntry{}, fmt.Errorf("load of %q: %w", w.ID, err)
		}
		ld.Speed = sp
	}
	if err := ld.validate(); err != nil {
		return "", loadEntry{}, err
	}
	return w.ID, loadEntry{origin: NodeID(origin), ltime: w.LTime, load: ld}, nil
}

func loadToWire(id string, le loadEntry, withOrigin bool) wireLoad {
	w := wireLoad{ID: id, LTime: le.ltime, InFlight: le.load.InFlight, Queued: le.load.Queued, AtMs: le.load.UpdatedAt.UnixMilli()}
	if withOrigin {
		w.Origin = string(le.origin)
	}
	if le.load.Speed != nil {
		w.S = speedToWire(le.load.Speed)
	}
	return w
}

// pack encodes items into as few JSON payloads of the form {"v":1,"s":sender,"<field>":[...]} as fit budget
// bytes each. An item that alone does not fit is passed to shrink (if not nil) and tried once more; one that
// still does not fit is returned in dropped.
func pack[T any](sender, field string, items []T, budget int, shrink func(T) T) (payloads [][]byte, dropped []T) {
	head := fmt.Appendf(nil, `{"v":%d,"s":%q,%q:[`, wireVersion, sender, field)
	const tail = "]}"
	var cur bytes.Buffer
	n := 0
	flush := func() {
		if n > 0 {
			cur.WriteString(tail)
			payloads = append(payloads, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
		n = 0
	}
	for _, it := range items {
		raw, err := json.Marshal(it)
		if err == nil && len(head)+len(raw)+len(tail) > budget && shrink != nil {
			raw, err = json.Marshal(shrink(it))
		}
		if err != nil || len(head)+len(raw)+len(tail) > budget {
			dropped = append(dropped, it)
			continue
		}
		if n > 0 && cur.Len()+1+len(raw)+len(tail) > budget {
			flush()
		}
		if n == 0 {
			cur.Write(head)
		} else {
			cur.WriteByte(',')
		}
		cur.Write(raw)
		n++
	}
	flush()
	return payloads, dropped
}

// stubOf is the shrink function for deltas: the revision without the value.
func stubOf(w wireEntry) wireEntry {
	if w.Deleted {
		return w // a tombstone is already small; if it does not fit nothing will
	}
	return wireEntry{Table: w.Table, Key: w.Key, LTime: w.LTime, Origin: w.Origin, Stub: true}
}
