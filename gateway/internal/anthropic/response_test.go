package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

var meta = apitest.Meta("msg_abc", "fp_0123")

// usage is what every test generation used.
var usage = engine.Usage{PromptTokens: 12, CompletionTokens: 7, CachedTokens: 4}

// events are the engine events of the test generations, by name.
var events = map[string][]engine.Event{
	"text": {
		{Progress: &engine.Progress{Done: 12, Total: 12}},
		{Token: &engine.Token{ID: 1, Text: "Hé"}},
		{Token: &engine.Token{ID: 2}}, // held back: nothing to say yet
		{Token: &engine.Token{ID: 3, Text: "llo \"you\"\n"}},
		{Final: withText(apitest.Final(engine.FinishStop, usage), "!")},
	},
	"thinking_text": {
		{Token: &engine.Token{ID: 1, Reasoning: "The user "}},
		{Token: &engine.Token{ID: 2, Reasoning: "greets me."}},
		{Token: &engine.Token{ID: 3, Text: "Hello."}},
		{Final: apitest.Final(engine.FinishStop, usage)},
	},
	"tool_use": {
		{Token: &engine.Token{ID: 1, Reasoning: "Two cities."}},
		{Token: &engine.Token{ID: 2, Text: "Let me check."}},
		{Token: &engine.Token{ID: 3, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_1", Name: "get_weather"}}}},
		{Token: &engine.Token{ID: 4, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"city":`}}}},
		{Token: &engine.Token{ID: 5, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Oslo"}`}, {Index: 1, ID: "call_2", Name: "get_weather", Arguments: `{"city":"Lima"}`}}}},
		{Final: withCalls(apitest.Final(engine.FinishToolCalls, usage),
			engine.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`},
			engine.ToolCall{ID: "call_2", Name: "get_weather", Arguments: `{"city": "Lima"}`})},
	},
	// An engine that gives its calls only in the Final, one of them without an id and with arguments that
	// are not an object (it breaks the contract; the answer must still decode).
	"tool_use_unstreamed": {
		{Final: withCalls(apitest.Final(engine.FinishToolCalls, usage),
			engine.ToolCall{Name: "get_time", Arguments: ``},
			engine.ToolCall{ID: "call_9", Name: "get_weather", Arguments: `["Oslo"]`})},
	},
	// Claude Code's turn with the echo engine (TestClaudeCodeEcho): thinking, then a Bash call whose
	// arguments stream in pieces; and the answer after the tool's result.
	"claude_code_bash_call": {
		{Progress: &engine.Progress{Done: 2592, Total: 2592}},
		{Token: &engine.Token{ID: 1, Reasoning: "about: "}},
		{Token: &engine.Token{ID: 2, Reasoning: "Run the command."}},
		{Token: &engine.Token{ID: 3, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_ef6ad4f12d9c29f5", Name: "Bash"}}}},
		{Token: &engine.Token{ID: 4, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"comman`}}}},
		{Token: &engine.Token{ID: 5, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `d":"echo duet-e2e-ok"}`}}}},
		{Final: withCalls(apitest.Final(engine.FinishToolCalls, usage),
			engine.ToolCall{ID: "call_ef6ad4f12d9c29f5", Name: "Bash", Arguments: `{"command":"echo duet-e2e-ok"}`})},
	},
	"claude_code_bash_answer": {
		{Progress: &engine.Progress{Done: 2604, Total: 2604}},
		{Token: &engine.Token{ID: 1, Reasoning: "about: "}},
		{Token: &engine.Token{ID: 2, Reasoning: "duet-e2e-ok"}},
		{Token: &engine.Token{ID: 3, Text: "duet-e2e-ok"}},
		{Final: apitest.Final(engine.FinishStop, usage)},
	},
	"max_tokens": {
		{Token: &engine.Token{ID: 1, Text: "The answer is"}},
		{Final: apitest.Final(engine.FinishLength, usage)},
	},
	"empty": {
		{Final: apitest.Final(engine.FinishStop, usage)},
	},
}

