package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestCodexRequests parses the requests Codex CLI 0.169 sent (captured from its first and second turns, in
// testdata/codex-*.json) and writes what the engine is asked to testdata/codex_requests.golden: the messages
// (role, size, reasoning, calls), the tools the model sees, what was left out, the routing hint.
//
//   - codex-turn1.json: a model Codex has no metadata for (what `-m <a duet model>` sends): function tools, a
//     namespace (multi_agent_v1), a hosted web_search, developer messages, reasoning.summary, client_metadata.
//   - codex-turn1-additional-tools.json: its default model: the tools as an additional_tools input item, a
//     custom tool with a lark grammar inside the namespace functions, reasoning.context, text.verbosity.
//   - codex-turn2-tool-output.json: the second turn of a tool call, with the reasoning item duet sealed in the
//     first (under another node's key: it is dropped and its reasoning_text read instead).
func TestCodexRequests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file    string
		tools   []string // some of the functions the model must see
		ignored string
		summary bool
	}{
		{"codex-turn1.json", []string{"exec_command", "multi_agent_v1__spawn_agent", "update_goal"}, "web_search", true},
		{"codex-turn1-additional-tools.json", []string{"functions__exec", "clock__sleep", "collaboration__spawn_agent"}, "", false},
		{"codex-turn2-tool-output.json", []string{"exec_command"}, "web_search", true},
	}
	var golden bytes.Buffer
	for _, c := range cases {
		raw, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		r, perr := Parse(raw, Options{Sealer: testSealer})
		if perr != nil {
			t.Errorf("%s: %v (param %s)", c.file, perr, perr.Param)
			continue
		}
		g := &r.Generate
		seen := map[string]bool{}
		for _, tl := range g.Tools {
			seen[tl.Name] = true
		}
		for _, name := range c.tools {
			if !seen[name] {
				t.Errorf("%s: the model does not see %s", c.file, name)
			}
		}
		if got := strings.Join(r.IgnoredTools, ","); got != c.ignored {
			t.Errorf("%s: ignored tools %q, want %q", c.file, got, c.ignored)
		}
		if !r.Stream || r.CacheKey == "" || r.Echo.sealer == nil || r.Echo.summary != c.summary {
			t.Errorf("%s: stream %v, cache key %q, sealed %v, summary %v", c.file, r.Stream, r.CacheKey, r.Echo.sealer != nil, r.Echo.summary)
		}
		fmt.Fprintf(&golden, "%s: model %s, prompt bytes %d, ignored %v, template vars %v, tool choice %+v, parallel %v\n",
			c.file, r.Model, r.PromptBytes, r.IgnoredTools, g.TemplateVars, g.ToolChoice, g.ParallelToolCalls)
		for _, m := range g.Messages {
			fmt.Fprintf(&golden, "  %s: %d bytes", m.Role, len(m.Content))
			if m.Reasoning != "" {
				fmt.Fprintf(&golden, ", reasoning %q", m.Reasoning)
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(&golden, ", calls %s(%s) as %s", tc.Name, tc.Arguments, tc.ID)
			}
			if m.ToolCallID != "" {
				fmt.Fprintf(&golden, ", answers %s (%s)", m.ToolCallID, m.Name)
			}
			golden.WriteByte('\n')
		}
		for _, tl := range g.Tools {
			fmt.Fprintf(&golden, "  tool %s strict=%v, %d bytes of schema, %d of description\n", tl.Name, tl.Strict, len(tl.Parameters), len(tl.Description))
		}
	}
	apitest.Golden(t, "codex_requests.golden", golden.Bytes())
}

