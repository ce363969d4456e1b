package apicore_test

import (
	"net/http"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

// Results fold each choice's events into its own result, drop events of choices they do not hold, are done
// when every choice has its final event, and count the shared prompt once.
func TestResults(t *testing.T) {
	t.Parallel()
	rs := apicore.NewResults(2)
	for _, ev := range []engine.Event{
		{Choice: 0, Token: &engine.Token{Text: "a", Reasoning: "r"}},
		{Choice: 1, Token: &engine.Token{Text: "b"}},
		{Choice: 7, Token: &engine.Token{Text: "lost"}},
		{Choice: 0, Final: apitest.Final(engine.FinishStop, engine.Usage{PromptTokens: 5, CachedTokens: 2, CompletionTokens: 1})},
	} {
		rs.Add(ev)
	}
	if rs.Done() {
		t.Fatal("done before choice 1 ended")
	}
	rs.Add(engine.Event{Choice: 1, Final: apitest.Final(engine.FinishLength, engine.Usage{PromptTokens: 5, CachedTokens: 2, CompletionTokens: 3})})
	if !rs.Done() {
		t.Fatal("not done after every choice ended")
	}
	if got := rs[0].Text.String() + "|" + rs[0].Reasoning.String() + "|" + rs[1].Text.String(); got != "a|r|b" {
		t.Errorf("texts %q, want a|r|b", got)
	}
	if rs[0].Tokens != 1 || rs[0].ReasoningTokens != 1 || rs[1].Tokens != 1 {
		t.Errorf("tokens %d (%d reasoning) and %d, want 1 (1) and 1", rs[0].Tokens, rs[0].ReasoningTokens, rs[1].Tokens)
	}
	if got, want := rs.Usage(), (engine.Usage{PromptTokens: 5, CachedTokens: 2, CompletionTokens: 4}); got != want {
		t.Errorf("usage %+v, want %+v", got, want)
	}
	if n := len(apicore.NewResults(0)); n != 1 {
		t.Errorf("NewResults(0) holds %d choices, want 1", n)
	}
}

func TestFinalError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		final  engine.Final
		status int // 0: no error
	}{
		{"stop", engine.Final{FinishReason: engine.FinishStop}, 0},
		{"length", engine.Final{FinishReason: engine.FinishLength}, 0},
		{"error without a code", engine.Final{FinishReason: engine.FinishError, Error: "boom"}, http.StatusInternalServerError},
		{"error with a code", engine.Final{FinishReason: engine.FinishError, ErrorCode: engine.CodeResourceExhausted, Error: "full"}, http.StatusTooManyRequests},
		{"cancelled by the engine", engine.Final{FinishReason: engine.FinishCancelled}, http.StatusServiceUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := apicore.FinalError(&c.final)
			switch {
			case c.status == 0 && err != nil:
				t.Errorf("got %v, want no error", err)
			case c.status != 0 && (err == nil || err.Status != c.status):
				t.Errorf("got %+v, want status %d", err, c.status)
			}
		})
	}
}