func withText(f *engine.Final, text string) *engine.Final { f.Text = text; return f }

func withCalls(f *engine.Final, calls ...engine.ToolCall) *engine.Final {
	f.ToolCalls = calls
	return f
}

// TestMessageGolden renders each generation as a whole message and compares it with
// testdata/message_<name>.json. Run with -update to rewrite them after an intended change.
func TestMessageGolden(t *testing.T) {
	t.Parallel()
	for name := range events {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			apitest.GoldenJSON(t, "message_"+name+".json", AppendMessage(nil, meta, apitest.Result(events[name]...)))
		})
	}
	t.Run("routed", func(t *testing.T) {
		t.Parallel()
		apitest.GoldenJSON(t, "message_routed.json", AppendMessage(nil, apitest.Routed(meta), apitest.Result(events["text"]...)))
	})
	t.Run("count_tokens", func(t *testing.T) {
		t.Parallel()
		apitest.GoldenJSON(t, "count_tokens.json", AppendTokenCount(nil, 42))
	})
}

func TestStopReason(t *testing.T) {
	t.Parallel()
	for reason, want := range map[engine.FinishReason]string{
		engine.FinishStop: "end_turn", engine.FinishLength: "max_tokens", engine.FinishToolCalls: "tool_use",
	} {
		if got := StopReason(reason); got != want {
			t.Errorf("%s: %s, want %s", reason, got, want)
		}
	}
}

// TestErrorGolden renders every error the gateway raises in Anthropic's envelope (testdata/errors.golden,
// one per status) and checks each type against Anthropic's table.
func TestErrorGolden(t *testing.T) {
	t.Parallel()
	errs := []struct {
		err  *apicore.Error
		want string
	}{
		{apicore.BadRequest("messages", "messages: Field required"), TypeInvalidRequest},
		{apicore.Unauthorized("Incorrect API key provided."), TypeAuthentication},
		{&apicore.Error{Status: http.StatusForbidden, Type: apicore.TypeAuthentication, Code: "admin_key_required", Message: "This changes the cluster: it needs an admin key (--admin-key)."}, TypePermission},
		{apicore.ModelNotFound("claude-9"), TypeNotFound},
		{&apicore.Error{Status: http.StatusRequestEntityTooLarge, Type: apicore.TypeInvalidRequest, Code: "request_too_large", Message: "The request body is too large."}, TypeTooLarge},
		{apicore.FromEngine(&engine.Error{Code: engine.CodeInvalidOutput, Message: "the model wrote a tool call that cannot be used"}), TypeInvalidRequest},
		{apicore.TooManyRequests("the gateway is at capacity"), TypeRateLimit},
		{&apicore.Error{Status: 499, Type: apicore.TypeInvalidRequest, Code: "client_closed_request", Message: "the client closed the connection"}, TypeInvalidRequest},
		{apicore.Internal("internal error (request id r1)"), TypeAPI},
		{apicore.Unavailable("no instance of model \"m\" can take the request now"), TypeOverloaded},
		{&apicore.Error{Status: http.StatusGatewayTimeout, Type: apicore.TypeServer, Code: "timeout", Message: "The request took longer than the server allows."}, TypeTimeout},
		{&apicore.Error{Status: http.StatusLoopDetected, Type: apicore.TypeInvalidRequest, Code: "loop_detected", Message: "forwarded twice"}, TypeAPI},
		{&apicore.Error{Status: 529, Type: apicore.TypeServer, Message: "Overloaded"}, TypeOverloaded},
	}
	var all strings.Builder
	for _, c := range errs {
		body := AppendError(nil, c.err)
		var env struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &env); err != nil || env.Type != "error" || env.Error.Type != c.want || env.Error.Message != c.err.Message {
			t.Errorf("%d: %s (%v); want type %s", c.err.Status, body, err, c.want)
		}
		fmt.Fprintf(&all, "%d %s\n", c.err.Status, body)
	}
	apitest.Golden(t, "errors.golden", []byte(all.String()))
}
