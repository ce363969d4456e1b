package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// Tools: the model sees functions, and the Responses API's other kinds of tool become functions, or are left
// out, as follows.
//
//   - function: as it is.
//   - namespace (a named group of function and custom tools): each member is a function named
//     NAMESPACE__NAME, as Codex names the tools of an MCP server, its description led by the namespace's. A call
//     of it comes back as OpenAI returns a call into a namespace: a function_call with name NAME and namespace
//     NAMESPACE; a function_call item with a namespace on input is that function again.
//   - custom (free-form input): a function of one string argument, input. Its call comes back as a
//     custom_tool_call whose input is that string. A regex grammar becomes the string's JSON Schema pattern,
//     which engines with grammars enforce; a lark grammar cannot be enforced, so its definition is put in the
//     description for the model to follow.
//   - hosted tools (web_search, file_search, code_interpreter, image_generation, mcp, local_shell, ...), which
//     OpenAI runs on its platform or its own models are trained to call: duet runs none of them, so they are
//     left out of what the model sees, and the response says which were (ignored_tools, and the
//     Duet-Ignored-Tools header). With HostedToolsError they are a 400 instead.

// HostedTools says what to do with a hosted tool in a request.
type HostedTools string

const (
	HostedToolsDrop  HostedTools = "drop"  // leave it out of what the model sees and say so in the response
	HostedToolsError HostedTools = "error" // refuse the request
)

// namespaceSep joins a namespace and a tool's name into the function the model sees.
const namespaceSep = "__"

// hostedTools are OpenAI's tool types that duet cannot run, and why.
var hostedTools = func() map[string]string {
	m := map[string]string{}
	for _, t := range []string{"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
		"file_search", "code_interpreter", "image_generation", "mcp", "tool_search"} {
		m[t] = "a tool OpenAI runs on its platform"
	}
	for _, t := range []string{"computer_use_preview", "computer_use", "local_shell", "shell", "apply_patch"} {
		m[t] = "a tool OpenAI's own models are trained to call; declare what the client runs as a function"
	}
	return m
}()

type toolBody struct {
	Type        *string           `json:"type"`
	Name        *string           `json:"name"`
	Description *string           `json:"description"`
	Parameters  json.RawMessage   `json:"parameters"`
	Strict      *bool             `json:"strict"`
	Format      json.RawMessage   `json:"format"` // custom
	Tools       []json.RawMessage `json:"tools"`  // namespace
}

type customFormat struct {
	Type       *string `json:"type"`
	Syntax     *string `json:"syntax"`
	Definition *string `json:"definition"`
}

// toolName is what a function the model sees stands for.
type toolName struct {
	namespace string // "" for a tool at the top level
	name      string
	custom    bool // a custom tool: its one argument, input, is the call's input
}

// toolSet gathers a request's tools, from its tools and from additional_tools input items.
type toolSet struct {
	hosted  HostedTools
	fns     []apicore.Function
	names   map[string]toolName // the function's name -> what it stands for, for those that are not plain functions
	ignored []string            // hosted tool types left out, in order, each once
}

// add adds the tools of the array at param.
func (s *toolSet) add(param string, raw []json.RawMessage) *apicore.Error {
	for i, r := range raw {
		if err := s.addTool(fmt.Sprintf("%s[%d]", param, i), r, ""); err != nil {
			return err
		}
	}
	return nil
}

