package prefixcache

import (
	"math/rand/v2"
	"testing"
)

// fakeKV is a Value that records its release.
type fakeKV struct {
	size     int64
	released *int
}

func (f *fakeKV) Bytes() int64 { return f.size }
func (f *fakeKV) Release()     { *f.released++ }

func seq(n int, start int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = start + int32(i)
	}
	return out
}

func TestLookupLongestPrefix(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](1 << 20)
	a := seq(300, 0)
	b := append(seq(150, 0), seq(100, 10000)...) // shares 150 tokens with a
	c.Insert(a, &fakeKV{10, &released})
	c.Insert(b, &fakeKV{10, &released})

	cases := []struct {
		name  string
		query []int32
		max   int
		want  int
	}{
		{"exact", a, 1000, 300},
		{"capped by max", a, 299, 299},
		{"extends a", append(append([]int32{}, a...), 7, 8), 1000, 300},
		{"partial block", append(seq(130, 0), 99999), 1000, 130},
		{"b wins", append(seq(150, 0), seq(60, 10000)...), 1000, 210},
		{"miss", seq(10, 5000), 1000, 0},
	}
	for _, cs := range cases {
		h, n := c.Lookup(cs.query, cs.max)
		if n != cs.want {
			t.Errorf("%s: matched %d, want %d", cs.name, n, cs.want)
		}
		if h != nil {
			h.Release()
		}
	}
	st := c.Stats()
	if st.Hits != 5 || st.Misses != 1 || st.Entries != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestInsertSupersedesPrefixes(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](1 << 20)
	c.Insert(seq(100, 0), &fakeKV{10, &released})
	c.Insert(seq(200, 0), &fakeKV{20, &released}) // the first is a prefix: dropped
	if released != 1 || c.Stats().Entries != 1 || c.Stats().Bytes != 20 {
		t.Errorf("released %d, stats %+v", released, c.Stats())
	}
	c.Insert(seq(150, 0), &fakeKV{15, &released}) // covered by the second: released at once
	if released != 2 || c.Stats().Entries != 1 {
		t.Errorf("released %d, stats %+v", released, c.Stats())
	}
}

func TestEvictionLRUAndPins(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](100)
	c.Insert(seq(10, 0), &fakeKV{40, &released})
	c.Insert(seq(10, 100), &fakeKV{40, &released})
	h, _ := c.Lookup(seq(10, 0), 10) // pins the first and makes it most recent
	c.Insert(seq(10, 200), &fakeKV{40, &released})
	// Over capacity: the LRU unpinned entry (the second) goes.
	if released != 1 || c.Stats().Evictions != 1 {
		t.Fatalf("released %d, stats %+v", released, c.Stats())
	}
	if _, n := c.Lookup(seq(10, 100), 10); n != 0 {
		t.Errorf("evicted entry still found")
	}
	c.Clear() // the pinned entry survives until released
	if released != 2 {
		t.Errorf("released %d after clear, want 2 (one pinned)", released)
	}
	h.Release()
	if released != 3 {
		t.Errorf("released %d after unpin, want 3", released)
	}
	c.Insert(seq(5, 0), &fakeKV{1000, &released}) // larger than the cache
	if released != 4 {
		t.Errorf("oversized insert not released")
	}
}