// TestCodexToolsBackAndForth: the calls a response returns, sent back as Codex sends them (namespaced
// function_call, custom_tool_call in a namespace and not, their outputs, the sealed reasoning), are the
// engine calls the model made, and its reasoning.
func TestCodexToolsBackAndForth(t *testing.T) {
	t.Parallel()
	s := scripts()
	var codex script
	for _, sc := range s {
		if sc.name == "codex" {
			codex = sc
		}
	}
	var resp struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(whole(t, codex), &resp); err != nil {
		t.Fatal(err)
	}
	var items []string
	for _, o := range resp.Output {
		items = append(items, string(o))
	}
	body := strings.Replace(codexBody, `{"type":"message","role":"user","content":[{"type":"input_text","text":"ls"}]}]`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"ls"}]},`+strings.Join(items, ",")+`,
		{"type":"function_call_output","call_id":"call_1","output":"a.txt"},
		{"type":"custom_tool_call_output","call_id":"call_2","output":"a"},
		{"type":"custom_tool_call_output","call_id":"call_3","output":[{"type":"input_text","text":"applied"}]}]`, 1)
	// Codex sends reasoning back without its reasoning_text content: only the sealed text says what it was.
	body = strings.Replace(body, `"content":[{"type":"reasoning_text","text":"List the files."}]`, `"content":null`, 1)
	r, err := Parse([]byte(body), Options{Sealer: testSealer})
	if err != nil {
		t.Fatalf("%v (param %s)\n%s", err, err.Param, body)
	}
	msgs := r.Generate.Messages
	want := []engine.Message{
		{Role: "assistant", Reasoning: "List the files.", ToolCalls: codexCalls.ToolCalls},
		{Role: "tool", Content: "a.txt", ToolCallID: "call_1", Name: "shell__list"},
		{Role: "tool", Content: "a", ToolCallID: "call_2", Name: "functions__exec"},
		{Role: "tool", Content: "applied", ToolCallID: "call_3", Name: "apply"},
	}
	if len(msgs) < len(want) {
		t.Fatalf("messages %+v", msgs)
	}
	got := msgs[len(msgs)-len(want):]
	for i := range want {
		g, w := got[i], want[i]
		if g.Role != w.Role || g.Content != w.Content || g.Reasoning != w.Reasoning || g.ToolCallID != w.ToolCallID || g.Name != w.Name || fmt.Sprint(g.ToolCalls) != fmt.Sprint(w.ToolCalls) {
			t.Errorf("message %d: %+v, want %+v", i, g, w)
		}
	}

	// Under another key the sealed reasoning does not open, and is dropped: the turn goes on with what else the
	// item says (its summary), or without it.
	other, _ := NewSealer(bytes.Repeat([]byte{8}, 32))
	body = strings.Replace(body, `"summary":[{"type":"summary_text","text":"List the files."}]`, `"summary":[]`, 1)
	r, err = Parse([]byte(body), Options{Sealer: other})
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Generate.Messages[len(r.Generate.Messages)-len(want)]; m.Reasoning != "" || len(m.ToolCalls) != 3 {
		t.Errorf("reasoning sealed under another key reads %q", m.Reasoning)
	}
}

func TestSealer(t *testing.T) {
	t.Parallel()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	old, _ := NewSealer(k1)
	rotated, err := NewSealer(k2, k1) // a cluster that moved to a new secret still reads the old one's
	if err != nil {
		t.Fatal(err)
	}
	sealed := old.Seal("thoughts ✓")
	if !strings.HasPrefix(sealed, "duet1:") || strings.Contains(sealed, "thoughts") {
		t.Fatalf("sealed %q", sealed)
	}
	for name, s := range map[string]*Sealer{"same key": old, "rotated": rotated} {
		if text, ok := s.Open(sealed); !ok || text != "thoughts ✓" {
			t.Errorf("%s: opened %q %v", name, text, ok)
		}
	}
	other, _ := NewSealer(k2)
	flipped := []byte(sealed)
	flipped[len(flipped)-3] ^= 1
	var none *Sealer
	for name, c := range map[string]struct {
		s      *Sealer
		sealed string
	}{
		"another key":        {other, sealed},
		"altered":            {old, string(flipped)},
		"truncated":          {old, sealed[:10]},
		"OpenAI's":           {old, "gAAAAABo-opaque"},
		"not base64":         {old, "duet1:***"},
		"no sealer":          {none, sealed},
		"the prefix alone":   {old, "duet1:"},
		"too long to read":   {old, "duet1:" + strings.Repeat("A", maxSealed)},
		"empty":              {old, ""},
		"a nonce and no tag": {old, "duet1:AAAAAAAAAAAAAAAA"},
	} {
		if text, ok := c.s.Open(c.sealed); ok || text != "" {
			t.Errorf("%s: opened %q", name, text)
		}
	}
	if none.Seal("x") != "" {
		t.Error("a nil sealer sealed")
	}
	if _, err := NewSealer(k1[:16]); err == nil {
		t.Error("a 16-byte key was taken")
	}
}

// TestHostedTools: hosted tools are left out and named, once each; with HostedToolsError they are refused.
func TestHostedTools(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","input":"hi","tools":[{"type":"web_search","external_web_access":false},` + weatherTool + `,{"type":"file_search"},{"type":"web_search"},{"type":"code_interpreter","container":{"type":"auto"}},{"type":"image_generation"},{"type":"local_shell"}]}`
	r, err := Parse([]byte(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.IgnoredTools, ","); got != "web_search,file_search,code_interpreter,image_generation,local_shell" || len(r.Generate.Tools) != 1 {
		t.Errorf("ignored %q, tools %v", got, r.Generate.Tools)
	}
	out := AppendResponse(nil, meta, r.Echo, &apicore.Result{Final: apitest.Final(engine.FinishStop, usage)})
	if !bytes.Contains(out, []byte(`"ignored_tools":["web_search","file_search","code_interpreter","image_generation","local_shell"]`)) {
		t.Errorf("the response does not name the ignored tools: %s", out)
	}
	if _, err := Parse([]byte(body), Options{HostedTools: HostedToolsError}); err == nil || err.Param != "tools[0].type" {
		t.Errorf("with HostedToolsError: %v", err)
	}
}

