package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkMaskBruteForce compares the mask with trying every token through the automaton on its own.
func checkMaskBruteForce(t *testing.T, m *Matcher, idx *Index, mask []uint64, prefix []byte) {
	t.Helper()
	for id := range int32(idx.Size()) {
		got := mask[id>>6]&(1<<(id&63)) != 0
		if want := m.Allowed(id); got != want {
			t.Fatalf("after %q: token %d (%q): mask says %t, trying it says %t", prefix, id, idx.bytesOf(id), got, want)
		}
	}
}

func TestMaskMatchesBruteForce(t *testing.T) {
	t.Parallel()
	vocabs := []struct {
		name   string
		index  func(testing.TB) *Index
		walks  int
		checks int // brute-force checks per walk, at random steps
	}{
		{"synthetic", syntheticIndex, 6, 1 << 30},
		{"llama3", func(t testing.TB) *Index { return realIndex(t, "llama3") }, 2, 3},
		{"qwen3", func(t testing.TB) *Index { return realIndex(t, "qwen3") }, 1, 3},
		{"llama2", func(t testing.TB) *Index { return realIndex(t, "llama2") }, 1, 3},
	}
	for _, v := range vocabs {
		for _, name := range []string{"nested.json", "recursive.json", "anyof.json", "strings.json", "map.json", "any.json"} {
			t.Run(v.name+"/"+name, func(t *testing.T) {
				idx := v.index(t)
				g := compileSchema(t, readSchema(t, name), Options{Whitespace: 2})
				rng := rand.New(rand.NewPCG(7, uint64(len(name))))
				for range v.walks {
					m, err := g.NewMatcher(idx)
					if err != nil {
						t.Fatal(err)
					}
					var out []byte
					var mask []uint64
					checks := v.checks
					for step := 0; step < 400 && !m.Done(); step++ {
						mask = m.Mask(mask)
						if checks > 0 && (v.checks > 100 || step == 0 || rng.IntN(30) == 0) {
							checks--
							checkMaskBruteForce(t, m, idx, mask, out)
						}
						id := pickAllowed(mask, rng)
						if idx.isEOS(id) {
							break
						}
						if err := m.Accept(id); err != nil {
							t.Fatal(err)
						}
						out = append(out, idx.bytesOf(id)...)
					}
				}
			})
		}
	}
}

