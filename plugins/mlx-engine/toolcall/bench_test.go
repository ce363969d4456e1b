package toolcall

import (
	"strings"
	"testing"
)

// BenchmarkParser feeds outputs in 4-byte pieces, about a token each, as the engine feeds them.
func BenchmarkParser(b *testing.B) {
	tools := loadTools(b)
	byName := map[string]outputCase{}
	for _, c := range loadOutputs(b) {
		byName[c.name] = c
	}
	long := outputCase{name: "long_content", format: Format{CallsHermes, ReasoningThink},
		text: strings.Repeat("A plain answer with a < sign, a <b>tag</b> and some <think-like text. ", 200)}
	for _, c := range []outputCase{byName["qwen3/think_text_parallel"], byName["qwen3coder/code_value"], byName["mistral/v11_parallel"], long} {
		var pieces []string
		for s := c.text; s != ""; {
			n := min(4, len(s))
			pieces = append(pieces, s[:n])
			s = s[n:]
		}
		// Only the tools the output calls, so that the numbers are the parsing's, not the schemas'.
		var used []Tool
		for _, t := range tools {
			if strings.Contains(c.text, t.Name) {
				used = append(used, t)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				p, err := NewParser(c.format, Options{Tools: used, NewID: NewIDs(c.format.Calls, 1)})
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range pieces {
					p.Feed(s)
				}
				p.Finish()
			}
		})
	}
}

// BenchmarkNewParser: a request's thirteen tools, their schemas compiled once per request.
func BenchmarkNewParser(b *testing.B) {
	tools := loadTools(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewParser(Format{CallsHermes, ReasoningThink}, Options{Tools: tools}); err != nil {
			b.Fatal(err)
		}
	}
}