func (s *toolSet) addTool(param string, raw json.RawMessage, namespace string) *apicore.Error {
	var t toolBody
	if err := decodeAt(raw, param, &t); err != nil {
		return err
	}
	if t.Type == nil {
		return apicore.BadRequest(param+".type", "%s is missing its type", param)
	}
	switch typ := *t.Type; {
	case typ == "function":
		strict := t.Strict
		if strict == nil {
			strict = new(bool)
			*strict = true // the Responses API's default, unlike chat's
		}
		f := apicore.Function{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: strict, Param: param}
		if namespace != "" {
			s.qualify(&f, namespace, false)
		}
		s.fns = append(s.fns, f)
	case typ == "custom":
		f, err := customFunction(param, &t)
		if err != nil {
			return err
		}
		s.qualify(&f, namespace, true)
		s.fns = append(s.fns, f)
	case typ == "namespace" && namespace == "":
		if t.Name == nil || !validName(*t.Name) {
			return apicore.BadRequest(param+".name", "%s: a namespace's name must be 1 to 64 letters, digits, _ or -", param)
		}
		ns := *t.Name
		for i, m := range t.Tools {
			mp := fmt.Sprintf("%s.tools[%d]", param, i)
			if err := s.addTool(mp, m, ns); err != nil {
				return err
			}
			if t.Description != nil && *t.Description != "" {
				f := &s.fns[len(s.fns)-1]
				d := *t.Description
				if f.Description != nil && *f.Description != "" {
					d += "\n\n" + *f.Description
				}
				f.Description = &d
			}
		}
	case hostedTools[typ] != "" && namespace == "":
		if s.hosted == HostedToolsError {
			return apicore.BadRequest(param+".type", "%s is of type %q, %s: duet runs only the client's tools (function, custom and namespace), and this server refuses others (--hosted-tools=error)", param, typ, hostedTools[typ])
		}
		for _, seen := range s.ignored {
			if seen == typ {
				return nil
			}
		}
		s.ignored = append(s.ignored, typ)
	default:
		where := "only function, custom, namespace and OpenAI's hosted tools (which are left out)"
		if namespace != "" {
			where = "a namespace holds only function and custom tools"
		}
		return apicore.BadRequest(param+".type", "%s: tool type %q is not supported; %s", param, typ, where)
	}
	return nil
}

// qualify renames f to the function the model sees for a tool of namespace, and remembers what it stands for.
func (s *toolSet) qualify(f *apicore.Function, namespace string, custom bool) {
	if f.Name == nil {
		return // apicore.Tools says it has no name
	}
	tn := toolName{namespace: namespace, name: *f.Name, custom: custom}
	name := *f.Name
	if namespace != "" {
		name = namespace + namespaceSep + name
	}
	f.Name = &name
	if s.names == nil {
		s.names = map[string]toolName{}
	}
	s.names[name] = tn
}

// customFunction is the function a custom tool is to the model: one string argument, input.
func customFunction(param string, t *toolBody) (apicore.Function, *apicore.Error) {
	input := map[string]any{"type": "string", "description": "the tool's input, free-form text"}
	var desc strings.Builder
	if t.Description != nil {
		desc.WriteString(*t.Description)
	}
	if f := bytes.TrimSpace(t.Format); len(f) > 0 && string(f) != "null" {
		var cf customFormat
		if err := decodeAt(f, param+".format", &cf); err != nil {
			return apicore.Function{}, err
		}
		switch {
		case cf.Type == nil:
			return apicore.Function{}, apicore.BadRequest(param+".format.type", "%s.format is missing its type", param)
		case *cf.Type == "text":
		case *cf.Type == "grammar":
			if cf.Definition == nil || *cf.Definition == "" {
				return apicore.Function{}, apicore.BadRequest(param+".format.definition", "%s.format is a grammar without a definition", param)
			}
			syntax := ""
			if cf.Syntax != nil {
				syntax = *cf.Syntax
			}
			switch syntax {
			case "regex":
				input["pattern"] = *cf.Definition
			case "lark":
				// No engine enforces a lark grammar: the model is told it.
				if desc.Len() > 0 {
					desc.WriteString("\n\n")
				}
				desc.WriteString("The input must match this Lark grammar:\n")
				desc.WriteString(*cf.Definition)
			default:
				return apicore.Function{}, apicore.BadRequest(param+".format.syntax", "%s.format.syntax must be lark or regex, got %q", param, syntax)
			}
		default:
			return apicore.Function{}, apicore.BadRequest(param+".format.type", "%s.format.type must be text or grammar, got %q", param, *cf.Type)
		}
	}
	params, _ := json.Marshal(map[string]any{
		"type": "object", "properties": map[string]any{"input": input}, "required": []string{"input"}, "additionalProperties": false,
	})
	d := desc.String()
	strict := true
	return apicore.Function{Name: t.Name, Description: &d, Parameters: params, Strict: &strict, Param: param}, nil
}

// validName is OpenAI's pattern of tool names.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// customInput is the input of a call of a custom tool: the string argument input of the function the model
// called, or, when the model wrote something else, its arguments as they are.
func customInput(arguments string) string {
	var a struct {
		Input *string `json:"input"`
	}
	if err := json.Unmarshal([]byte(arguments), &a); err != nil || a.Input == nil {
		return arguments
	}
	return *a.Input
}
