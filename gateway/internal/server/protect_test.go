package server

import (
	"crypto/sha256"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// TestProtectedMode: without an admin key, an admin write is taken from loopback clients only, unless the
// operator opened it; with an admin key protected mode stands aside (adminOnly checks the key). The client's
// address is the only input: the request is served through fiber's real handler from a connection whose
// remote address is set.
func TestProtectedMode(t *testing.T) {
	for _, tc := range []struct {
		name        string
		remote      string
		adminKey    bool
		allowRemote bool
		want        int
	}{
		{"loopback v4", "127.0.0.1", false, false, 200},
		{"loopback elsewhere in 127/8", "127.0.0.2", false, false, 200},
		{"loopback v6", "::1", false, false, 200},
		{"loopback v4 in v6", "::ffff:127.0.0.1", false, false, 200},
		{"a LAN client", "192.168.1.20", false, false, 403},
		{"a v6 client", "2001:db8::1", false, false, 403},
		{"unspecified", "0.0.0.0", false, false, 403},
		{"a LAN client, opened", "192.168.1.20", false, true, 200},
		{"a LAN client, admin key set", "192.168.1.20", true, false, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{log: slog.New(slog.DiscardHandler)}
			g := &guard{allowRemoteAdmin: tc.allowRemote}
			if tc.adminKey {
				g.adminKeys = [][sha256.Size]byte{sha256.Sum256([]byte("a"))}
			}
			app := fiber.New(fiber.Config{ErrorHandler: s.handleError})
			app.Put("/admin/v1/router", g.localAdminOnly, func(c *fiber.Ctx) error { return c.SendString("swapped") })
			var req fasthttp.Request
			req.Header.SetMethod("PUT")
			req.SetRequestURI("/admin/v1/router")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(tc.remote), Port: 40000}, nil)
			app.Handler()(&ctx)
			if got := ctx.Response.StatusCode(); got != tc.want {
				t.Fatalf("status %d, want %d: %s", got, tc.want, ctx.Response.Body())
			}
			if tc.want == 403 {
				body := string(ctx.Response.Body())
				for _, want := range []string{"protected_mode", "--admin-key", "--allow-remote-admin", "loopback"} {
					if !strings.Contains(body, want) {
						t.Errorf("the refusal does not say %q: %s", want, body)
					}
				}
			}
		})
	}
}

func TestExposure(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cfg             Config
		keys, adminKeys bool
		want            []string
	}{
		{"loopback only", Config{}, false, false, nil},
		{"open", Config{ListensBeyondLoopback: true}, false, false, []string{"No --api-key", "loopback only (protected mode)", "No cluster secret"}},
		{"opened admin", Config{ListensBeyondLoopback: true, AllowRemoteAdmin: true}, true, false, []string{"--allow-remote-admin: anyone", "No cluster secret"}},
		{"keys", Config{ListensBeyondLoopback: true}, true, true, []string{"No cluster secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{guard: newGuard(tc.cfg, nil, nil)}
			if tc.keys {
				s.guard.keys = [][sha256.Size]byte{{1}}
			}
			if tc.adminKeys {
				s.guard.adminKeys = [][sha256.Size]byte{{2}}
			}
			got := s.Exposure()
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d lines", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}
