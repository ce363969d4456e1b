package enginetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/sdk/engine"
)

// The checks of this file hold engines to what their Capabilities claim beyond plain generation: several
// choices, tool calls, constrained JSON and logit bias. Each is skipped when the engine does not claim it.

// choices is a collected stream of a request for several choices.
type choices struct {
	tokens [][]engine.Token
	text   []string
	calls  [][]engine.ToolCall // reassembled from the streamed deltas
	finals []*engine.Final
}

// generateChoices runs a request and checks the invariants of a stream of several choices: every event names
// a choice of the request, every choice ends exactly once and nothing of it follows its end, and tool call
// deltas start a call with its id and name before they add to its arguments.
func (s *suite) generateChoices(t *testing.T, req engine.GenerateRequest) choices {
	t.Helper()
	n := max(req.N, 1)
	c := choices{tokens: make([][]engine.Token, n), text: make([]string, n), calls: make([][]engine.ToolCall, n),
		finals: make([]*engine.Final, n)}
	texts := make([]strings.Builder, n)
	err := s.e.Generate(s.ctx(t), req, func(ev engine.Event) error {
		i := ev.Choice
		if i < 0 || i >= n {
			t.Errorf("event of choice %d in a request for %d", i, n)
			return nil
		}
		if c.finals[i] != nil {
			t.Errorf("event of choice %d after its final event: %+v", i, ev)
		}
		switch {
		case ev.Token != nil:
			c.tokens[i] = append(c.tokens[i], *ev.Token)
			texts[i].WriteString(ev.Token.Text)
			for _, d := range ev.Token.ToolCalls {
				switch {
				case d.Index == len(c.calls[i]):
					if d.ID == "" || d.Name == "" {
						t.Errorf("choice %d: tool call %d starts without its id and name: %+v", i, d.Index, d)
					}
					c.calls[i] = append(c.calls[i], engine.ToolCall{ID: d.ID, Name: d.Name, Arguments: d.Arguments})
				case d.Index == len(c.calls[i])-1 && d.ID == "" && d.Name == "":
					c.calls[i][d.Index].Arguments += d.Arguments
				default:
					t.Errorf("choice %d: tool call delta %+v out of order (%d calls so far)", i, d, len(c.calls[i]))
				}
			}
		case ev.Final != nil:
			c.finals[i] = ev.Final
			texts[i].WriteString(ev.Final.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for i, f := range c.finals {
		if f == nil {
			t.Fatalf("choice %d never ended", i)
		}
		if f.FinishReason == engine.FinishError {
			t.Fatalf("choice %d failed: %s", i, f.Error)
		}
		if f.Usage.CompletionTokens != len(c.tokens[i]) {
			t.Errorf("choice %d: usage says %d completion tokens, the stream had %d", i, f.Usage.CompletionTokens, len(c.tokens[i]))
		}
		c.text[i] = texts[i].String()
	}
	return c
}

func (s *suite) choices(t *testing.T) {
	if s.desc.Capabilities.MaxChoices < 3 {
		t.Skip("the engine does not claim 3 choices per request")
	}
	req := s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens})
	req.N = 3
	c := s.generateChoices(t, req)
	for i := 1; i < 3; i++ {
		if !sameTokens(c.tokens[i], c.tokens[0]) {
			t.Errorf("greedy choice %d differs from choice 0:\n%q\n%q", i, c.text[i], c.text[0])
		}
	}
	seed := int64(7)
	req.Sampling = engine.Sampling{MaxTokens: s.cfg.MaxTokens, Temperature: 1, Seed: &seed}
	a, b := s.generateChoices(t, req), s.generateChoices(t, req)
	for i := range 3 {
		if !sameTokens(a.tokens[i], b.tokens[i]) {
			t.Errorf("seeded choice %d differs between two runs:\n%q\n%q", i, a.text[i], b.text[i])
		}
	}
}

// weatherTool's strings are bounded, so that a forced call ends within the check's max_tokens even from a
// model that writes noise (an engine's test model may): a grammar only guarantees that the output is valid
// when it ends.
var weatherTool = engine.Tool{Name: "get_weather", Description: "Get the current weather in a city",
	Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":24},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`),
	Strict:     true}

func (s *suite) forcedToolCall(t *testing.T) {
	caps := s.desc.Capabilities
	if !caps.Tools || !caps.Grammar || !caps.Chat {
		t.Skip("the engine does not claim tools with constrained decoding")
	}
	req := s.chat(engine.Sampling{MaxTokens: 256})
	req.Messages[1].Content = "What is the weather in Paris?"
	req.Tools = []engine.Tool{weatherTool, {Name: "get_time", Parameters: []byte(`{"type":"object","properties":{}}`)}}
	req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}
	c := s.generateChoices(t, req)
	f := c.finals[0]
	if f.FinishReason != engine.FinishToolCalls {
		t.Fatalf("finish reason %q of a forced tool call, want tool_calls (text %q)", f.FinishReason, c.text[0])
	}
	if len(f.ToolCalls) == 0 {
		t.Fatal("a forced tool call ended without tool calls")
	}
	call := f.ToolCalls[0]
	if call.Name != "get_weather" || call.ID == "" {
		t.Errorf("call %+v, want get_weather with an id", call)
	}
	var args struct {
		City *string `json:"city"`
		Unit string  `json:"unit"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args.City == nil || (args.Unit != "celsius" && args.Unit != "fahrenheit") {
		t.Errorf("arguments %s do not match the tool's strict schema (%v)", call.Arguments, err)
	}
	if len(c.calls[0]) > 0 && !slices.Equal(c.calls[0], f.ToolCalls) {
		t.Errorf("streamed tool calls %+v differ from the final's %+v", c.calls[0], f.ToolCalls)
	}
	if strings.TrimSpace(c.text[0]) != "" {
		t.Errorf("a forced tool call wrote content %q", c.text[0])
	}
}

func (s *suite) toolChoiceNone(t *testing.T) {
	if !s.desc.Capabilities.Tools || !s.desc.Capabilities.Chat {
		t.Skip("the engine does not claim tools")
	}
	req := s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens})
	req.Tools = []engine.Tool{weatherTool}
	req.ToolChoice = engine.ToolChoice{Mode: engine.ToolChoiceNone}
	c := s.generateChoices(t, req)
	if len(c.finals[0].ToolCalls) > 0 || len(c.calls[0]) > 0 || c.finals[0].FinishReason == engine.FinishToolCalls {
		t.Errorf("tool_choice none, but the engine called %+v", c.finals[0].ToolCalls)
	}
}

func (s *suite) jsonSchema(t *testing.T) {
	if !s.desc.Capabilities.Grammar {
		t.Skip("the engine does not claim constrained decoding")
	}
	schema := `{"type":"object","properties":{"answer":{"type":"string","enum":["yes","no"]},"sure":{"type":"boolean"}},"required":["answer","sure"],"additionalProperties":false}`
	req := s.chat(engine.Sampling{MaxTokens: 256})
	req.ResponseFormat = engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "verdict", Schema: []byte(schema), Strict: true}
	c := s.generateChoices(t, req)
	if c.finals[0].FinishReason != engine.FinishStop {
		t.Fatalf("finish reason %q for a schema of a few tokens (text %q)", c.finals[0].FinishReason, c.text[0])
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.text[0]), &v); err != nil {
		t.Fatalf("output %q is not a JSON object: %v", c.text[0], err)
	}
	answer, sure := string(v["answer"]), string(v["sure"])
	if len(v) != 2 || (answer != `"yes"` && answer != `"no"`) || (sure != "true" && sure != "false") {
		t.Errorf("output %q does not match the schema %s", c.text[0], schema)
	}
}

func (s *suite) logitBias(t *testing.T) {
	if !s.desc.Capabilities.LogitBias {
		t.Skip("the engine does not claim logit bias")
	}
	req := s.chat(engine.Sampling{MaxTokens: 2})
	plain := s.generate(t, s.ctx(t), req)
	if len(plain.tokens) == 0 {
		t.Skip("no token to bias against")
	}
	req.Sampling.LogitBias = map[int32]float64{plain.tokens[0].ID: -100}
	biased := s.generate(t, s.ctx(t), req)
	if len(biased.tokens) > 0 && biased.tokens[0].ID == plain.tokens[0].ID {
		t.Errorf("token %d still comes first with a bias of -100", plain.tokens[0].ID)
	}
}
