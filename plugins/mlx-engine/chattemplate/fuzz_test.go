package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRewriteFilters: the rewrite only ever renames tojson, so undoing the rename gives the input back.
func FuzzRewriteFilters(f *testing.F) {
	for _, s := range []string{`{{ x | tojson }}`, `{% raw %}{{ x|tojson }}{% endraw %}`, `{# | tojson #}`, `{{ "|tojson" }}`} {
		f.Add(s)
	}
	addConfigTemplates(f)
	f.Fuzz(func(t *testing.T, src string) {
		if strings.Contains(src, tojsonName) {
			return
		}
		if got := strings.ReplaceAll(rewriteFilters(src), tojsonName, "tojson"); got != src {
			t.Fatalf("rewriteFilters changed more than the filter name:\n in %q\nout %q", src, got)
		}
	})
}

// FuzzParse: any template source compiles or fails with an error; none panics the caller. Short seeds keep
// the fuzzer's minimization of interesting inputs quick.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{% for m in messages %}{{ m.role|upper }}:{{ m.content.strip() }}{% endfor %}`,
		`{%- set ns = namespace(x=1) %}{% if add_generation_prompt and ns.x > 0 %}{{ bos_token ~ 'a' }}{% endif %}`,
		`{{ messages[-1:] | tojson(indent=2) }}{% raw %}{{x}}{% endraw %}{# c #}`,
		`{% if messages|length != 1 %}{{ raise_exception('one') }}{% else %}{{ messages[0]['content'][::-1] }}{% endif %}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src, "<s>", "</s>")
		if err != nil {
			return
		}
		tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true})
	})
}

// FuzzRenderContent: message content is data, never template code; it comes out verbatim.
func FuzzRenderContent(f *testing.F) {
	tmpl, err := Load(filepath.Join("testdata", "llama2-chat"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("hello", "{{ 7*7 }}")
	f.Add("{% raw %}", "\x00\xff")
	f.Fuzz(func(t *testing.T, user, assistant string) {
		out, err := tmpl.Render(Input{Messages: []Message{
			{Role: "user", Content: "x" + user + "x"}, {Role: "assistant", Content: "y" + assistant + "y"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "x"+user+"x") || !strings.Contains(out, "y"+assistant+"y") {
			t.Fatalf("content not rendered verbatim: %q", out)
		}
	})
}

func addConfigTemplates(f *testing.F) {
	f.Helper()
	for _, dir := range []string{"llama2-chat", "features", "named"} {
		b, err := os.ReadFile(filepath.Join("testdata", dir, "tokenizer_config.json"))
		if err != nil {
			f.Fatal(err)
		}
		var c struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			f.Fatal(err)
		}
		if src, err := pickTemplate(c.ChatTemplate); err == nil {
			f.Add(src)
		}
	}
}