// TestCustomToolGrammar: a regex grammar becomes the pattern of the input string, which engines with grammars
// enforce; a lark grammar, which none does, is told to the model in the description.
func TestCustomToolGrammar(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","input":"hi","tools":[{"type":"custom","name":"date","format":{"type":"grammar","syntax":"regex","definition":"\\d{4}-\\d{2}"}},
		{"type":"custom","name":"js","description":"Run it.","format":{"type":"grammar","syntax":"lark","definition":"start: /.+/"}},
		{"type":"custom","name":"free","format":{"type":"text"}}],"tool_choice":{"type":"custom","name":"date"}}`
	r, err := Parse([]byte(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ params, desc string }{
		"date": {`{"additionalProperties":false,"properties":{"input":{"description":"the tool's input, free-form text","pattern":"\\d{4}-\\d{2}","type":"string"}},"required":["input"],"type":"object"}`, ""},
		"js":   {`{"additionalProperties":false,"properties":{"input":{"description":"the tool's input, free-form text","type":"string"}},"required":["input"],"type":"object"}`, "Run it.\n\nThe input must match this Lark grammar:\nstart: /.+/"},
		"free": {`{"additionalProperties":false,"properties":{"input":{"description":"the tool's input, free-form text","type":"string"}},"required":["input"],"type":"object"}`, ""},
	}
	for _, tl := range r.Generate.Tools {
		w := want[tl.Name]
		if string(tl.Parameters) != w.params || tl.Description != w.desc || !tl.Strict {
			t.Errorf("%s: %s %q strict %v", tl.Name, tl.Parameters, tl.Description, tl.Strict)
		}
	}
	if tc := r.Generate.ToolChoice; tc.Mode != engine.ToolChoiceFunction || tc.Name != "date" {
		t.Errorf("tool choice %+v", tc)
	}
}