func TestDoneAllowsOnlyEOS(t *testing.T) {
	t.Parallel()
	idx := syntheticIndex(t)
	g := compileSchema(t, []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`), Options{})
	m, err := g.NewMatcher(idx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Complete() || m.Done() {
		t.Fatal("complete at the start")
	}
	if err := m.Accept(syntheticEOS); err == nil {
		t.Fatal("end-of-sequence accepted at the start: the output would be empty")
	}
	for _, s := range []string{`{"`, `a`, `":`, `1`, `2`} {
		if err := m.Accept(tokenID(t, idx, s)); err != nil {
			t.Fatal(err)
		}
	}
	if m.Complete() {
		t.Fatal(`complete after {"a":12`)
	}
	if err := m.Accept(tokenID(t, idx, `"}`)); err == nil {
		t.Fatal(`"} accepted after a number`)
	}
	if err := m.Accept(tokenID(t, idx, `}`)); err != nil {
		t.Fatal(err)
	}
	if !m.Complete() || !m.Done() {
		t.Fatal("not done after the object closed")
	}
	if ids := maskIDs(m.Mask(nil)); !slices.Equal(ids, []int32{syntheticEOS}) {
		t.Fatalf("mask after the end allows %v, want only end-of-sequence", ids)
	}
	if err := m.Accept(tokenID(t, idx, " ")); err == nil {
		t.Fatal("a space accepted after the end")
	}
	if err := m.Accept(syntheticEOS); err != nil {
		t.Fatal(err)
	}
	if ids := maskIDs(m.Mask(nil)); len(ids) != 0 {
		t.Fatalf("mask after end-of-sequence allows %v", ids)
	}
	m.Reset()
	if m.Complete() || !m.Allowed(tokenID(t, idx, `{"`)) {
		t.Fatal("Reset did not go back to the start")
	}
}

func tokenID(t testing.TB, idx *Index, s string) int32 {
	t.Helper()
	for id := range int32(idx.Size()) {
		if b := idx.bytesOf(id); b != nil && string(b) == s {
			return id
		}
	}
	t.Fatalf("no token %q", s)
	return -1
}

// TestBoundedGrammarEnds: where the schema bounds every value, no sequence of allowed tokens can go on for
// ever. Each token adds at least one byte and the language is finite, so a walk ends within as many steps as
// the longest sentence has bytes, whatever it picks; whitespace and digits included.
func TestBoundedGrammarEnds(t *testing.T) {
	t.Parallel()
	schema := []byte(`{"type":"object","properties":{"n":{"type":"number"},"i":{"type":"integer"},"e":{"enum":["a","b"]},
		"d":{"type":"string","format":"date-time"},"s":{"type":"string","maxLength":4},"b":{"type":"array","items":{"type":"boolean"},"maxItems":3}},
		"required":["n","i","e","d","s","b"],"additionalProperties":false}`)
	for _, ws := range []int{NoWhitespace, 1, 8} {
		g := compileSchema(t, schema, Options{Whitespace: ws})
		rng := rand.New(rand.NewPCG(3, uint64(ws+5)))
		for range 200 {
			if out, done := walk(t, g, syntheticIndex(t), rng, 600); !done {
				t.Fatalf("whitespace %d: not done after 600 tokens: %q", ws, out)
			}
		}
	}
}

func TestAnyJSONObject(t *testing.T) {
	t.Parallel()
	n, err := AnyJSONObject(Options{MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{}`, `{"a":{"b":[1,2,{"c":null}]}}`, `{"x": "y", "z": [true, false]}`} {
		if !g.matches([]byte(s)) {
			t.Errorf("%s does not match", s)
		}
	}
	for _, s := range []string{`[]`, `"a"`, `{"a":1,}`, `{"a":[[[[[1]]]]]}`} {
		if g.matches([]byte(s)) {
			t.Errorf("%s matches", s)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 100 {
		out, done := walk(t, g, syntheticIndex(t), rng, 5000)
		if !done {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
	}
}

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)},
	{Name: "get_time", Parameters: []byte(`{"type":"object","properties":{"zone":{"type":"string","format":"date"}},"required":["zone"],"additionalProperties":false}`)},
	{Name: "ping"},
}

// TestToolCallFormats builds the forced tool-call grammars of three model families and checks what they match,
// then that random generations parse as calls whose arguments fit the named tool.
func TestToolCallFormats(t *testing.T) {
	t.Parallel()
	call := func(key string) Node {
		n, err := ToolCallObject(weatherTools, key, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := map[string]struct {
		root   Node
		split  func(out []byte) []string // the JSON objects of the calls
		match  []string
		reject []string
	}{
		"hermes": {
			root: Repeat(Seq(Literal("<tool_call>\n"), call("arguments"), Literal("\n</tool_call>")), 1, -1, Literal("\n")),
			split: func(out []byte) []string {
				var calls []string
				rest := out
				for len(rest) > 0 {
					rest = bytes.TrimPrefix(bytes.TrimPrefix(rest, []byte("\n")), []byte("<tool_call>\n"))
					dec := json.NewDecoder(bytes.NewReader(rest))
					var raw json.RawMessage
					if err := dec.Decode(&raw); err != nil {
						t.Fatalf("%q: %v", out, err)
					}
					calls = append(calls, string(raw))
					rest = rest[dec.InputOffset():]
					var ok bool
					if rest, ok = bytes.CutPrefix(rest, []byte("\n</tool_call>")); !ok {
						t.Fatalf("%q: no </tool_call> after a call", out)
					}
				}
				return calls
			},
			match: []string{
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
				"<tool_call>\n{\"name\":\"ping\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":\"2024-01-01\"}}\n</tool_call>",
			},
			reject: []string{
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"zone\": \"2024-01-01\"}}\n</tool_call>",
				"<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>",
				"<tool_call>\n{\"arguments\": {}, \"name\": \"ping\"}\n</tool_call>",
				"{\"name\": \"ping\", \"arguments\": {}}",
			},
		},
		"llama3.1": {
			root:  call("parameters"),
			split: func(out []byte) []string { return []string{string(out)} },
			match: []string{`{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}`},
			reject: []string{
				`{"name": "get_weather", "arguments": {"city": "Oslo"}}`,
				`{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "k"}}`,
			},
		},
		"mistral": {
			root: Seq(Special("[TOOL_CALLS]"), Literal("["), Repeat(call("arguments"), 1, -1, Literal(", ")), Literal("]")),
			split: func(out []byte) []string {
				var calls []json.RawMessage
				body := bytes.TrimPrefix(out, []byte("\xff[TOOL_CALLS]\xff"))
				if err := json.Unmarshal(body, &calls); err != nil {
					t.Fatalf("%q: %v", out, err)
				}
				var s []string
				for _, c := range calls {
					s = append(s, string(c))
				}
				return s
			},
			match:  []string{"\xff[TOOL_CALLS]\xff[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {\"x\": 1}}]"},
			reject: []string{"[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]"},
		},
	}
	schemas := map[string]func(testing.TB, []byte) error{}
	for _, tool := range weatherTools {
		if tool.Parameters == nil {
			schemas[tool.Name] = func(testing.TB, []byte) error { return nil }
			continue
		}
		v := validator(t, tool.Parameters)
		schemas[tool.Name] = func(t testing.TB, args []byte) error { return validate(t, v, args) }
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, err := Compile(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.match {
				if !g.matches([]byte(s)) {
					t.Errorf("%q does not match", s)
				}
			}
			for _, s := range tc.reject {
				if g.matches([]byte(s)) {
					t.Errorf("%q matches", s)
				}
			}
			rng := rand.New(rand.NewPCG(5, uint64(len(name))))
			finished := 0
			for range 60 {
				out, done := walk(t, g, syntheticIndex(t), rng, 4000)
				if !done {
					continue
				}
				finished++
				for _, c := range tc.split(out) {
					var call struct {
						Name       string          `json:"name"`
						Arguments  json.RawMessage `json:"arguments"`
						Parameters json.RawMessage `json:"parameters"`
					}
					if err := json.Unmarshal([]byte(c), &call); err != nil {
						t.Fatalf("call %q of %q: %v", c, out, err)
					}
					args := call.Arguments
					if args == nil {
						args = call.Parameters
					}
					check, ok := schemas[call.Name]
					if !ok {
						t.Fatalf("call of unknown tool %q", call.Name)
					}
					if err := check(t, args); err != nil {
						t.Fatalf("arguments %s of %s do not validate: %v", args, call.Name, err)
					}
				}
			}
			if finished == 0 {
				t.Error("no walk finished")
			}
		})
	}
}

func TestParallelCallsMayStopOrGoOn(t *testing.T) {
	t.Parallel()
	n, err := ToolCallObject(weatherTools[2:], "arguments", Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile(Repeat(Seq(Literal("<tool_call>\n"), n, Literal("\n</tool_call>")), 1, 2, Literal("\n")))
	if err != nil {
		t.Fatal(err)
	}
	idx := syntheticIndex(t)
	m, _ := g.NewMatcher(idx)
	for _, s := range []string{"<tool_call>", "\n", `{"name": "`, "p", "i", "n", "g", `"`, ",", " ", `"arguments": `, "{", "}", "}", "\n</tool_call>"} {
		if err := m.Accept(tokenID(t, idx, s)); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	}
	if !m.Complete() || m.Done() {
		t.Fatalf("after one call: complete %t, done %t; want complete, not done", m.Complete(), m.Done())
	}
	mask := m.Mask(nil)
	if !m.Allowed(syntheticEOS) || mask[0]&1 == 0 || !m.Allowed(tokenID(t, idx, "\n<tool_call>\n")) {
		t.Fatal("after one call both the end and a second call should be allowed")
	}
}

func TestSpecialTokens(t *testing.T) {
	t.Parallel()
	g, err := Compile(Seq(Special("[TOOL_CALLS]"), Literal("[]")))
	if err != nil {
		t.Fatal(err)
	}
	idx := syntheticIndex(t)
	m, err := g.NewMatcher(idx)
	if err != nil {
		t.Fatal(err)
	}
	ids := maskIDs(m.Mask(nil))
	if want := idx.special["[TOOL_CALLS]"]; !slices.Equal(ids, []int32{want}) {
		t.Fatalf("mask %v, want only the special token %d (not its spelling)", ids, want)
	}
	// A vocabulary without the special token cannot follow the grammar.
	other, err := NewIndex(Vocabulary{Tokens: [][]byte{nil, []byte("[")}, EOS: []int32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.NewMatcher(other); err == nil {
		t.Fatal("NewMatcher accepted a vocabulary without [TOOL_CALLS]")
	}
	if _, err := Compile(Literal("a\xffb")); err == nil {
		t.Fatal("a literal holding 0xFF compiled")
	}
}

// TestPartialUTF8Tokens: byte-level tokens that hold part of a character are allowed exactly where the
// character can continue.
func TestPartialUTF8Tokens(t *testing.T) {
	t.Parallel()
	idx := syntheticIndex(t)
	g := compileSchema(t, []byte(`{"type":"string","pattern":"^é€$"}`), Options{})
	m, _ := g.NewMatcher(idx)
	for _, s := range []string{`"`, "\xc3", "\xa9", "\xe2\x82"} {
		if err := m.Accept(tokenID(t, idx, s)); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	}
	if m.Allowed(tokenID(t, idx, "\x82\xac")) || !m.Allowed(tokenID(t, idx, "\xac")) {
		t.Fatal("after \\xe2\\x82 only \\xac may complete €")
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	c := NewCache(2)
	a1, err := c.JSONSchema([]byte(`{"type": "string"}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := c.JSONSchema([]byte("{\"type\":\n\"string\"}"), Options{})
	if a1 != a2 {
		t.Error("the same schema up to whitespace compiled twice")
	}
	if b, _ := c.JSONSchema([]byte(`{"type": "string"}`), Options{Strict: true}); b == a1 {
		t.Error("different options share a grammar")
	}
	_, err1 := c.JSONSchema([]byte(`{"not": {}}`), Options{})
	_, err2 := c.JSONSchema([]byte(`{"not": {}}`), Options{})
	if err1 == nil || err1 != err2 {
		t.Errorf("refusal not cached: %v, %v", err1, err2)
	}
	if c.Len() != 2 {
		t.Errorf("Len %d, want 2 (the capacity)", c.Len())
	}
	if a3, _ := c.JSONSchema([]byte(`{"type": "string"}`), Options{}); a3 == a1 {
		t.Error("evicted entry still returned")
	}
}

func TestApplyMask(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 2, 3, 4, 5}
	ApplyMask(logits, []uint64{0b01010})
	for i, l := range logits {
		if allowed := i == 1 || i == 3; allowed != (l > 0) {
			t.Errorf("logit %d = %v", i, l)
		}
	}
}

// TestConcurrentMatchers runs generations on one grammar at once, as parallel subtests: the per-state masks
// are filled lazily by whichever Matcher gets there first. Run with -race.
func TestConcurrentMatchers(t *testing.T) {
	t.Parallel()
	idx := syntheticIndex(t)
	g := compileSchema(t, readSchema(t, "recursive.json"), Options{})
	val := validator(t, readSchema(t, "recursive.json"))
	for w := range 4 {
		t.Run(string(rune('a'+w)), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 20 {
				if out, done := walk(t, g, idx, rng, 3000); done {
					if err := validate(t, val, out); err != nil {
						t.Fatalf("%q: %v", out, err)
					}
				}
			}
		})
	}
}
