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
	return toolAlts(tools, opts, func(k *jsonKit, name string, args *node) *node {
		return objectNode(&objectSpec{ws: k.ws, props: []objProp{
			{key: jsonLiteral("name"), value: lit(jsonLiteral(name)), required: true},
			{key: jsonLiteral(argumentsKey), value: args, required: true},
		}})
	})
}

// ToolCalls matches one call of any of the tools in a model family's own wrapping: call(name, args) for each
// tool, where args matches that tool's arguments object (its parameters schema; any object without one). It
// is ToolCallObject for syntaxes that do not write calls as {"name": ..., "arguments": ...} JSON, such as
// harmony's recipient header. Errors are as ToolCallObject's.
func ToolCalls(tools []Tool, opts Options, call func(name string, args Node) Node) (Node, error) {
	return toolAlts(tools, opts, func(_ *jsonKit, name string, args *node) *node { return call(name, Node{args}).get() })
}

// toolAlts is one of the tools' calls, each made by wrap from its name and its arguments' node.
func toolAlts(tools []Tool, opts Options, wrap func(k *jsonKit, name string, args *node) *node) (Node, error) {
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
		alts = append(alts, wrap(k, t.Name, args))
	}
	return Node{alt(alts...)}, nil
}

// Text matches any UTF-8 text, without special tokens: free prose inside a structured output, such as the
// analysis message harmony allows before a forced call. It is unbounded; max_tokens ends it (and Fit makes it
// end in time).
func Text() Node {
	return Node{repeat(runeSetNode([]runeRange{{0, 0xD7FF}, {0xE000, 0x10FFFF}}), 0, -1, nil)}
}

// Unstop returns the vocabulary with the special tokens of the given texts taken out of EOS, so that a grammar
// can name them with Special. Harmony's <|call|> and <|return|> end generation (the engine stops on them) and
// are also the last token of the output a grammar constrains: a forced call ends with <|call|>, not with any
// end-of-sequence token.
func (v Vocabulary) Unstop(texts ...string) Vocabulary {
	drop := map[int32]bool{}
	for _, s := range texts {
		if id, ok := v.Special[s]; ok {
			drop[id] = true
		}
	}
	out := v
	out.EOS = nil
	for _, id := range v.EOS {
		if !drop[id] {
			out.EOS = append(out.EOS, id)
		}
	}
	return out
}
