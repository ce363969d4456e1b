package mlxengine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/grammar"
	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

// grammarCacheSize bounds the compiled grammars an instance keeps: clients send the same schema with every
// request, and a grammar's masks, computed as decoding reaches its states, are what make the next request
// with it fast.
const grammarCacheSize = 64

// grammarFor compiles (or finds in the cache) the grammar a request's output must follow: its response
// format, or its forced tool calls in the model family's syntax. nil when the output is free.
func (in *instance) grammarFor(req engine.GenerateRequest) (*grammar.Grammar, error) {
	forced := req.ToolChoice.Mode == engine.ToolChoiceRequired || req.ToolChoice.Mode == engine.ToolChoiceFunction
	switch {
	case forced && len(req.Tools) > 0:
		return in.toolCallGrammar(req)
	case in.format.Calls == toolcall.CallsHarmony && (req.ResponseFormat.Type == engine.FormatJSONObject || req.ResponseFormat.Type == engine.FormatJSONSchema):
		return in.harmonyFinalGrammar(req.ResponseFormat)
	case req.ResponseFormat.Type == engine.FormatJSONObject:
		return in.grammars.Get("json_object", func() (*grammar.Grammar, error) {
			n, err := grammar.AnyJSONObject(grammar.Options{})
			if err != nil {
				return nil, err
			}
			return grammar.Compile(n)
		})
	case req.ResponseFormat.Type == engine.FormatJSONSchema:
		opts := grammar.Options{Strict: req.ResponseFormat.Strict}
		g, err := in.grammars.JSONSchema(req.ResponseFormat.Schema, opts)
		if err != nil {
			return nil, schemaError("response_format.json_schema.schema", err)
		}
		return g, nil
	}
	return nil, nil
}

// toolCallGrammar is the grammar of a forced call: the family's wrapping of {"name": ..., arguments} (harmony's
// recipient header), one call or (parallel_tool_calls) several, of the named tool or any of them.
func (in *instance) toolCallGrammar(req engine.GenerateRequest) (*grammar.Grammar, error) {
	var tools []grammar.Tool
	strict := false
	key := &strings.Builder{}
	fmt.Fprintf(key, "tools/%d/%t/", in.format.Calls, req.ParallelToolCalls)
	for _, t := range req.Tools {
		if req.ToolChoice.Mode == engine.ToolChoiceFunction && t.Name != req.ToolChoice.Name {
			continue
		}
		tools = append(tools, grammar.Tool{Name: t.Name, Parameters: t.Parameters})
		strict = strict || t.Strict
		fmt.Fprintf(key, "%q:%s;", t.Name, grammar.SchemaKey(t.Parameters, grammar.Options{Strict: t.Strict}))
	}
	fmt.Fprintf(key, "strict=%t", strict)
	most := 1
	if req.ParallelToolCalls && req.ToolChoice.Mode == engine.ToolChoiceRequired {
		most = -1
	}
	opts := grammar.Options{Strict: strict}
	g, err := in.grammars.Get(key.String(), func() (*grammar.Grammar, error) {
		var root grammar.Node
		switch in.format.Calls {
		case toolcall.CallsHermes:
			call, err := grammar.ToolCallObject(tools, "arguments", opts)
			if err != nil {
				return nil, err
			}
			block := grammar.Seq(grammar.Literal("<tool_call>\n"), call, grammar.Literal("\n</tool_call>"))
			root = grammar.Repeat(block, 1, most, grammar.Literal("\n"))
		case toolcall.CallsLlama3:
			// Llama 3.1 writes one JSON call per turn.
			call, err := grammar.ToolCallObject(tools, "parameters", opts)
			if err != nil {
				return nil, err
			}
			root = call
		case toolcall.CallsHarmony:
			// One call per turn: harmony ends the turn at <|call|>.
			call, err := grammar.HarmonyCall(tools, opts)
			if err != nil {
				return nil, err
			}
			root = call
		case toolcall.CallsMistral:
			call, err := grammar.ToolCallObject(tools, "arguments", opts)
			if err != nil {
				return nil, err
			}
			root = grammar.Seq(grammar.Special("[TOOL_CALLS]"), grammar.Literal("["), grammar.Repeat(call, 1, most, grammar.Literal(", ")), grammar.Literal("]"))
		default:
			return nil, errNoCallGrammar
		}
		return grammar.Compile(root)
	})
	switch {
	case errors.Is(err, errNoCallGrammar):
		return nil, engine.InvalidParam("tool_choice", "model %s writes tool calls in a syntax the engine cannot constrain; use tool_choice auto", in.desc.ModelID)
	case err != nil:
		return nil, schemaError("tools", err)
	}
	return g, nil
}

