package server

import (
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// TestDialectForPath: an error raised before a handler knows its request (a missing key, an unknown URL) is
// in the envelope of the API the path belongs to.
func TestDialectForPath(t *testing.T) {
	t.Parallel()
	e := apicore.Unauthorized("no key")
	openaiBody := string(e.AppendEnvelope(nil))
	cases := []struct{ path, want string }{
		{"/v1/chat/completions", openaiBody},
		{"/v1/completions", openaiBody},
		{"/v1/responses", openaiBody},
		{"/v1/models", openaiBody},
		{"/admin/v1/status", openaiBody},
		{"/v1/messages", `{"type":"error","error":{"type":"authentication_error","message":"no key"}}`},
		{"/v1/messages/count_tokens", `{"type":"error","error":{"type":"authentication_error","message":"no key"}}`},
		{"/api/chat", `{"error":"no key"}`},
		{"/api/tags", `{"error":"no key"}`},
	}
	for _, c := range cases {
		status, body := dialectForPath(c.path).ErrorBody(nil, e)
		if status != e.Status || string(body) != c.want {
			t.Errorf("%s: %d %s, want %d %s", c.path, status, body, e.Status, c.want)
		}
	}
}