// TestRandomAgainstNaive compares lookups with a brute-force longest-common-prefix search.
func TestRandomAgainstNaive(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	released := 0
	c := New[*fakeKV](1 << 40)
	var all [][]int32
	gen := func() []int32 {
		var s []int32
		if len(all) > 0 && rng.IntN(3) > 0 {
			base := all[rng.IntN(len(all))]
			s = append(s, base[:rng.IntN(len(base)+1)]...)
		}
		for n := rng.IntN(300); n > 0; n-- {
			s = append(s, int32(rng.IntN(4)))
		}
		return s
	}
	for range 60 {
		s := gen()
		if len(s) > 0 {
			c.Insert(s, &fakeKV{1, &released})
			all = append(all, s)
		}
	}
	for range 200 {
		q := gen()
		want := 0
		for _, e := range c.entries {
			n := 0
			for n < len(e.tokens) && n < len(q) && e.tokens[n] == q[n] {
				n++
			}
			want = max(want, n)
		}
		h, got := c.Lookup(q, len(q)+1)
		if got != want {
			t.Fatalf("lookup of %d tokens matched %d, brute force %d", len(q), got, want)
		}
		if h != nil {
			h.Release()
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	released := 0
	c := New[*fakeKV](1 << 40)
	for i := range 100 {
		c.Insert(append(seq(2000, 0), seq(8000, int32(100000*(i+1)))...), &fakeKV{1, &released})
	}
	q := append(seq(2000, 0), seq(8000, 100000*50)...)
	b.ResetTimer()
	for range b.N {
		h, _ := c.Lookup(q, len(q)-1)
		h.Release()
	}
}

// TestHashCollisionIsNotAHit: the block hashes are public, so two prompts whose hashes collide (forged here)
// must not share KV: the matched tokens are compared.
func TestHashCollisionIsNotAHit(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](1 << 20)
	a, b := seq(4*blockSize, 0), seq(4*blockSize, 5000)
	c.Insert(a, &fakeKV{10, &released})
	c.entries[0].hashes = blockHashes(b) // a forged collision: a's entry claims b's hashes
	if h, n := c.Lookup(b, len(b)-1); h != nil || n != 0 {
		t.Fatalf("a forged collision gave a hit of %d tokens", n)
	}
}

// TestLookupFuncSkipsUnrestorable: an entry whose shared prefix the predicate refuses (a sliding-window cache
// that has moved past it) is no hit; a shorter prefix of another entry that it accepts wins instead.
func TestLookupFuncSkipsUnrestorable(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](1 << 20)
	long := &fakeKV{10, &released}
	short := &fakeKV{11, &released}
	c.Insert(seq(300, 0), long)                             // shares 200 with the query, but cannot restore it
	c.Insert(append(seq(120, 0), seq(20, 50000)...), short) // shares 120, and can
	query := append(seq(200, 0), seq(50, 90000)...)
	ok := func(v *fakeKV, n int) bool { return v != long }
	h, n := c.LookupFunc(query, len(query)-1, ok)
	if h == nil || n != 120 || h.Value() != short {
		t.Fatalf("LookupFunc = %v, %d; want the 120-token hit on the restorable entry", h, n)
	}
	h.Release()
	if h, n := c.LookupFunc(query, len(query)-1, func(*fakeKV, int) bool { return false }); h != nil || n != 0 {
		t.Errorf("nothing restorable: %v, %d; want a miss", h, n)
	}
	if h, n := c.Lookup(query, len(query)-1); h == nil || n != 200 {
		t.Errorf("Lookup = %v, %d; want the 200-token hit", h, n)
	} else {
		h.Release()
	}
	if st := c.Stats(); st.Hits != 2 || st.Misses != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestInsertKeepsUnrestorablePrefix: with SetRestorable, an entry that is a prefix of a new one stays when the
// new one cannot be restored at its length (a prompt's snapshot beside the generation that moved its windows
// on), a new entry covered by a longer one is kept when the longer one cannot stand in for it, and Lookup
// applies the predicate.
func TestInsertKeepsUnrestorablePrefix(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[*fakeKV](1 << 20)
	// A value restores at n iff n >= its size (the sizes stand for where its windows begin).
	c.SetRestorable(func(v *fakeKV, n int) bool { return n >= int(v.size) })
	prompt, gen := seq(100, 0), seq(160, 0)
	c.Insert(prompt, &fakeKV{90, &released})
	c.Insert(gen, &fakeKV{150, &released})
	if st := c.Stats(); st.Entries != 2 || released != 0 {
		t.Fatalf("the prompt's entry was dropped: %+v, %d released", st, released)
	}
	if h, n := c.Lookup(append(seq(120, 0), 7), 1000); h == nil || n != 100 || h.Value().size != 90 {
		t.Errorf("Lookup sharing 120 = %d; want the prompt's 100", n)
	} else {
		h.Release()
	}
	c.Insert(seq(145, 0), &fakeKV{120, &released}) // covered by gen, which cannot restore 145
	if st := c.Stats(); st.Entries != 3 || released != 0 {
		t.Errorf("a prefix gen cannot restore was not kept: %+v, %d released", st, released)
	}
	c.Insert(seq(165, 0), &fakeKV{100, &released}) // restores everything above 100: supersedes all three
	if st := c.Stats(); st.Entries != 1 || released != 3 {
		t.Errorf("entries the new one can restore were kept: %+v, %d released", st, released)
	}
}
