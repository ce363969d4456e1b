package grammar

import (
	"math/rand/v2"
	"testing"
)

// TestRandomWalks is the guarantee: whatever a sampler picks among the allowed tokens, once the matcher is
// done the output validates against the schema (checked with santhosh-tekuri/jsonschema, formats asserted).
func TestRandomWalks(t *testing.T) {
	t.Parallel()
	vocabs := []struct {
		name  string
		walks int
		index func(testing.TB) *Index
	}{
		{"synthetic", 40, syntheticIndex},
		{"llama3", 8, func(t testing.TB) *Index { return realIndex(t, "llama3") }},
		{"qwen3", 4, func(t testing.TB) *Index { return realIndex(t, "qwen3") }},
		{"llama2", 4, func(t testing.TB) *Index { return realIndex(t, "llama2") }},
	}
	for _, name := range schemaNames(t) {
		schema := readSchema(t, name)
		for _, ws := range []int{0, 3} {
			opts := Options{Whitespace: ws}
			g := compileSchema(t, schema, opts)
			val := validator(t, schema)
			for _, v := range vocabs {
				t.Run(name+"/"+v.name+"/ws"+string(rune('0'+max(ws, 1))), func(t *testing.T) {
					idx := v.index(t)
					rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(ws)))
					finished := 0
					for range v.walks {
						out, done := walk(t, g, idx, rng, 3000)
						if !done {
							continue
						}
						finished++
						if err := validate(t, val, out); err != nil {
							t.Fatalf("generated %q, which does not validate: %v", out, err)
						}
					}
					if finished == 0 {
						t.Errorf("no walk out of %d finished", v.walks)
					}
					t.Logf("%d/%d walks finished", finished, v.walks)
				})
			}
		}
	}
}
