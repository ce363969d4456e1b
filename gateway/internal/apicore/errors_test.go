package apicore_test

import (
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestErrorEnvelope renders error envelopes and compares them with testdata/<name>.json. Run with -update to
// rewrite them after an intended change.
func TestErrorEnvelope(t *testing.T) {
	t.Parallel()
	cases := map[string][]byte{
		"error_model_not_found": apicore.ModelNotFound("gpt-9").AppendEnvelope(nil),
		"error_bad_request":     apicore.BadRequest("messages[0].role", "bad role").AppendEnvelope(nil),
	}
	for name, got := range cases {
		t.Run(name, func(t *testing.T) {
			apitest.GoldenJSON(t, name+".json", got)
		})
	}
}

func TestFromEngine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code   engine.Code
		status int
	}{
		{engine.CodeInvalidArgument, 400}, {engine.CodeContextLength, 400}, {engine.CodeNotFound, 404},
		{engine.CodeResourceExhausted, 429}, {engine.CodeUnavailable, 503}, {engine.CodeInternal, 500}, {"weird", 500},
	}
	for _, c := range cases {
		got := apicore.FromEngine(&engine.Error{Code: c.code, Message: "m", Param: "p"})
		if got.Status != c.status {
			t.Errorf("%s: status %d, want %d", c.code, got.Status, c.status)
		}
	}
}
