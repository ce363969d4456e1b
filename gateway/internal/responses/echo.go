package responses

import (
	"bytes"
	"encoding/json"

	"github.com/duet-ai/duet/sdk/engine"
)

// Echo is what a response object repeats of its request: OpenAI's restates the parameters it ran with
// (instructions, tools, sampling, the text format), and clients read them back. It is rendered once, when
// the request is parsed, and spliced into each response object of the request (a stream has three).
//
// It also holds what rendering the answer needs of the request: which functions stand for tools in namespaces
// or custom tools, and the sealer when the request included reasoning.encrypted_content.
type Echo struct {
	members []byte              // JSON object members, without the braces
	names   map[string]toolName // see toolSet.names
	sealer  *Sealer             // nil: reasoning items carry no encrypted_content
	// summary: the request asked for reasoning summaries. An open model's reasoning is its own summary: the
	// whole text is given as one summary part, which is what clients such as Codex show.
	summary bool
}

// tool is what the function the model called stands for.
func (e *Echo) tool(name string) toolName {
	if e != nil {
		if tn, ok := e.names[name]; ok {
			return tn
		}
	}
	return toolName{name: name}
}

// seal is the encrypted_content of reasoning text: "" when the request did not include it.
func (e *Echo) seal(text string) string {
	if e == nil {
		return ""
	}
	return e.sealer.Seal(text)
}

type echoBody struct {
	Background         bool              `json:"background"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	Metadata           map[string]string `json:"metadata"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          echoReasoning     `json:"reasoning"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               echoText          `json:"text"`
	ToolChoice         any               `json:"tool_choice"`
	Tools              []echoTool        `json:"tools"`
	TopLogprobs        int               `json:"top_logprobs"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	User               *string           `json:"user"`
	// IgnoredTools is duet's: the hosted tools left out of what the model saw.
	IgnoredTools []string `json:"ignored_tools,omitempty"`
}

type echoReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type echoText struct {
	Format    echoFormat `json:"format"`
	Verbosity string     `json:"verbosity"`
}

type echoFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description *string         `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type echoTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

type echoToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

func newEcho(b *body, r *Request, f formatBody) *Echo {
	g := &r.Generate
	e := echoBody{
		Instructions: b.Instructions, MaxOutputTokens: b.MaxOutputTokens, MaxToolCalls: b.MaxToolCalls,
		Metadata: b.Metadata, ParallelToolCalls: g.ParallelToolCalls, ServiceTier: "default",
		Temperature: g.Sampling.Temperature, TopP: g.Sampling.TopP, Truncation: "disabled", User: b.User,
		Text: echoText{Format: echoFormat{Type: engine.FormatText}, Verbosity: "medium"}, Tools: []echoTool{},
		IgnoredTools: r.IgnoredTools,
	}
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	if e.TopP == 0 {
		e.TopP = 1
	}
	if b.Truncation != nil {
		e.Truncation = *b.Truncation
	}
	if b.Reasoning != nil {
		e.Reasoning = echoReasoning{Effort: b.Reasoning.Effort, Summary: b.Reasoning.Summary}
		if e.Reasoning.Summary == nil {
			e.Reasoning.Summary = b.Reasoning.GenerateSummary
		}
	}
	if b.Text != nil && b.Text.Verbosity != nil {
		e.Text.Verbosity = *b.Text.Verbosity
	}
	switch rf := g.ResponseFormat; rf.Type {
	case engine.FormatJSONObject:
		e.Text.Format.Type = rf.Type
	case engine.FormatJSONSchema:
		strict := rf.Strict
		e.Text.Format = echoFormat{Type: rf.Type, Name: rf.Name, Description: f.Description, Schema: rf.Schema, Strict: &strict}
	}
	for _, t := range g.Tools {
		et := echoTool{Type: "function", Name: t.Name, Parameters: t.Parameters, Strict: t.Strict}
		if t.Description != "" {
			et.Description = &t.Description
		}
		e.Tools = append(e.Tools, et)
	}
	switch tc := g.ToolChoice; tc.Mode {
	case engine.ToolChoiceFunction:
		e.ToolChoice = echoToolChoice{Type: "function", Name: tc.Name}
	case "":
		e.ToolChoice = engine.ToolChoiceAuto
	default:
		e.ToolChoice = tc.Mode
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		// Every value is plain data or JSON the parser checked: this cannot fail.
		panic("responses: rendering the echo: " + err.Error())
	}
	members := bytes.TrimSpace(buf.Bytes())
	return &Echo{members: members[1 : len(members)-1]}
}
