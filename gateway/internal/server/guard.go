package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/metrics"
)

// guard decides who may do what: the API keys on every read and generation, the admin keys on the cluster
// API's writes, protected mode (protect.go), and the cluster secret's proof on a hop from another gateway.
// It is middleware only: it owns the keys (as their hashes) and the hop verifier, and nothing else.
type guard struct {
	keys      [][sha256.Size]byte
	adminKeys [][sha256.Size]byte
	hops      *forward.Verifier // nil: no cluster secret
	// allowRemoteAdmin and listensBeyondLoopback are Config's: protected mode and Exposure read them.
	allowRemoteAdmin      bool
	listensBeyondLoopback bool
	metrics               *metrics.Metrics // nil: none (its methods take a nil receiver)
	log                   *slog.Logger
}

// newGuard hashes the configured keys; hopKeys nil is an unauthenticated cluster.
func newGuard(cfg Config, hopKeys [][]byte, m *metrics.Metrics) *guard {
	g := &guard{allowRemoteAdmin: cfg.AllowRemoteAdmin, listensBeyondLoopback: cfg.ListensBeyondLoopback, metrics: m, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if len(hopKeys) > 0 {
		g.hops = forward.NewVerifier(hopKeys)
	}
	for _, k := range cfg.APIKeys {
		g.keys = append(g.keys, sha256.Sum256([]byte(k)))
	}
	for _, k := range cfg.AdminKeys {
		g.adminKeys = append(g.adminKeys, sha256.Sum256([]byte(k)))
	}
	return g
}

// auth requires one of the configured API keys, compared in constant time (through their hashes, so key
// lengths do not leak either). An admin key is an API key too. Anthropic's clients send theirs as x-api-key.
func (g *guard) auth(c *fiber.Ctx) error {
	if len(g.keys) == 0 && len(g.adminKeys) == 0 {
		return c.Next()
	}
	token, ok := bearer(c)
	if !ok {
		return apicore.Unauthorized("You didn't provide an API key. Provide it in the Authorization header as 'Bearer <key>'.")
	}
	if !matchKey(token, g.keys) && !matchKey(token, g.adminKeys) {
		return apicore.Unauthorized("Incorrect API key provided.")
	}
	return c.Next()
}

// stateAuth guards the cluster state: sealed with a secret, behind the API key without one.
func (g *guard) stateAuth(c *fiber.Ctx) error {
	if g.hops != nil {
		return c.Next()
	}
	return g.auth(c)
}

func bearer(c *fiber.Ctx) (string, bool) {
	if token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer "); ok && strings.TrimSpace(token) != "" {
		return strings.TrimSpace(token), true
	}
	if k := c.Get("X-Api-Key"); k != "" {
		return strings.TrimSpace(k), true
	}
	return "", false
}

func matchKey(token string, keys [][sha256.Size]byte) bool {
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, k := range keys {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return match == 1
}

// adminOnly guards the writes of the cluster API: with admin keys configured, one of them is required, or a
// hop proved with the cluster secret (the entry gateway checked the client's admin key before it forwarded
// the write to the node it concerns). The hop headers alone count for nothing: without a secret a forwarded
// write carries the client's own key, which is checked here like any.
func (g *guard) adminOnly(c *fiber.Ctx) error {
	if len(g.adminKeys) == 0 || c.Locals(hopProvedKey) == true {
		return c.Next()
	}
	if token, ok := bearer(c); ok && matchKey(token, g.adminKeys) {
		return c.Next()
	}
	return &apicore.Error{Status: fiber.StatusForbidden, Type: apicore.TypeAuthentication, Code: "admin_key_required",
		Message: "This changes the cluster: it needs an admin key (--admin-key)."}
}

const (
	hopPendingKey = "duet.hop.pending" // a hop whose proof's head checked out, and whose body is checked once read
	hopProvedKey  = "duet.hop.proved"  // true: the hop carries a valid proof from the cluster secret
)

// pendingHop is a hop whose proof checked out before its body was read: the body must hash to sum.
type pendingHop struct {
	route forward.Route
	sum   [sha256.Size]byte
}

// authOrHop authenticates a request before its body is read (the bodyReader comes after it, so no body holds
// the body budget before its sender is known). A hop from another gateway is let through on the cluster
// credential: the proof's HMAC covers the body's SHA-256, which it carries, so it is checked here, and the
// body's hash once read (verifyHop). Everything else goes through auth. In a cluster without a secret nothing
// tells a hop from a client's request, so a hop is one: it needs the client's API key like any other, its
// route may pin only what a client could choose anyway (an instance of this node, prefill instances the owner
// resolves from its own state: see fromPinned), and it has no admin rights of its own.
func (g *guard) authOrHop(c *fiber.Ctx) error {
	h := c.Get(forward.HeaderHop)
	if h == "" {
		return g.auth(c)
	}
	if n, err := strconv.Atoi(h); err != nil || n < 1 || n > forward.MaxHops {
		g.metrics.HopReceived(metrics.HopRefused)
		return &apicore.Error{Status: fiber.StatusLoopDetected, Type: apicore.TypeInvalidRequest, Code: "loop_detected",
			Message: fmt.Sprintf("The request has been forwarded %q times; a gateway forwards a request at most once.", h)}
	}
	route, err := forward.DecodeRoute(c.Get(forward.HeaderRoute))
	if err != nil {
		g.metrics.HopReceived(metrics.HopRefused)
		return apicore.BadRequest("", "a forwarded request with a bad route: %v", err)
	}
	if g.hops == nil {
		locals.SetHop(c, route)
		return g.auth(c)
	}
	sum, err := g.hops.VerifyHead(c.Get(forward.HeaderAuth), c.Method(), c.Path(), c.Get(locals.RequestIDHeader), c.Get(forward.HeaderRoute))
	if err != nil {
		return g.refuseHop(c, err)
	}
	c.Locals(hopPendingKey, pendingHop{route: route, sum: sum})
	return c.Next()
}

func (g *guard) refuseHop(c *fiber.Ctx, err error) error {
	g.metrics.HopReceived(metrics.HopRefused)
	g.log.Warn("refused a forwarded request", "request_id", requestIDOf(c), "remote", c.IP(), "error", err)
	c.Context().SetConnectionClose() // a body that may follow is not read
	return apicore.Unauthorized("The forwarded request's cluster credential is missing or wrong.")
}

// verifyHop checks that a hop's body is the one its proof covers.
func (g *guard) verifyHop(c *fiber.Ctx) error {
	p, ok := c.Locals(hopPendingKey).(pendingHop)
	if !ok {
		return c.Next()
	}
	if err := forward.CheckBody(p.sum, c.Body()); err != nil {
		return g.refuseHop(c, err)
	}
	locals.SetHop(c, p.route)
	c.Locals(hopProvedKey, true)
	return c.Next()
}
