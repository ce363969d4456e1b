package lww

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"time"
)

// Rev orders the writes of one key: a Lamport time, then the writer's node ID.
type Rev struct {
	LTime  uint64 `json:"t"`
	Origin string `json:"o"`
}

// Compare returns -1, 0 or +1 as r is older than, equal to or newer than o.
func (r Rev) Compare(o Rev) int {
	if c := cmp.Compare(r.LTime, o.LTime); c != 0 {
		return c
	}
	return cmp.Compare(r.Origin, o.Origin)
}

// Entry is one key's current state: a value, or a tombstone when Deleted.
type Entry[V any] struct {
	Key     string
	Rev     Rev
	Deleted bool
	// Value is the zero value for tombstones.
	Value V
	// TTL is, for a tombstone, how long it has left to live. Apply takes it from the sender; Get and All
	// report what is left now.
	TTL time.Duration
}

// Supersedes reports whether e replaces old: a newer revision, or a delete at the same revision.
func (e Entry[V]) Supersedes(old Entry[V]) bool {
	switch c := e.Rev.Compare(old.Rev); {
	case c > 0:
		return true
	case c < 0:
		return false
	default:
		return e.Deleted && !old.Deleted
	}
}

// ErrFull is returned by Apply when a new key would exceed the map's capacity.
var ErrFull = errors.New("lww: map is full")

type item[V any] struct {
	e       Entry[V]
	expires time.Time // tombstones only
}

// Map is a last-writer-wins map from string keys to values of type V.
type Map[V any] struct {
	items    map[string]*item[V]
	capacity int
	maxTTL   time.Duration

	digestOK bool
	digest   [sha256.Size]byte
}

// New returns an empty map holding at most capacity keys (tombstones included) whose tombstones live at most
// maxTTL.
func New[V any](capacity int, maxTTL time.Duration) *Map[V] {
	return &Map[V]{items: make(map[string]*item[V]), capacity: capacity, maxTTL: maxTTL}
}

// Len returns the number of keys held, tombstones included.
func (m *Map[V]) Len() int { return len(m.items) }

// Get returns the entry for key, which may be a tombstone.
func (m *Map[V]) Get(key string, now time.Time) (Entry[V], bool) {
	it, ok := m.items[key]
	if !ok {
		return Entry[V]{}, false
	}
	return it.view(now), true
}

func (it *item[V]) view(now time.Time) Entry[V] {
	e := it.e
	if e.Deleted {
		e.TTL = max(it.expires.Sub(now), 0)
	}
	return e
}

// Apply merges e into the map and reports whether it changed anything. An entry that does not supersede the
// current one is ignored; a tombstone without time left to live is ignored; a new key beyond the map's
// capacity is refused with ErrFull.
func (m *Map[V]) Apply(e Entry[V], now time.Time) (bool, error) {
	if e.Deleted {
		var zero V
		e.Value = zero
		e.TTL = min(e.TTL, m.maxTTL)
		if e.TTL <= 0 {
			return false, nil
		}
	} else {
		e.TTL = 0
	}
	old, ok := m.items[e.Key]
	if ok && !e.Supersedes(old.e) {
		return false, nil
	}
	if !ok && len(m.items) >= m.capacity {
		return false, ErrFull
	}
	it := &item[V]{e: e}
	if e.Deleted {
		it.expires = now.Add(e.TTL)
	}
	m.items[e.Key] = it
	m.digestOK = false
	return true, nil
}

// Expire drops the tombstones whose time is up and returns how many it dropped.
func (m *Map[V]) Expire(now time.Time) int {
	n := 0
	for k, it := range m.items {
		if it.e.Deleted && !now.Before(it.expires) {
			delete(m.items, k)
			n++
		}
	}
	return n
}

// Live returns the entries that hold values, sorted by key.
func (m *Map[V]) Live() []Entry[V] {
	out := make([]Entry[V], 0, len(m.items))
	for _, it := range m.items {
		if !it.e.Deleted {
			out = append(out, it.e)
		}
	}
	sortByKey(out)
	return out
}

// All returns every entry, tombstones with their remaining TTL included, sorted by key.
func (m *Map[V]) All(now time.Time) []Entry[V] {
	out := make([]Entry[V], 0, len(m.items))
	for _, it := range m.items {
		if it.e.Deleted && !now.Before(it.expires) {
			continue
		}
		out = append(out, it.view(now))
	}
	sortByKey(out)
	return out
}

func sortByKey[V any](es []Entry[V]) {
	slices.SortFunc(es, func(a, b Entry[V]) int { return cmp.Compare(a.Key, b.Key) })
}

// Digest is a hash of the live keys and their revisions. Two maps with equal digests hold the same values
// (each writer writes at most one value per revision). Tombstones are left out: they expire at different
// moments on different nodes, and a key that is absent and a key that is deleted mean the same thing.
func (m *Map[V]) Digest() [sha256.Size]byte {
	if m.digestOK {
		return m.digest
	}
	h := sha256.New()
	var n [8]byte
	for _, e := range m.Live() {
		for _, s := range []string{e.Key, e.Rev.Origin} {
			binary.BigEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
		binary.BigEndian.PutUint64(n[:], e.Rev.LTime)
		h.Write(n[:])
	}
	h.Sum(m.digest[:0])
	m.digestOK = true
	return m.digest
}
