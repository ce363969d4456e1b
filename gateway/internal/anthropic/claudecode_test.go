package anthropic

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apitest"
)

// TestParseClaudeCode runs the requests Claude Code 2.1.328 sent (captured with a logging server, in
// testdata/claude-code-*.json) through the parser. What the engine gets of each, message by message, is in
// testdata/claude-code-*.parsed.golden: a system prompt first, Claude Code's environment as a system message
// where it sent it, the tools the model sees (its deferred placeholder left out) and thinking on.
func TestParseClaudeCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file      string
		roles     string // of the engine messages, in order
		lastTool  string // the content of the last message, a tool result
		wantTools int
	}{
		{file: "claude-code-first", roles: "system user system", wantTools: 11},
		{file: "claude-code-tool-result", roles: "system user system assistant tool", lastTool: "(Bash completed with no output)", wantTools: 11},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(filepath.Join("testdata", c.file+".json"))
			if err != nil {
				t.Fatal(err)
			}
			r, perr := ParseMessages(body)
			if perr != nil {
				t.Fatalf("%d %s", perr.Status, AppendError(nil, perr))
			}
			var roles []string
			for _, m := range r.Messages {
				roles = append(roles, m.Role)
			}
			if got := strings.Join(roles, " "); got != c.roles {
				t.Errorf("roles %q, want %q", got, c.roles)
			}
			if c.lastTool != "" && r.Messages[len(r.Messages)-1].Content != c.lastTool {
				t.Errorf("last message %+v, want the tool's %q", r.Messages[len(r.Messages)-1], c.lastTool)
			}
			if len(r.Tools) != c.wantTools {
				t.Errorf("%d tools, want %d", len(r.Tools), c.wantTools)
			}
			if !r.Stream || r.Sampling.MaxTokens != 128000 || r.TemplateVars["enable_thinking"] != true {
				t.Errorf("stream %v, max_tokens %d, template vars %v; want a stream of up to 128000 tokens with thinking",
					r.Stream, r.Sampling.MaxTokens, r.TemplateVars)
			}
			apitest.Golden(t, c.file+".parsed.golden", []byte(summary(r)))
		})
	}
}

// summary is a parsed request in a few lines a reviewer can read: each message's role, size and head, the
// tools by name, the rest of the fields.
func summary(r Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s stream %v max_tokens %d temperature %v template_vars %v parallel_tool_calls %v tool_choice %+v\n",
		r.Model, r.Stream, r.Sampling.MaxTokens, r.Sampling.Temperature, r.TemplateVars, r.ParallelToolCalls, r.ToolChoice)
	for i, m := range r.Messages {
		head, _, _ := strings.Cut(m.Content, "\n")
		if len(head) > 60 {
			head = head[:60]
		}
		fmt.Fprintf(&b, "message %d: %s, %d bytes: %q", i, m.Role, len(m.Content), head)
		if m.Reasoning != "" {
			fmt.Fprintf(&b, " reasoning %q", m.Reasoning)
		}
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " call %s %s %s", c.ID, c.Name, c.Arguments)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, " answers %s", m.ToolCallID)
		}
		b.WriteByte('\n')
	}
	for _, tool := range r.Tools {
		fmt.Fprintf(&b, "tool %s: %d bytes of description, %d of schema\n", tool.Name, len(tool.Description), len(tool.Parameters))
	}
	return b.String()
}
