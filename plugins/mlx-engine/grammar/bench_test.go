package grammar

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkIndex builds the Llama 3 index (128k tokens) and reports its memory.
func BenchmarkIndex(b *testing.B) {
	idx := realIndex(b, "llama3")
	v := idx // keep the fixture's tokenizer loaded; rebuild from its vocabulary
	vocab := Vocabulary{Tokens: make([][]byte, v.size), Special: map[string]int32{}, EOS: v.EOS()}
	for id := range int32(v.size) {
		if t := v.bytesOf(id); t != nil {
			vocab.Tokens[id] = slices.Clone(t)
		}
	}
	for text, id := range v.special {
		vocab.Special[text] = id
		vocab.Tokens[id] = nil
	}
	b.ResetTimer()
	var built *Index
	for b.Loop() {
		var err error
		if built, err = NewIndex(vocab); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(built.MemoryBytes())/(1<<20), "index-MiB")
}

// BenchmarkMask is one decode step (Mask, then Accept of a random allowed token) on the Llama 3 vocabulary
// (128k tokens), walking generations from start to end over and over: "nested" is
// testdata/schemas/nested.json (objects in arrays, enums, required fields, dates), "json_object" is
// AnyJSONObject, whose nested values are rules (so some tokens are checked against the stack at run time).
// Masks are cached per grammar state, as they are in a server that keeps the grammar in its Cache; the cold
// cost of a state is reported apart (cold-ms/state: Precompute of every state over the number of states).
func BenchmarkMask(b *testing.B) {
	anyObject, err := AnyJSONObject(Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		root func(testing.TB) Node
	}{
		{"nested", func(t testing.TB) Node {
			n, err := JSONSchema(readSchema(t, "nested.json"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}},
		{"json_object", func(testing.TB) Node { return anyObject }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			idx := realIndex(b, "llama3")
			g, err := Compile(bc.root(b))
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			g.Precompute(idx)
			cold := time.Since(start)
			m, err := g.NewMatcher(idx)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var mask []uint64
			lat := make([]time.Duration, 0, 1<<16)
			runtime.GC()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				mask = m.Mask(mask)
				t1 := time.Now()
				// The pick stands in for the sampler and is not timed.
				id := pickAllowed(mask, rng)
				t2 := time.Now()
				if err := m.Accept(id); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, t1.Sub(t0)+time.Since(t2))
				// Restart when done, and cut endless generations (strings and arrays are unbounded) so that
				// every part of the grammar keeps being visited.
				if m.Done() || idx.isEOS(id) || len(lat)%500 == 0 {
					m.Reset()
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(cold.Microseconds())/1e3/float64(g.States()), "cold-ms/state")
			b.ReportMetric(float64(g.States()), "states")
			b.ReportMetric(float64(g.MaskMemoryBytes(idx))/(1<<20), "masks-MiB")
		})
	}
}

// BenchmarkMaskFirstGeneration is BenchmarkMask without the warm cache: every generation runs on a freshly
// compiled grammar, so each state's mask is computed when the walk first reaches it, as for the first request
// with a new schema. Only Mask and Accept are timed.
func BenchmarkMaskFirstGeneration(b *testing.B) {
	idx := realIndex(b, "llama3")
	schema := readSchema(b, "nested.json")
	rng := rand.New(rand.NewPCG(3, 4))
	var lat []time.Duration
	var mask []uint64
	steps := 0
	for b.Loop() {
		b.StopTimer()
		g := compileSchema(b, schema, Options{})
		m, err := g.NewMatcher(idx)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for step := 0; step < 2000 && !m.Done(); step++ {
			t0 := time.Now()
			mask = m.Mask(mask)
			t1 := time.Now()
			id := pickAllowed(mask, rng)
			t2 := time.Now()
			if idx.isEOS(id) {
				break
			}
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, t1.Sub(t0)+time.Since(t2))
			steps++
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(steps)/float64(b.N), "steps/gen")
}

// BenchmarkMaskFit is BenchmarkMask with a budget: every generation may take the shortest completion and 16
// tokens more, so Fit steers each one to close, walking tokens one by one on its last steps. Mask and Fit
// are timed together.
func BenchmarkMaskFit(b *testing.B) {
	idx := realIndex(b, "llama3")
	g := compileSchema(b, readSchema(b, "nested.json"), Options{})
	g.Precompute(idx)
	m, err := g.NewMatcher(idx)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var mask []uint64
	var lat []time.Duration
	steered := 0
	budget := m.Shortest() + 16
	left := budget
	for b.Loop() {
		t0 := time.Now()
		mask = m.Mask(mask)
		if m.Fit(mask, left) {
			steered++
		}
		t1 := time.Now()
		id := pickAllowed(mask, rng)
		if err := m.Accept(id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, t1.Sub(t0))
		if left--; m.Done() || idx.isEOS(id) || left == 0 {
			if !m.Complete() {
				b.Fatalf("incomplete with the budget spent")
			}
			m.Reset()
			left = budget
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(steered)/float64(len(lat)), "steered/step")
}

// pickAllowed picks an allowed token uniformly: count the set bits, then find the k-th.
func pickAllowed(mask []uint64, rng *rand.Rand) int32 {
	n := 0
	for _, v := range mask {
		n += bits.OnesCount64(v)
	}
	if n == 0 {
		return -1
	}
	k := rng.IntN(n)
	for w, v := range mask {
		c := bits.OnesCount64(v)
		if k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			v &= v - 1
		}
		return int32(w*64 + bits.TrailingZeros64(v))
	}
	return -1
}
