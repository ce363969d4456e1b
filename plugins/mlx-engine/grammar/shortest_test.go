package grammar

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// byteIndex is a vocabulary of single bytes (all but 0xFF) and an end-of-sequence token: a token is a byte,
// so the shortest completion in tokens is the one in bytes.
func byteIndex(t testing.TB) *Index {
	t.Helper()
	v := Vocabulary{Tokens: [][]byte{nil}, EOS: []int32{0}}
	for b := 1; b < 0xFF; b++ {
		v.Tokens = append(v.Tokens, []byte{byte(b)})
	}
	idx, err := NewIndex(v)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// follow accepts text byte by byte (both test vocabularies have every byte but 0xFF as a token).
func follow(t *testing.T, m *Matcher, idx *Index, text string) {
	t.Helper()
	for i := range len(text) {
		if err := m.Accept(tokenID(t, idx, text[i:i+1])); err != nil {
			t.Fatalf("after %q: %v", text[:i], err)
		}
	}
}

// shortestAfter is the shortest completion after byte x, or -1 when x may not come next.
func shortestAfter(m *Matcher, x byte) int {
	mark := len(m.s.frames)
	defer m.s.truncate(mark)
	cs, ok := m.advance([]byte{x})
	if !ok {
		return -1
	}
	return int(m.shortest(cs))
}

// TestShortestCompletion: the fewest bytes that complete the grammar, per state reached by a prefix (with a
// vocabulary of single bytes, where Shortest counts bytes). The completion given must complete it in exactly
// that many bytes, and no byte may shorten the way by more than one, so no shorter completion exists (by
// induction down to 0, where the output is complete).
func TestShortestCompletion(t *testing.T) {
	t.Parallel()
	idx := byteIndex(t)
	schema := func(s string) Node {
		n, err := JSONSchema([]byte(s), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	anyJSON, err := AnyJSON(Options{})
	if err != nil {
		t.Fatal(err)
	}
	call, err := ToolCallObject(weatherTools, "arguments", Options{})
	if err != nil {
		t.Fatal(err)
	}
	hermes := Repeat(Seq(Literal("<tool_call>\n"), call, Literal("\n</tool_call>")), 1, -1, Literal("\n"))
	free := schema(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`)
	tests := []struct {
		name   string
		root   Node
		prefix string
		end    string // a shortest completion
	}{
		{"literal start", Literal("abc"), "", "abc"},
		{"literal middle", Literal("abc"), "a", "bc"},
		{"literal end", Literal("abc"), "abc", ""},
		{"shorter branch", Alt(Literal("a long way"), Literal("xy")), "", "xy"},
		{"committed to the long branch", Alt(Literal("a long way"), Literal("xy")), "a l", "ong way"},
		{"optional", Seq(Literal("a"), Optional(Literal("bcd")), Literal("e")), "a", "e"},
		{"repeat minimum", Repeat(Literal("ab"), 3, -1, Literal(",")), "ab,", "ab,ab"},
		{"object start", free, "", `{"a":"","b":0}`},
		{"free string open", free, `{"a":"hello wor`, `","b":0}`},
		{"escape begun", free, `{"a":"x\`, `n","b":0}`},
		{"unicode escape begun", free, `{"a":"x\u0`, `000","b":0}`},
		{"number may end", free, `{"a":"","b":12`, `}`},
		{"number must go on", free, `{"a":"","b":-`, `0}`},
		{"complete", free, `{"a":"","b":7}`, ""},
		{"nested any JSON: returns through every rule", anyJSON, `[[{"k":[`, `]}]]`},
		{"nested any JSON: inside a string", anyJSON, `{"k":[{"x":"ab`, `"}]}`},
		{"tool call: any tool", hermes, "", "<tool_call>\n" + `{"name":"ping","arguments":{}}` + "\n</tool_call>"},
		{"tool call: named", hermes, "<tool_call>\n" + `{"name": "get_w`, `eather","arguments":{"city":""}}` + "\n</tool_call>"},
		{"tool call: first complete", hermes, "<tool_call>\n" + `{"name": "ping", "arguments": {}}` + "\n</tool_call>", ""},
		{"tool call: second begun", hermes, "<tool_call>\n" + `{"name": "ping", "arguments": {}}` + "\n</tool_call>\n<to", "ol_call>\n" + `{"name":"ping","arguments":{}}` + "\n</tool_call>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Compile(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			if !g.matches([]byte(tc.prefix + tc.end)) {
				t.Fatalf("the test's completion %q does not complete %q", tc.end, tc.prefix)
			}
			m, err := g.NewMatcher(idx)
			if err != nil {
				t.Fatal(err)
			}
			follow(t, m, idx, tc.prefix)
			if got := m.Shortest(); got != len(tc.end) {
				t.Errorf("Shortest after %q = %d, want %d (%q)", tc.prefix, got, len(tc.end), tc.end)
			}
			if got, want := m.Shortest() == 0, m.Complete(); got != want {
				t.Errorf("Shortest 0 is %t, Complete %t", got, want)
			}
			for x := range 0xFF {
				if d := shortestAfter(m, byte(x)); d >= 0 && d < m.Shortest()-1 {
					t.Errorf("byte %q after %q leaves %d, less than %d - 1", byte(x), tc.prefix, d, m.Shortest())
				}
			}
		})
	}
}

// TestShortestInTokens: with a vocabulary of longer tokens, Shortest counts the fewest tokens that spell a
// shortest completion in bytes (keys, punctuation and special tokens whole), never more than its bytes.
func TestShortestInTokens(t *testing.T) {
	t.Parallel()
	idx := syntheticIndex(t)
	tests := []struct {
		name   string
		root   Node
		prefix string
		want   int
	}{
		{"one token", Literal("get_weather"), "", 1},
		{"tokens across literals", Seq(Literal(`{"name": "`), Literal("get_weather"), Literal(`"`)), "", 3},
		{"no token but bytes", Literal("get_weather"), "get", len("_weather")},
		{"a special token", Seq(Special("[TOOL_CALLS]"), Literal("[")), "", 2},
		// The shortest way in bytes is the one counted: "hello world" is 2 tokens but 11 bytes.
		{"the shortest bytes, not the fewest tokens", Alt(Literal("hello world"), Literal("xyz")), "", 3},
		{"through a called rule", Seq(Literal(`{"name": "`), Node{rule(Literal("get_weather").get())}, Literal(`"}`)), "", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Compile(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			m, err := g.NewMatcher(idx)
			if err != nil {
				t.Fatal(err)
			}
			follow(t, m, idx, tc.prefix)
			if got := m.Shortest(); got != tc.want {
				t.Errorf("Shortest after %q = %d tokens, want %d", tc.prefix, got, tc.want)
			}
		})
	}
}

// TestFitEndsWithinBudget is Fit's guarantee: a walk that picks any token Fit leaves (uniformly, so free
// strings go on as long as they may) ends with a complete output within the budget, whenever the budget
// allows one at the start. Far from the budget Fit takes nothing out.
func TestFitEndsWithinBudget(t *testing.T) {
	t.Parallel()
	vocabs := []struct {
		name  string
		index func(testing.TB) *Index
	}{
		{"synthetic", syntheticIndex},
		{"llama3", func(t testing.TB) *Index { return realIndex(t, "llama3") }},
	}
	call, err := ToolCallObject(weatherTools, "arguments", Options{})
	if err != nil {
		t.Fatal(err)
	}
	grammars := map[string]Node{
		"hermes": Repeat(Seq(Literal("<tool_call>\n"), call, Literal("\n</tool_call>")), 1, -1, Literal("\n")),
	}
	for _, name := range []string{"strings.json", "nested.json", "recursive.json", "any.json", "person.json"} {
		n, err := JSONSchema(readSchema(t, name), Options{})
		if err != nil {
			t.Fatal(err)
		}
		grammars[name] = n
	}
	for name, root := range grammars {
		g, err := Compile(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vocabs {
			t.Run(name+"/"+v.name, func(t *testing.T) {
				idx := v.index(t)
				rng := rand.New(rand.NewPCG(uint64(len(name)), 7))
				m, err := g.NewMatcher(idx)
				if err != nil {
					t.Fatal(err)
				}
				start := m.Shortest()
				for _, extra := range []int{0, 1, 2, 5, 20, 60} {
					budget := start + extra
					t.Run(strconv.Itoa(budget), func(t *testing.T) {
						for range 8 {
							m.Reset()
							var out []byte
							var mask []uint64
							for left := budget; left > 0 && !m.Done(); left-- {
								mask = m.Mask(mask)
								m.Fit(mask, left)
								id := pickAllowed(mask, rng)
								if id < 0 {
									t.Fatalf("nothing allowed after %q with %d left", out, left)
								}
								if err := m.Accept(id); err != nil {
									t.Fatalf("after %q: Fit left %d, which Accept refuses: %v", out, id, err)
								}
								if idx.isEOS(id) {
									break
								}
								out = append(out, idx.bytesOf(id)...)
								if m.Shortest() > left-1 {
									t.Fatalf("after %q, %d bytes to complete with %d tokens left", out, m.Shortest(), left-1)
								}
							}
							if !m.Complete() {
								t.Fatalf("budget %d (shortest %d at the start) ended at %q, incomplete", budget, start, out)
							}
						}
					})
				}
				m.Reset()
				mask := m.Mask(nil)
				if m.Fit(mask, 1<<20) {
					t.Errorf("Fit took tokens out with a budget of 1<<20")
				}
			})
		}
	}
}