var errNoCallGrammar = errors.New("no grammar for this family's tool calls")

// harmonyFinalGrammar is a response format for a harmony model: the JSON on the final channel, after an
// optional analysis message, as gpt-oss answers.
func (in *instance) harmonyFinalGrammar(f engine.ResponseFormat) (*grammar.Grammar, error) {
	opts := grammar.Options{Strict: f.Strict}
	key, param := "harmony/json_object", "response_format"
	if f.Type == engine.FormatJSONSchema {
		key, param = "harmony/json_schema/"+grammar.SchemaKey(f.Schema, opts), "response_format.json_schema.schema"
	}
	g, err := in.grammars.Get(key, func() (*grammar.Grammar, error) {
		var answer grammar.Node
		var err error
		if f.Type == engine.FormatJSONSchema {
			answer, err = grammar.JSONSchema(f.Schema, opts)
		} else {
			answer, err = grammar.AnyJSONObject(grammar.Options{})
		}
		if err != nil {
			return nil, err
		}
		return grammar.Compile(grammar.HarmonyFinal(answer))
	})
	if err != nil {
		return nil, schemaError(param, err)
	}
	return g, nil
}

// schemaError turns a grammar's refusal into the client's 400, naming the keyword and where it is.
func schemaError(param string, err error) error {
	var se *grammar.SchemaError
	if errors.As(err, &se) {
		return engine.InvalidParam(param, "%v", se)
	}
	if errors.Is(err, grammar.ErrTooLarge) {
		return engine.InvalidParam(param, "the schema is too large to constrain decoding to: %v", err)
	}
	if errors.Is(err, grammar.ErrNoMatch) {
		return engine.InvalidParam(param, "no JSON value matches the schema")
	}
	return engine.InvalidParam(param, "%v", err)
}

// grammarIndex is the instance's vocabulary prepared for masks, built the first time a request needs it
// (about 0.1 s and 3 MiB for a 128k vocabulary). Its end-of-sequence tokens are those the instance stops on,
// less harmony's <|call|> and <|return|>, which its grammars name as the output's last token.
func (in *instance) grammarIndex() (*grammar.Index, error) {
	in.indexOnce.Do(func() {
		v := grammar.VocabularyOf(in.tok)
		v.EOS = in.eos
		if in.format.Calls == toolcall.CallsHarmony {
			v = v.Unstop(grammar.HarmonyEnds...)
		}
		in.index, in.indexErr = grammar.NewIndex(v)
	})
	return in.index, in.indexErr
}

// constraint returns what makes each choice's matcher for g.
func (in *instance) constraint(g *grammar.Grammar) (func() (runner.Constraint, error), error) {
	idx, err := in.grammarIndex()
	if err != nil {
		return nil, engine.Errorf(engine.CodeInternal, "prepare the vocabulary for constrained decoding: %v", err)
	}
	if _, err := g.NewMatcher(idx); err != nil { // e.g. a special token the vocabulary lacks
		return nil, engine.InvalidParam("tool_choice", "cannot constrain this model's output: %v", err)
	}
	return func() (runner.Constraint, error) {
		m, err := g.NewMatcher(idx)
		if err != nil {
			return nil, err
		}
		return &matcherConstraint{m: m}, nil
	}, nil
}

// matcherConstraint is a grammar matcher as the runner's constraint. It fits the output to the tokens left
// (grammar.Matcher.Fit): when the budget reaches the shortest completion, only tokens that keep a complete
// output within reach stay allowed, so a free string closes, then the object around it.
type matcherConstraint struct {
	m       *grammar.Matcher
	mask    []uint64
	left    int // tokens the sequence may still generate; 0: not told
	steered bool
}

func (c *matcherConstraint) Within(left int) { c.left = left }

func (c *matcherConstraint) Mask(logits []float32) {
	c.mask = c.m.Mask(c.mask)
	if c.left > 0 && c.m.Fit(c.mask, c.left) {
		c.steered = true
	}
	grammar.ApplyMask(logits, c.mask)
}

func (c *matcherConstraint) Accept(tok int32) error { return c.m.Accept(tok) }
func (c *matcherConstraint) Done() bool             { return c.m.Done() }
func (c *matcherConstraint) Steered() bool          { return c.steered }
