package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
)

// guardApp serves the guard's middleware alone, in the order the server's routes use it, on a fiber app with
// the server's error handler: GET /v1/read behind auth, GET /v1/state behind stateAuth, POST /v1/hop behind
// authOrHop and verifyHop, and POST /v1/write behind those and adminOnly. A handler that is reached answers
// what the guard left for it: the pinned route's entry node and whether a secret proved the hop.
func guardApp(t *testing.T, g *guard) *fiber.App {
	t.Helper()
	s := &Server{log: slog.New(slog.DiscardHandler)}
	app := fiber.New(fiber.Config{ErrorHandler: s.handleError})
	reached := func(c *fiber.Ctx) error {
		entry := ""
		if r, ok := locals.Hop(c); ok {
			entry = r.EntryNode
		}
		return c.JSON(fiber.Map{"entry": entry, "proved": c.Locals(hopProvedKey) == true})
	}
	app.Get("/v1/read", g.auth, reached)
	app.Get("/v1/state", g.stateAuth, reached)
	app.Post("/v1/hop", g.authOrHop, g.verifyHop, reached)
	app.Post("/v1/write", g.authOrHop, g.verifyHop, g.adminOnly, reached)
	return app
}

// reply is what guardApp's handler or the error envelope said.
type reply struct {
	status int
	entry  string
	proved bool
	code   string
	close  bool // the connection is closed after the answer
}

