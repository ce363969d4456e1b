package lww

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func val(key string, lt uint64, origin, v string) Entry[string] {
	return Entry[string]{Key: key, Rev: Rev{LTime: lt, Origin: origin}, Value: v}
}

func del(key string, lt uint64, origin string) Entry[string] {
	return Entry[string]{Key: key, Rev: Rev{LTime: lt, Origin: origin}, Deleted: true, TTL: time.Minute}
}

func TestApplyOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		first   Entry[string]
		second  Entry[string]
		applied bool
		want    Entry[string]
	}{
		{"newer ltime wins", val("k", 1, "a", "x"), val("k", 2, "a", "y"), true, val("k", 2, "a", "y")},
		{"older ltime loses", val("k", 2, "a", "x"), val("k", 1, "b", "y"), false, val("k", 2, "a", "x")},
		{"tie broken by origin", val("k", 3, "a", "x"), val("k", 3, "b", "y"), true, val("k", 3, "b", "y")},
		{"tie broken by origin reversed", val("k", 3, "b", "y"), val("k", 3, "a", "x"), false, val("k", 3, "b", "y")},
		{"duplicate ignored", val("k", 3, "a", "x"), val("k", 3, "a", "x"), false, val("k", 3, "a", "x")},
		{"delete at same rev wins", val("k", 3, "a", "x"), del("k", 3, "a"), true, del("k", 3, "a")},
		{"value at same rev as delete loses", del("k", 3, "a"), val("k", 3, "a", "x"), false, del("k", 3, "a")},
		{"newer value beats delete", del("k", 3, "a"), val("k", 4, "a", "x"), true, val("k", 4, "a", "x")},
		{"older delete loses", val("k", 5, "a", "x"), del("k", 4, "z"), false, val("k", 5, "a", "x")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := New[string](10, time.Hour)
			if ok, err := m.Apply(tc.first, t0); !ok || err != nil {
				t.Fatalf("first Apply = %v, %v", ok, err)
			}
			ok, err := m.Apply(tc.second, t0)
			if err != nil || ok != tc.applied {
				t.Fatalf("second Apply = %v, %v; want %v", ok, err, tc.applied)
			}
			got, _ := m.Get("k", t0)
			if got != tc.want {
				t.Fatalf("Get = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestConvergence applies the same writes in many orders, with duplicates, and checks every replica ends
// equal: the property the cluster relies on when gossip reorders and repeats deltas.
func TestConvergence(t *testing.T) {
	t.Parallel()
	var writes []Entry[string]
	for i := range 60 {
		key := fmt.Sprintf("k%d", i%7)
		origin := fmt.Sprintf("n%d", i%3)
		lt := uint64(i%11 + 1)
		if i%5 == 0 {
			writes = append(writes, del(key, lt, origin))
		} else {
			writes = append(writes, val(key, lt, origin, fmt.Sprintf("v%d@%s", lt, origin)))
		}
	}
	ref := New[string](100, time.Hour)
	for _, w := range writes {
		if _, err := ref.Apply(w, t0); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		m := New[string](100, time.Hour)
		order := append(writes[:0:0], writes...)
		order = append(order, writes[:round%len(writes)]...) // duplicates
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, w := range order {
			if _, err := m.Apply(w, t0); err != nil {
				t.Fatal(err)
			}
		}
		if m.Digest() != ref.Digest() {
			t.Fatalf("round %d: digest differs", round)
		}
		if got, want := fmt.Sprint(m.All(t0)), fmt.Sprint(ref.All(t0)); got != want {
			t.Fatalf("round %d: entries differ\n got %s\nwant %s", round, got, want)
		}
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	m := New[string](2, time.Hour)
	for _, k := range []string{"a", "b"} {
		if _, err := m.Apply(val(k, 1, "n", k), t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Apply(val("c", 1, "n", "c"), t0); !errors.Is(err, ErrFull) {
		t.Fatalf("third key: err = %v, want ErrFull", err)
	}
	if ok, err := m.Apply(val("a", 2, "n", "a2"), t0); !ok || err != nil {
		t.Fatalf("update of a held key when full = %v, %v", ok, err)
	}
}

func TestTombstoneExpiry(t *testing.T) {
	t.Parallel()
	m := New[string](10, 10*time.Minute)
	tomb := del("k", 2, "a")
	tomb.TTL = time.Hour // capped to the map's 10 minutes
	if ok, _ := m.Apply(tomb, t0); !ok {
		t.Fatal("tombstone not applied")
	}
	got, _ := m.Get("k", t0.Add(4*time.Minute))
	if got.TTL != 6*time.Minute {
		t.Fatalf("remaining TTL = %v, want 6m", got.TTL)
	}
	// The remainder travels: a replica learning the tombstone now keeps it only 6 more minutes.
	other := New[string](10, 10*time.Minute)
	later := t0.Add(4 * time.Minute)
	if ok, _ := other.Apply(got, later); !ok {
		t.Fatal("forwarded tombstone not applied")
	}
	if n := other.Expire(later.Add(6 * time.Minute)); n != 1 {
		t.Fatalf("Expire dropped %d, want 1", n)
	}
	if ok, _ := m.Apply(val("k", 1, "b", "old"), t0); ok {
		t.Fatal("an older value resurrected a live tombstone")
	}
	if n := m.Expire(t0.Add(10 * time.Minute)); n != 1 {
		t.Fatalf("Expire dropped %d, want 1", n)
	}
	if len(m.All(t0.Add(10*time.Minute))) != 0 {
		t.Fatal("expired tombstone still listed")
	}
	if ok, _ := m.Apply(Entry[string]{Key: "z", Rev: Rev{1, "a"}, Deleted: true}, t0); ok {
		t.Fatal("a tombstone with no time left was applied")
	}
}

func TestDigestIgnoresTombstones(t *testing.T) {
	t.Parallel()
	a := New[string](10, time.Hour)
	b := New[string](10, time.Hour)
	for _, m := range []*Map[string]{a, b} {
		m.Apply(val("x", 1, "n", "x"), t0)
	}
	b.Apply(del("gone", 4, "n"), t0)
	if a.Digest() != b.Digest() {
		t.Fatal("a tombstone changed the digest")
	}
	b.Apply(val("x", 2, "n", "x2"), t0)
	if a.Digest() == b.Digest() {
		t.Fatal("a newer revision left the digest unchanged")
	}
}
