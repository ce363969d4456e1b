package grammar

import (
	"errors"
	"testing"
)

// FuzzJSONSchema feeds arbitrary documents to the schema compiler: it must never panic, every refusal must be
// an error, work must stay bounded, and whatever compiles must be a usable grammar. Work is bounded by counts,
// not by the clock: the schema's expansion (maxSchemaWork), the NFA (maxNFAStates), determinizing
// (maxDeterminizeWork) and the automaton (MaxStates) each refuse with ErrTooLarge past their budget, so the
// check is that a compiled grammar is within MaxStates. (A wall-clock bound here failed CI: the largest seed
// compiles in 2 s, and in 28 s under the race detector beside other packages; a hang is go test's timeout.)
func FuzzJSONSchema(f *testing.F) {
	for _, name := range schemaNames(f) {
		f.Add(readSchema(f, name))
	}
	for _, s := range []string{
		`{"type":"string","pattern":"^(a|b){2,5}[^x]*$"}`,
		`{"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`,
		`{"anyOf":[{"type":"string","maxLength":3},{"enum":[1,"a",null]}]}`,
		`{"type":"object","properties":{"a":{"type":"array","prefixItems":[{"const":1}],"minItems":1}},"required":["a"]}`,
		`{"type":"string","pattern":"(((a{100}){100}){100})"}`,
		`{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":4096}`,
	} {
		f.Add([]byte(s))
	}
	idx := syntheticIndex(f)
	f.Fuzz(func(t *testing.T, schema []byte) {
		n, err := JSONSchema(schema, Options{})
		if err != nil {
			return
		}
		g, err := Compile(n)
		if err != nil {
			if !errors.Is(err, ErrNoMatch) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Compile: %v", err)
			}
			return
		}
		if g.States() > MaxStates {
			t.Fatalf("%d states", g.States())
		}
		m, err := g.NewMatcher(idx)
		if err != nil {
			t.Fatal(err)
		}
		mask := m.Mask(nil)
		if id := firstSet(mask); id >= 0 {
			if err := m.Accept(id); err != nil {
				t.Fatalf("the mask allows %d but Accept says %v", id, err)
			}
		}
		// With a budget of exactly the shortest completion, what Fit leaves must complete the output in it.
		m.Reset()
		budget := m.Shortest()
		if budget > 64 {
			return
		}
		for left := budget; left > 0 && !m.Done(); left-- {
			mask = m.Mask(mask)
			m.Fit(mask, left)
			id := firstSet(mask)
			if id < 0 {
				t.Fatalf("nothing allowed with %d of %d left", left, budget)
			}
			if err := m.Accept(id); err != nil {
				t.Fatalf("Fit leaves %d but Accept says %v", id, err)
			}
		}
		if !m.Complete() {
			t.Fatalf("incomplete after a budget of %d, the shortest completion", budget)
		}
	})
}

func firstSet(mask []uint64) int32 {
	if ids := maskIDs(mask); len(ids) > 0 {
		return ids[0]
	}
	return -1
}