func send(t *testing.T, app *fiber.App, req *http.Request) reply {
	t.Helper()
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := reply{status: resp.StatusCode, close: resp.Close}
	var v struct {
		Entry  string `json:"entry"`
		Proved bool   `json:"proved"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, body, err)
	}
	a.entry, a.proved, a.code = v.Entry, v.Proved, v.Error.Code
	return a
}

func newRequest(method, path, body string, header map[string]string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// TestGuardAuth: with keys configured, a read needs one of them (API or admin), as a bearer token or as
// Anthropic's x-api-key; without keys anything passes. The cluster state needs no key in a cluster with a
// secret (its answer is sealed), and the API key without one.
func TestGuardAuth(t *testing.T) {
	t.Parallel()
	keyed := newGuard(Config{APIKeys: []string{"k1"}, AdminKeys: []string{"a1"}}, nil, nil)
	open := newGuard(Config{}, nil, nil)
	sealed := newGuard(Config{APIKeys: []string{"k1"}}, [][]byte{[]byte("secret")}, nil)
	for _, tc := range []struct {
		name   string
		g      *guard
		path   string
		header map[string]string
		want   int
	}{
		{"no keys, no token", open, "/v1/read", nil, 200},
		{"no token", keyed, "/v1/read", nil, 401},
		{"wrong token", keyed, "/v1/read", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"blank bearer", keyed, "/v1/read", map[string]string{"Authorization": "Bearer  "}, 401},
		{"not a bearer", keyed, "/v1/read", map[string]string{"Authorization": "Basic k1"}, 401},
		{"API key", keyed, "/v1/read", map[string]string{"Authorization": "Bearer k1"}, 200},
		{"admin key", keyed, "/v1/read", map[string]string{"Authorization": "Bearer a1"}, 200},
		{"x-api-key", keyed, "/v1/read", map[string]string{"X-Api-Key": "k1"}, 200},
		{"state without a secret, no token", keyed, "/v1/state", nil, 401},
		{"state without a secret, API key", keyed, "/v1/state", map[string]string{"Authorization": "Bearer k1"}, 200},
		{"state with a secret, no token", sealed, "/v1/state", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := send(t, guardApp(t, tc.g), newRequest("GET", tc.path, "", tc.header))
			if got.status != tc.want {
				t.Fatalf("status %d, want %d", got.status, tc.want)
			}
			if tc.want == 401 && got.code != "invalid_api_key" {
				t.Errorf("code %q, want invalid_api_key", got.code)
			}
		})
	}
}

// TestGuardAdminOnly: with admin keys, a write needs one of them (an API key is refused with 403), or a hop
// proved with the cluster secret; without admin keys an API key suffices (protected mode is localAdminOnly's).
// Hop headers without a secret grant nothing: such a hop is a client's request and needs the client's key.
func TestGuardAdminOnly(t *testing.T) {
	t.Parallel()
	secret := []byte("secret")
	route := forward.Route{EntryNode: "n1", DecodeNode: "n2"}.Encode()
	hop := func(key []byte, id string, extra map[string]string) map[string]string {
		h := map[string]string{forward.HeaderHop: "1", forward.HeaderRoute: route, locals.RequestIDHeader: id,
			forward.HeaderAuth: forward.Proof(key, "POST", "/v1/write", id, route, []byte("{}"), time.Now())}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		secret bool
		header map[string]string
		want   int
		code   string
		proved bool
	}{
		{"no admin keys, API key", Config{APIKeys: []string{"k1"}}, false, map[string]string{"Authorization": "Bearer k1"}, 200, "", false},
		{"admin keys, API key", Config{APIKeys: []string{"k1"}, AdminKeys: []string{"a1"}}, false, map[string]string{"Authorization": "Bearer k1"}, 403, "admin_key_required", false},
		{"admin keys, admin key", Config{APIKeys: []string{"k1"}, AdminKeys: []string{"a1"}}, false, map[string]string{"Authorization": "Bearer a1"}, 200, "", false},
		{"admin keys, admin key as x-api-key", Config{AdminKeys: []string{"a1"}}, false, map[string]string{"X-Api-Key": "a1"}, 200, "", false},
		{"admin keys, no token", Config{AdminKeys: []string{"a1"}}, false, nil, 401, "invalid_api_key", false},
		{"a proved hop", Config{AdminKeys: []string{"a1"}}, true, hop(secret, "r1", nil), 200, "", true},
		{"hop headers without a secret, API key", Config{APIKeys: []string{"k1"}, AdminKeys: []string{"a1"}}, false,
			hop(secret, "r2", map[string]string{"Authorization": "Bearer k1"}), 403, "admin_key_required", false},
		{"hop headers without a secret, admin key", Config{AdminKeys: []string{"a1"}}, false,
			hop(secret, "r3", map[string]string{"Authorization": "Bearer a1"}), 200, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys [][]byte
			if tc.secret {
				keys = [][]byte{secret}
			}
			got := send(t, guardApp(t, newGuard(tc.cfg, keys, nil)), newRequest("POST", "/v1/write", "{}", tc.header))
			if got.status != tc.want || got.code != tc.code || got.proved != tc.proved {
				t.Fatalf("got %+v, want status %d code %q proved %v", got, tc.want, tc.code, tc.proved)
			}
		})
	}
}

// TestGuardHop: a hop is let through on the cluster secret's proof alone, which covers the method, the path,
// the request id, the route and the body; its route is pinned for the handler. Anything else is refused
// before the handler, with the connection closed when the proof fails (its body is not read); a replayed
// proof is refused too. Without a secret, a hop is a client's request: it needs an API key, and its route is
// pinned but not proved.
func TestGuardHop(t *testing.T) {
	t.Parallel()
	secret := []byte("secret")
	route := forward.Route{EntryNode: "n1", DecodeNode: "n2"}.Encode()
	proof := func(key []byte, method, path, id, route, body string) string {
		return forward.Proof(key, method, path, id, route, []byte(body), time.Now())
	}
	headers := func(id, route, auth string) map[string]string {
		return map[string]string{forward.HeaderHop: "1", forward.HeaderRoute: route, locals.RequestIDHeader: id, forward.HeaderAuth: auth}
	}
	secured := newGuard(Config{APIKeys: []string{"k1"}}, [][]byte{secret, []byte("old")}, nil)
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		want   int
		code   string
		close  bool
	}{
		{"proved", `{"a":1}`, headers("r1", route, proof(secret, "POST", "/v1/hop", "r1", route, `{"a":1}`)), 200, "", false},
		{"proved with the previous key", `{}`, headers("r2", route, proof([]byte("old"), "POST", "/v1/hop", "r2", route, `{}`)), 200, "", false},
		{"wrong key", `{}`, headers("r3", route, proof([]byte("nope"), "POST", "/v1/hop", "r3", route, `{}`)), 401, "invalid_api_key", true},
		{"no proof", `{}`, headers("r4", route, ""), 401, "invalid_api_key", true},
		{"another path", `{}`, headers("r5", route, proof(secret, "POST", "/v1/write", "r5", route, `{}`)), 401, "invalid_api_key", true},
		{"another request id", `{}`, headers("r6", route, proof(secret, "POST", "/v1/hop", "other", route, `{}`)), 401, "invalid_api_key", true},
		{"another body", `{"a":2}`, headers("r7", route, proof(secret, "POST", "/v1/hop", "r7", route, `{"a":1}`)), 401, "invalid_api_key", true},
		{"too many hops", `{}`, map[string]string{forward.HeaderHop: "2", forward.HeaderRoute: route}, 508, "loop_detected", false},
		{"not a hop count", `{}`, map[string]string{forward.HeaderHop: "x", forward.HeaderRoute: route}, 508, "loop_detected", false},
		{"a bad route", `{}`, map[string]string{forward.HeaderHop: "1", forward.HeaderRoute: "%%%"}, 400, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := send(t, guardApp(t, secured), newRequest("POST", "/v1/hop", tc.body, tc.header))
			if got.status != tc.want || got.code != tc.code || got.close != tc.close {
				t.Fatalf("got %+v, want status %d code %q close %v", got, tc.want, tc.code, tc.close)
			}
			if tc.want == 200 && (got.entry != "n1" || !got.proved) {
				t.Errorf("the handler got entry %q proved %v, want the route pinned and proved", got.entry, got.proved)
			}
		})
	}

	t.Run("a replay", func(t *testing.T) {
		app := guardApp(t, secured)
		h := headers("r8", route, proof(secret, "POST", "/v1/hop", "r8", route, `{}`))
		if got := send(t, app, newRequest("POST", "/v1/hop", `{}`, h)); got.status != 200 {
			t.Fatalf("first: %+v", got)
		}
		if got := send(t, app, newRequest("POST", "/v1/hop", `{}`, h)); got.status != 401 || !got.close {
			t.Fatalf("replayed: %+v, want 401 and the connection closed", got)
		}
	})

	open := newGuard(Config{APIKeys: []string{"k1"}}, nil, nil)
	plain := map[string]string{forward.HeaderHop: "1", forward.HeaderRoute: route}
	t.Run("no secret, no key", func(t *testing.T) {
		if got := send(t, guardApp(t, open), newRequest("POST", "/v1/hop", `{}`, plain)); got.status != 401 {
			t.Fatalf("got %+v, want 401", got)
		}
	})
	t.Run("no secret, API key", func(t *testing.T) {
		h := map[string]string{"Authorization": "Bearer k1"}
		for k, v := range plain {
			h[k] = v
		}
		got := send(t, guardApp(t, open), newRequest("POST", "/v1/hop", `{}`, h))
		if got.status != 200 || got.entry != "n1" || got.proved {
			t.Fatalf("got %+v, want the route pinned, not proved", got)
		}
	})
}
