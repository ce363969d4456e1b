package grammar

import (
	"errors"
	"fmt"
)

// Tool is a function a forced tool call may name.
type Tool struct {
	Name string
	// Parameters is the JSON schema of the arguments; empty means any JSON object.
	Parameters []byte
}

// ToolCallObject matches one tool call as a JSON object: {"name": <a tool's name>, <argumentsKey>: <that
// tool's arguments>}, name first, so that each name is paired with its own parameter schema (an anyOf over
// the tools). argumentsKey is "arguments" for Hermes/Qwen and Mistral, "parameters" for Llama 3.1. Wrap it in
// the model family's format with Seq, Literal and Special, and in Repeat for parallel calls; doc.go shows how.
// Errors in a tool's schema are *SchemaError values, prefixed with the tool's name.
func ToolCallObject(tools []Tool, argumentsKey string, opts Options) (Node, error) {
	if len(tools) == 0 {
		return Node{}, errors.New("grammar: no tools to call")
	}
	k, err := newJSONKit(opts)
	if err != nil {
		return Node{}, err
	}
	seen := map[string]bool{}
	var alts []*node
	for _, t := range tools {
		if seen[t.Name] {
			return Node{}, fmt.Errorf("grammar: tool %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		args := k.anyObject(1)
		if len(t.Parameters) > 0 {
			doc, err := parseJSON(t.Parameters)
			if err != nil {
				return Node{}, fmt.Errorf("tool %q: %w", t.Name, err)
			}
			c := &schemaCompiler{doc: doc, k: k, memo: map[ruleKey]*node{}}
			if args, err = c.schema(doc, "", 1, tAll); err != nil {
				return Node{}, fmt.Errorf("tool %q: %w", t.Name, err)
			}
		}
		alts = append(alts, objectNode(&objectSpec{ws: k.ws, props: []objProp{
			{key: jsonLiteral("name"), value: lit(jsonLiteral(t.Name)), required: true},
			{key: jsonLiteral(argumentsKey), value: args, required: true},
		}}))
	}
	return Node{alt(alts...)}, nil
}
