package prefixcache

import (
	"slices"
	"testing"
)

// cutKV is a Value that can be restored only at its cuts, as a backend cache with linear layers.
type cutKV struct {
	fakeKV
	cuts []int
}

func (c *cutKV) Cuts() []int { return c.cuts }

// kv is a Value of 10 bytes with the given cuts; nil cuts: a plain Value (every length).
func kv(released *int, cuts ...int) Value {
	if cuts == nil {
		return &fakeKV{10, released}
	}
	return &cutKV{fakeKV{10, released}, cuts}
}

func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// TestLookupReducesToCut: an entry's shared prefix counts up to its largest cut within it (and within max);
// an entry without one is no hit; values without cuts count every length.
func TestLookupReducesToCut(t *testing.T) {
	t.Parallel()
	released := 0
	c := New[Value](1 << 20)
	a := seq(300, 0)
	b := cat(seq(150, 0), seq(100, 10000)) // shares 150 tokens with a
	d := seq(50, 20000)
	c.Insert(a, kv(&released, 0, 128, 256, 300))
	c.Insert(b, kv(&released, 0, 64, 250))
	c.Insert(d, kv(&released)) // every length
	for _, tc := range []struct {
		name  string
		query []int32
		max   int
		want  int
	}{
		{"exact", a, 1000, 300},
		{"capped by max", a, 299, 256},
		{"between cuts", cat(seq(200, 0), []int32{-1}), 1000, 128},
		{"extends a", cat(a, []int32{7, 8}), 1000, 300},
		{"a's cut beats b's", cat(seq(150, 0), seq(60, 10000)), 1000, 128},
		{"b's end", cat(b, []int32{5}), 1000, 250},
		{"b's end capped", cat(b, []int32{5}), 249, 128},
		{"below every cut but 0", seq(60, 0), 1000, 0},
		{"no cuts: any length", seq(30, 20000), 1000, 30},
		{"no cuts: capped", seq(50, 20000), 29, 29},
		{"miss", seq(10, 5000), 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n := c.Lookup(tc.query, tc.max)
			if n != tc.want || (h == nil) != (tc.want == 0) {
				t.Errorf("matched %d (handle %v), want %d", n, h != nil, tc.want)
			}
			if h != nil {
				h.Release()
			}
		})
	}
	if st := c.Stats(); st.Hits != 9 || st.Misses != 2 || st.Entries != 3 || released != 0 {
		t.Errorf("stats %+v, %d released", st, released)
	}
}

// TestInsertWithCuts: a new entry covered by a longer one is released only when the longer one can cut where it
// ends; an entry that is a prefix of a new one is dropped only when the new one keeps every cut it has.
func TestInsertWithCuts(t *testing.T) {
	t.Parallel()
	type ins struct {
		tokens []int32
		cuts   []int // nil: a Value without cuts
	}
	for _, tc := range []struct {
		name     string
		inserts  []ins
		released int
		entries  int64
	}{
		{"covered at a cut", []ins{{seq(300, 0), []int{0, 200, 300}}, {seq(200, 0), []int{0, 200}}}, 1, 1},
		{"covered between cuts", []ins{{seq(300, 0), []int{0, 200, 300}}, {seq(150, 0), []int{0, 150}}}, 0, 2},
		{"covered by a value without cuts", []ins{{seq(300, 0), nil}, {seq(150, 0), []int{0, 150}}}, 1, 1},
		{"the same tokens", []ins{{seq(100, 0), []int{0, 100}}, {seq(100, 0), []int{0, 100}}}, 1, 1},
		{"superseded by a clone", []ins{{seq(100, 0), []int{0, 64, 100}}, {seq(200, 0), []int{0, 64, 100, 200}}}, 1, 1},
		{"a cut the new one lacks", []ins{{seq(100, 0), []int{0, 64, 100}}, {seq(200, 0), []int{0, 64, 200}}}, 0, 2},
		{"every length the new one lacks", []ins{{seq(100, 0), nil}, {seq(200, 0), []int{0, 64, 100, 200}}}, 0, 2},
		{"superseded by a value without cuts", []ins{{seq(100, 0), []int{0, 100}}, {seq(200, 0), nil}}, 1, 1},
		{"every length kept", []ins{{seq(3, 0), nil}, {seq(5, 0), []int{0, 1, 2, 3, 5}}}, 1, 1},
		{"unrelated", []ins{{seq(100, 0), []int{0, 100}}, {seq(100, 500), []int{0, 100}}}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			released := 0
			c := New[Value](1 << 20)
			for _, in := range tc.inserts {
				c.Insert(in.tokens, kv(&released, in.cuts...))
			}
			if st := c.Stats(); released != tc.released || st.Entries != tc.entries {
				t.Errorf("released %d, entries %d; want %d, %d", released, st.Entries, tc.released, tc.entries)
			}
		})
	}
}

func TestCutBelow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cuts []int
		n    int
		want int
	}{
		{nil, 5, 5},
		{[]int{0, 4, 9}, 9, 9},
		{[]int{0, 4, 9}, 8, 4},
		{[]int{0, 4, 9}, 100, 9},
		{[]int{3, 4}, 2, -1},
		{[]int{}, 2, -1},
	} {
		if got := cutBelow(tc.cuts, tc.n); got != tc.want {
			t.Errorf("cutBelow(%v, %d) = %d, want %d", tc.cuts, tc.n, got, tc.want)
		}
	}
}
