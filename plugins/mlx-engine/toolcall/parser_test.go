package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// outputCase is one model output of testdata/outputs/*.txtar and what it must parse to.
type outputCase struct {
	name   string
	format Format
	text   string
	want   wantResult
}

type wantResult struct {
	Format           string `json:"format"` // overrides the file's format: "calls+reasoning"
	StartInReasoning bool   `json:"start_in_reasoning"`
	NoTools          bool   `json:"no_tools"`
	Content          string `json:"content"`
	Reasoning        string `json:"reasoning"`
	Calls            []struct {
		Index     *int   `json:"index"` // default: the call's position
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"calls"`
	Errors []wantError `json:"errors"`
}

type wantError struct {
	Index  int    `json:"index"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Detail string `json:"detail"` // checked when set
}

var kindNames = map[error]string{
	ErrMalformed:        "malformed",
	ErrUnknownTool:      "unknown_tool",
	ErrInvalidArguments: "invalid_arguments",
	ErrTruncated:        "truncated",
}

func parseFormat(t testing.TB, s string) Format {
	t.Helper()
	calls, reasoning, ok := strings.Cut(strings.TrimSpace(s), "+")
	if !ok {
		t.Fatalf("format %q: want calls+reasoning", s)
	}
	var f Format
	found := 0
	for c := CallsNone; c <= CallsHarmony; c++ {
		if c.String() == calls {
			f.Calls = c
			found++
		}
	}
	for r := ReasoningNone; r <= ReasoningHarmony; r++ {
		if r.String() == reasoning {
			f.Reasoning = r
			found++
		}
	}
	if found != 2 {
		t.Fatalf("unknown format %q", s)
	}
	return f
}

// loadOutputs reads every testdata/outputs/*.txtar: a header whose "format:" line gives the format, then
// sections "-- NAME.txt --" (the output, less the newline that ends the section) and "-- NAME.want --".
func loadOutputs(t testing.TB) []outputCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "outputs", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/outputs/*.txtar: %v", err)
	}
	var cases []outputCase
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		family := strings.TrimSuffix(filepath.Base(file), ".txtar")
		header, sections := splitTxtar(string(b))
		var format Format
		for _, line := range strings.Split(header, "\n") {
			if v, ok := strings.CutPrefix(line, "format:"); ok {
				format = parseFormat(t, v)
			}
		}
		texts := map[string]string{}
		for _, s := range sections {
			name, ext, _ := strings.Cut(s.name, ".")
			switch ext {
			case "txt":
				texts[name] = strings.TrimSuffix(s.body, "\n")
			case "want":
				text, ok := texts[name]
				if !ok {
					t.Fatalf("%s: %s.want before %s.txt", file, name, name)
				}
				c := outputCase{name: family + "/" + name, format: format, text: text}
				if err := json.Unmarshal([]byte(s.body), &c.want); err != nil {
					t.Fatalf("%s: %s.want: %v", file, name, err)
				}
				if c.want.Format != "" {
					c.format = parseFormat(t, c.want.Format)
				}
				cases = append(cases, c)
				delete(texts, name)
			default:
				t.Fatalf("%s: section %q is neither .txt nor .want", file, s.name)
			}
		}
		if len(texts) > 0 {
			t.Fatalf("%s: outputs without .want: %v", file, texts)
		}
	}
	return cases
}

type section struct{ name, body string }

func splitTxtar(s string) (string, []section) {
	var header strings.Builder
	var out []section
	for _, line := range strings.SplitAfter(s, "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			out = append(out, section{name: trimmed[3 : len(trimmed)-3]})
			continue
		}
		if len(out) == 0 {
			header.WriteString(line)
		} else {
			out[len(out)-1].body += line
		}
	}
	return header.String(), out
}

func loadTools(t testing.TB) []Tool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := ParseTools(b)
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

func (c outputCase) options(tools []Tool) Options {
	o := Options{StartInReasoning: c.want.StartInReasoning, NewID: NewIDs(c.format.Calls, 1)}
	if !c.want.NoTools {
		o.Tools = tools
	}
	return o
}

// run feeds pieces to a new parser and returns the result, every delta and the error.
func run(t testing.TB, f Format, o Options, pieces []string) (Result, []Delta, error) {
	t.Helper()
	p, err := NewParser(f, o)
	if err != nil {
		t.Fatal(err)
	}
	var all []Delta
	for _, s := range pieces {
		all = append(all, p.Feed(s)...)
	}
	res, last, err := p.Finish()
	return res, append(all, last...), err
}

// callErrors unpacks what Finish returns.
func callErrors(t testing.TB, err error) []*CallError {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []*CallError
	for _, e := range errs {
		var ce *CallError
		if !errors.As(e, &ce) {
			t.Fatalf("error %v is not a *CallError", e)
		}
		out = append(out, ce)
	}
	return out
}

// checkDeltas checks that the deltas add up to the result: the same content and reasoning, each call started
// once (with its id and name) before any of its arguments, and its arguments fragments concatenated equal to
// its arguments.
func checkDeltas(t testing.TB, res Result, deltas []Delta) {
	t.Helper()
	var content, reasoning strings.Builder
	args := map[int]*strings.Builder{}
	var starts []Call
	for i, d := range deltas {
		switch d.Kind {
		case Content:
			content.WriteString(d.Text)
		case Reasoning:
			reasoning.WriteString(d.Text)
		case CallStart:
			if _, dup := args[d.Index]; dup {
				t.Fatalf("delta %d: call %d started twice", i, d.Index)
			}
			if d.ID == "" || d.Name == "" {
				t.Fatalf("delta %d: call start without id or name: %+v", i, d)
			}
			if len(starts) > 0 && d.Index <= starts[len(starts)-1].Index {
				t.Fatalf("delta %d: call index %d after %d", i, d.Index, starts[len(starts)-1].Index)
			}
			args[d.Index] = &strings.Builder{}
			starts = append(starts, Call{Index: d.Index, ID: d.ID, Name: d.Name})
		case CallArguments:
			b, ok := args[d.Index]
			if !ok {
				t.Fatalf("delta %d: arguments of call %d before its start", i, d.Index)
			}
			b.WriteString(d.Text)
		default:
			t.Fatalf("delta %d: bad kind %v", i, d.Kind)
		}
		if d.Kind != CallStart && d.Text == "" {
			t.Fatalf("delta %d: empty %v delta", i, d.Kind)
		}
	}
	if content.String() != res.Content {
		t.Fatalf("content deltas %q, result %q", content.String(), res.Content)
	}
	if reasoning.String() != res.Reasoning {
		t.Fatalf("reasoning deltas %q, result %q", reasoning.String(), res.Reasoning)
	}
	if len(starts) != len(res.Calls) {
		t.Fatalf("%d calls started in deltas, %d in the result", len(starts), len(res.Calls))
	}
	for i, c := range res.Calls {
		s := starts[i]
		if s.Index != c.Index || s.ID != c.ID || s.Name != c.Name || args[c.Index].String() != c.Arguments {
			t.Fatalf("call %d: deltas give %+v with arguments %q, result %+v", i, s, args[c.Index].String(), c)
		}
	}
}

// formatMarkers are the complete markers that must never reach content when tools are on.
func formatMarkers(f Format) []string {
	var m []string
	if open, close := f.Reasoning.markers(); open != "" {
		m = append(m, open, close)
	}
	switch f.Calls {
	case CallsHermes:
		m = append(m, markToolCall, markToolCallEnd)
	case CallsQwen3Coder:
		m = append(m, markToolCall, markToolCallEnd, markFunction)
	case CallsMistral:
		m = append(m, markMistral, markMistralArgs)
	case CallsLlama3:
		m = append(m, markPythonTag, markEOM, markEOT)
	case CallsHarmony:
		m = append(m, harmonyMarks...)
	}
	return m
}

// TestOutputs parses every real output whole and checks the result against its .want.
func TestOutputs(t *testing.T) {
	t.Parallel()
	tools := loadTools(t)
	for _, c := range loadOutputs(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res, deltas, err := run(t, c.format, c.options(tools), []string{c.text})
			checkDeltas(t, res, deltas)
			w := c.want
			if res.Content != w.Content {
				t.Errorf("content %q, want %q", res.Content, w.Content)
			}
			if res.Reasoning != w.Reasoning {
				t.Errorf("reasoning %q, want %q", res.Reasoning, w.Reasoning)
			}
			if len(res.Calls) != len(w.Calls) {
				t.Fatalf("calls %+v, want %d", res.Calls, len(w.Calls))
			}
			ids := map[string]bool{}
			for i, got := range res.Calls {
				want := w.Calls[i]
				index := i
				if want.Index != nil {
					index = *want.Index
				}
				if got.Index != index || got.Name != want.Name || got.Arguments != want.Arguments {
					t.Errorf("call %d: %d %s %s, want %d %s %s", i, got.Index, got.Name, got.Arguments, index, want.Name, want.Arguments)
				}
				if ids[got.ID] {
					t.Errorf("call %d: id %s used twice", i, got.ID)
				}
				ids[got.ID] = true
			}
			errs := callErrors(t, err)
			if len(errs) != len(w.Errors) {
				t.Fatalf("errors %v, want %+v", err, w.Errors)
			}
			for i, e := range errs {
				we := w.Errors[i]
				if e.Index != we.Index || kindNames[e.Kind] != we.Kind || e.Name != we.Name || we.Detail != "" && e.Detail != we.Detail {
					t.Errorf("error %d: index %d kind %s name %q detail %q, want %+v", i, e.Index, kindNames[e.Kind], e.Name, e.Detail, we)
				}
				if !errors.Is(err, e.Kind) || e.Text == "" || !strings.Contains(c.text, e.Text) {
					t.Errorf("error %d: %v: not errors.Is its kind, or its text is not the model's", i, e)
				}
			}
			if !w.NoTools && c.format.Calls != CallsNone {
				for _, m := range formatMarkers(c.format) {
					if strings.Contains(res.Content, m) {
						t.Errorf("content %q holds the marker %s", res.Content, m)
					}
				}
			}
		})
	}
}

// TestOutputsSplit feeds every output in pieces: two at every byte, a one-byte piece at every byte, one byte
// at a time, and random sizes. Every split must give the same result and errors as the whole text, and deltas
// that add up to it. Deltas are never taken back, so this is also the check that no piece of a marker leaks:
// a leaked "<tool" would stay in the content, which TestOutputs compares with the expected text.
func TestOutputsSplit(t *testing.T) {
	t.Parallel()
	tools := loadTools(t)
	for _, c := range loadOutputs(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Only the tools the text names (and the one <|python_tag|> code calls): compiling thirteen schemas
			// for every split would be most of the test's time.
			var used []Tool
			for _, tool := range tools {
				if strings.Contains(c.text, tool.Name) || tool.Name == "code_interpreter" {
					used = append(used, tool)
				}
			}
			o := func() Options { return c.options(used) }
			wantRes, _, wantErr := run(t, c.format, o(), []string{c.text})
			check := func(how string, pieces []string) {
				t.Helper()
				res, deltas, err := run(t, c.format, o(), pieces)
				if !reflect.DeepEqual(res, wantRes) {
					t.Fatalf("%s: result\n%+v\nwant\n%+v", how, res, wantRes)
				}
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("%s: error %v, want %v", how, err, wantErr)
				}
				checkDeltas(t, res, deltas)
			}
			s := c.text
			for i := 0; i <= len(s); i++ {
				check(fmt.Sprintf("split at %d", i), []string{s[:i], s[i:]})
				if i < len(s) {
					check(fmt.Sprintf("byte %d alone", i), []string{s[:i], s[i : i+1], s[i+1:]})
				}
			}
			bytes := make([]string, len(s))
			for i := 0; i < len(s); i++ {
				bytes[i] = s[i : i+1]
			}
			check("one byte at a time", bytes)
			r := rand.New(rand.NewPCG(uint64(len(s)), 7))
			for round := 0; round < 20; round++ {
				var pieces []string
				for rest := s; rest != ""; {
					n := min(1+r.IntN(12), len(rest))
					pieces = append(pieces, rest[:n])
					rest = rest[n:]
				}
				check(fmt.Sprintf("random round %d %q", round, pieces), pieces)
			}
		})
	}
}

func TestFeedAfterFinish(t *testing.T) {
	t.Parallel()
	p, err := NewParser(Format{Calls: CallsHermes}, Options{Tools: loadTools(t), NewID: NewIDs(CallsHermes, 3)})
	if err != nil {
		t.Fatal(err)
	}
	p.Feed("Hi <tool")
	r1, d1, err1 := p.Finish()
	if r1.Content != "Hi <tool" || err1 != nil || len(d1) != 1 {
		t.Fatalf("Finish: %+v %+v %v", r1, d1, err1)
	}
	if d := p.Feed("more"); d != nil {
		t.Fatalf("Feed after Finish gave %+v", d)
	}
	r2, d2, err2 := p.Finish()
	if !reflect.DeepEqual(r1, r2) || len(d2) != 0 || err2 != nil {
		t.Fatalf("second Finish: %+v %+v %v", r2, d2, err2)
	}
}

// TestStreamingArguments: JSON arguments stream as they arrive, once the name is known; XML parameters one at
// a time.
func TestStreamingArguments(t *testing.T) {
	t.Parallel()
	tools := loadTools(t)
	cases := []struct {
		name   string
		format Format
		pieces []string
		// want[i] is the concatenated arguments text the deltas of pieces[i] carry.
		want []string
	}{
		{"hermes", Format{Calls: CallsHermes}, []string{
			`<tool_call>{"name": "get_current_weather", "arguments": {"city": `,
			`"San Fran`, `cisco", "unit"`, `: "celsius"}}</tool_call>`,
		}, []string{`{"city":`, `"San Fran`, `cisco","unit"`, `:"celsius"}`}},
		{"arguments_before_name", Format{Calls: CallsHermes}, []string{
			`<tool_call>{"arguments": {"symbol": "TS`, `LA"}, "name": "get_stock`, `_fundamentals"}`,
		}, []string{``, ``, `{"symbol":"TSLA"}`}},
		{"mistral_v11", Format{Calls: CallsMistral}, []string{
			`[TOOL_CALLS]add[ARGS]{"a": `, `3.5, "b"`, `: 4}`,
		}, []string{`{"a":`, `3.5,"b"`, `:4}`}},
		{"qwen3_coder", Format{Calls: CallsQwen3Coder}, []string{
			"<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n", "<parameter=b>\n2\n</para", "meter>\n</function>",
		}, []string{`{"a":1`, ``, `,"b":2}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewParser(c.format, Options{Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range c.pieces {
				var got strings.Builder
				for _, d := range p.Feed(s) {
					if d.Kind == CallArguments {
						got.WriteString(d.Text)
					}
				}
				if got.String() != c.want[i] {
					t.Errorf("piece %d %q: arguments %q, want %q", i, s, got.String(), c.want[i])
				}
			}
			if _, _, err := p.Finish(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMarkerSets: no marker of a set is inside another, which findMarker relies on.
func TestMarkerSets(t *testing.T) {
	t.Parallel()
	tools := loadTools(t)
	for c := CallsNone; c <= CallsHarmony; c++ {
		for r := ReasoningNone; r <= ReasoningHarmony; r++ {
			p, err := NewParser(Format{c, r}, Options{Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			for _, set := range [][]string{p.marks, p.resync, valueEnds, pythonEnds, harmonyMarks} {
				for _, a := range set {
					for _, b := range set {
						if a != b && strings.Contains(b[:len(b)-1], a) {
							t.Errorf("%v: marker %q is inside %q", Format{c, r}, a, b)
						}
					}
				}
			}
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	a, b := NewIDs(CallsHermes, 42), NewIDs(CallsHermes, 42)
	seen := map[string]bool{}
	for range 100 {
		id := a()
		if id != b() {
			t.Fatal("equal seeds gave different ids")
		}
		if len(id) != 29 || !strings.HasPrefix(id, "call_") || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	m := NewIDs(CallsMistral, 1)()
	if len(m) != 9 || strings.Trim(m, idAlphabet) != "" {
		t.Fatalf("Mistral id %q is not 9 letters and digits", m)
	}
	// The default generator is random.
	p1, _ := NewParser(Format{Calls: CallsHermes}, Options{Tools: loadTools(t)})
	p2, _ := NewParser(Format{Calls: CallsHermes}, Options{Tools: loadTools(t)})
	if p1.newID() == p2.newID() {
		t.Fatal("two parsers drew the same id")
	}
}

func TestNewParserBadTools(t *testing.T) {
	t.Parallel()
	cases := map[string][]Tool{
		"empty name":   {{Name: ""}},
		"duplicate":    {{Name: "a"}, {Name: "a"}},
		"bad schema":   {{Name: "a", Parameters: json.RawMessage(`[1]`)}},
		"bad required": {{Name: "a", Parameters: json.RawMessage(`{"required": "x"}`)}},
	}
	for name, tools := range cases {
		if _, err := NewParser(Format{Calls: CallsHermes}, Options{Tools: tools}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCallErrorMessage(t *testing.T) {
	t.Parallel()
	e := &CallError{Index: 2, Name: "get_current_weather", Kind: ErrInvalidArguments,
		Detail: `$.unit: "kelvin" is not one of "celsius", "fahrenheit"`, Text: "<tool_call>" + strings.Repeat("x", 300)}
	msg := e.Error()
	want := `toolcall: call 2 ("get_current_weather"): arguments do not match the tool's parameters: $.unit: "kelvin" is not one of "celsius", "fahrenheit" in "<tool_call>xxx`
	if !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, `..."`) || len(msg) > len(want)+maxQuoted {
		t.Fatalf("message %q", msg)
	}
	if !errors.Is(e, ErrInvalidArguments) {
		t.Fatal("errors.Is does not see the kind")
	}
}

// TestErrEarly: an unknown tool is reported as soon as its name is complete, so an engine can stop generating.
func TestErrEarly(t *testing.T) {
	t.Parallel()
	p, err := NewParser(Format{Calls: CallsHermes}, Options{Tools: loadTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	p.Feed(`<tool_call>{"name": "rm_rf", `)
	if p.Err() == nil || !errors.Is(p.Err(), ErrUnknownTool) {
		t.Fatalf("Err() = %v", p.Err())
	}
	if d := p.Feed(`"arguments": {"path": "/"}}</tool_call>`); len(d) != 0 {
		t.Fatalf("deltas of an unknown tool's call: %+v", d)
	}
	res, _, err := p.Finish()
	var ce *CallError
	if !errors.As(err, &ce) || ce.Name != "rm_rf" || len(res.Calls) != 0 {
		t.Fatalf("Finish: %+v %v", res, err)
	}
	if want := `<tool_call>{"name": "rm_rf", "arguments": {"path": "/"}}</tool_call>`; ce.Text != want {
		t.Fatalf("error text %q, want %q", ce.Text, want)
	}
}
