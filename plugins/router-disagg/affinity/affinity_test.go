package affinity

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func chain(seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	h := seed
	for i := range out {
		h = h*0x9E3779B97F4A7C15 + uint64(i) + 1
		out[i] = h
	}
	return out
}

func TestPositions(t *testing.T) {
	t.Parallel()
	ps := Positions(1 << 12)
	for p := range DenseBlocks {
		if ps[p] != p {
			t.Fatalf("position %d is not sampled densely: %v", p, ps[:DenseBlocks])
		}
	}
	if !slices.IsSorted(ps) {
		t.Fatal("positions are not ascending")
	}
	// 16 per doubling past the dense part: [32, 64) has 16, [64, 128) has 16, and so on.
	for lo := 32; lo < 1<<12; lo *= 2 {
		n := 0
		for _, p := range ps {
			if p+1 > lo && p+1 <= 2*lo {
				n++
			}
		}
		if n != perOctave {
			t.Errorf("lengths (%d, %d] have %d sampled positions, want %d", lo, 2*lo, n, perOctave)
		}
	}
	// The gap between consecutive positions is at most 1/16 of the depth: a depth is known to within ~6%.
	for k := 1; k < len(ps); k++ {
		if gap := ps[k] - ps[k-1]; gap > 1 && float64(gap) > float64(ps[k]+1)/16 {
			t.Errorf("gap %d before position %d", gap, ps[k])
		}
	}
	if got := Positions(0); len(got) != 0 {
		t.Errorf("Positions(0) = %v", got)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	long := chain(1, 100)
	tests := map[string]struct {
		record []struct {
			hashes []uint64
			inst   string
		}
		query []uint64
		want  Match
	}{
		"empty index": {query: long, want: Match{Blocks: 100}},
		"no hashes":   {record: recs(long, "a"), want: Match{}},
		"whole prompt again": {record: recs(long, "a"), query: long,
			want: Match{Blocks: 100, Hits: []Hit{{IDOf("a"), 100}}}},
		"shorter prompt, same start": {record: recs(long, "a"), query: long[:20],
			want: Match{Blocks: 20, Hits: []Hit{{IDOf("a"), 20}}}},
		"longer prompt, sampled depth": {record: recs(long[:51], "a"), query: long,
			want: Match{Blocks: 100, Hits: []Hit{{IDOf("a"), 50}}}}, // 49 is the last sampled position below 51
		"unrelated prompt": {record: recs(long, "a"), query: chain(2, 100), want: Match{Blocks: 100}},
		"two instances, deepest first": {record: append(recs(long[:10], "b"), recs(long, "a")...), query: long,
			want: Match{Blocks: 100, Hits: []Hit{{IDOf("a"), 100}, {IDOf("b"), 10}}}},
		"most recent first at the same depth": {record: append(recs(long, "a"), recs(long, "b")...), query: long,
			want: Match{Blocks: 100, Hits: []Hit{{IDOf("b"), 100}, {IDOf("a"), 100}}}},
		"only Ways instances per prefix": {
			record: append(append(append(append(recs(long[:5], "a"), recs(long[:5], "b")...), recs(long[:5], "c")...), recs(long[:5], "d")...), recs(long[:5], "e")...),
			query:  long[:5],
			want:   Match{Blocks: 5, Hits: []Hit{{IDOf("e"), 5}, {IDOf("d"), 5}, {IDOf("c"), 5}, {IDOf("b"), 5}}}},
		"re-recording moves an instance to the front": {record: append(append(recs(long[:5], "a"), recs(long[:5], "b")...), recs(long[:5], "a")...), query: long[:5],
			want: Match{Blocks: 5, Hits: []Hit{{IDOf("a"), 5}, {IDOf("b"), 5}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := New(1024, 4096)
			for _, r := range tc.record {
				x.Record(r.hashes, IDOf(r.inst))
			}
			got := x.Match(tc.query, nil)
			if got.Blocks != tc.want.Blocks || !slices.Equal(got.Hits, tc.want.Hits) {
				t.Errorf("Match = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func recs(h []uint64, inst string) []struct {
	hashes []uint64
	inst   string
} {
	return []struct {
		hashes []uint64
		inst   string
	}{{h, inst}}
}

func TestMaxBlocks(t *testing.T) {
	t.Parallel()
	x := New(1024, 40)
	h := chain(3, 100)
	x.Record(h, IDOf("a"))
	m := x.Match(h, nil)
	if m.Blocks != 40 || m.Cached(IDOf("a")) != 40 || m.Fraction(IDOf("a")) != 1 {
		t.Errorf("Match = %+v, want 40 of 40 blocks on a", m)
	}
}

func TestEviction(t *testing.T) {
	t.Parallel()
	x := New(64, 4096)
	old := chain(1, 32) // 32 entries
	x.Record(old, IDOf("a"))
	for i := range 10 {
		x.Record(chain(uint64(100+i), 8), IDOf("b")) // 80 more entries: the old prompt goes
	}
	if n := x.Len(); n != 64 {
		t.Errorf("Len = %d, want the capacity 64", n)
	}
	if m := x.Match(old, nil); len(m.Hits) != 0 {
		t.Errorf("evicted prompt still matches: %+v", m)
	}
	recent := chain(109, 8)
	if m := x.Match(recent, nil); m.Cached(IDOf("b")) != 8 {
		t.Errorf("recent prompt lost: %+v", m)
	}
}

func TestEvictionKeepsShortPrefixesLonger(t *testing.T) {
	t.Parallel()
	// A prompt's short prefixes are touched last, so eviction takes its long end first and a match still
	// finds the start: presence stays monotone along the prompt.
	x := New(40, 4096)
	h := chain(5, 32)
	x.Record(h, IDOf("a"))
	x.Record(chain(6, 16), IDOf("b")) // evicts 8 of a's entries: the 8 deepest
	m := x.Match(h, nil)
	if got := m.Cached(IDOf("a")); got != 24 {
		t.Errorf("a holds %d leading blocks after eviction, want 24", got)
	}
}

func TestIDOf(t *testing.T) {
	t.Parallel()
	if IDOf("") != 0 {
		t.Error("the empty id is not 0")
	}
	a, again := IDOf("a"), IDOf(string([]byte{'a'}))
	if a == 0 || a != again || a == IDOf("b") {
		t.Error("IDOf is not a stable, non-zero hash")
	}
}

func TestNilIndex(t *testing.T) {
	t.Parallel()
	var x *Index
	x.Record(chain(1, 10), IDOf("a"))
	if m := x.Match(chain(1, 10), nil); m.Blocks != 0 || len(m.Hits) != 0 || x.Len() != 0 {
		t.Errorf("nil index matched %+v", m)
	}
	if New(0, 10) != nil || New(10, 0) != nil {
		t.Error("New with a zero size is not nil")
	}
}

func TestMaxHits(t *testing.T) {
	t.Parallel()
	x := New(1<<12, 4096)
	h := chain(1, 64)
	// 64 instances, each sent a different length of the same prompt, the longest first so that every depth
	// keeps its own instance among the Ways most recent.
	for i := 63; i >= 0; i-- {
		x.Record(h[:i+1], IDOf(fmt.Sprintf("i%02d", i)))
	}
	m := x.Match(h, nil)
	if len(m.Hits) != MaxHits {
		t.Errorf("%d hits, want %d", len(m.Hits), MaxHits)
	}
	for k := 1; k < len(m.Hits); k++ {
		if m.Hits[k].Blocks > m.Hits[k-1].Blocks {
			t.Fatalf("hits not deepest first: %+v", m.Hits)
		}
	}
}

func TestMatchReusesDst(t *testing.T) {
	x := New(1024, 4096)
	h := chain(1, 10)
	x.Record(h, IDOf("a"))
	dst := make([]Hit, 0, 8)
	m := x.Match(h, dst)
	if len(m.Hits) != 1 || &m.Hits[0] != &dst[:1][0] {
		t.Errorf("Match did not reuse dst")
	}
	if allocs := testing.AllocsPerRun(100, func() { x.Match(h, dst) }); allocs != 0 {
		t.Errorf("Match allocates %v times with a reused dst", allocs)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	x := New(128, 4096)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []Hit
			for i := range 500 {
				h := chain(uint64((g+i)%13), 10+i%50)
				x.Record(h, IDOf(fmt.Sprintf("i%d", g)))
				dst = x.Match(h, dst).Hits
			}
		}()
	}
	wg.Wait()
	if n := x.Len(); n > 128 {
		t.Errorf("Len = %d over the capacity", n)
	}
	// The list and the map agree.
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for i := x.head; i >= 0; i = x.nodes[i].next {
		if x.slots[x.nodes[i].hash] != i {
			t.Fatalf("node %d is not in the map under its hash", i)
		}
		n++
	}
	if n != len(x.slots) {
		t.Errorf("list holds %d nodes, map %d", n, len(x.slots))
	}
}

func BenchmarkMatch(b *testing.B) {
	for _, blocks := range []int{16, 128, 2048} {
		x := New(1<<14, 4096)
		h := chain(1, blocks)
		x.Record(h, IDOf("a"))
		miss := chain(2, blocks)
		var dst []Hit
		b.Run(fmt.Sprintf("hit-%d", blocks), func(b *testing.B) {
			for b.Loop() {
				dst = x.Match(h, dst).Hits
			}
		})
		b.Run(fmt.Sprintf("miss-%d", blocks), func(b *testing.B) {
			for b.Loop() {
				dst = x.Match(miss, dst).Hits
			}
		})
		b.Run(fmt.Sprintf("record-%d", blocks), func(b *testing.B) {
			for b.Loop() {
				x.Record(h, IDOf("a"))
			}
		})
	}
}
