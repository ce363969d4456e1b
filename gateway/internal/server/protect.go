package server

import (
	"fmt"
	"net"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// Protected mode, as Redis has it: a gateway without an admin key takes the cluster API's writes (loading
// and unloading instances, instance links, the router, the gossip keyring) only from clients on this
// machine's loopback, unless the operator opens them to the network (--allow-remote-admin). Whether a
// request is a hop from another gateway does not matter: a peer's forwarded write is refused too, so a
// cluster of several machines without an admin key sets one, or opens admin writes on purpose.

// localAdminOnly guards the admin routes: it refuses a client that is not on loopback when the gateway has
// no admin key and admin writes were not opened to the network. It depends on nothing but the client's
// address and the configuration.
func (g *guard) localAdminOnly(c *fiber.Ctx) error {
	if !protectedRefuses(len(g.adminKeys) > 0, g.allowRemoteAdmin, c.Context().RemoteIP()) {
		return c.Next()
	}
	return &apicore.Error{Status: fiber.StatusForbidden, Type: apicore.TypeAuthentication, Code: "protected_mode",
		Message: fmt.Sprintf("This gateway has no admin key, so it takes writes that change the cluster only from its own machine (loopback), and %s is not: start duet with --admin-key and send it, or with --allow-remote-admin to accept such writes from anyone who reaches the API.", c.Context().RemoteIP())}
}

// protectedRefuses is protected mode's decision: a client not on loopback (127.0.0.0/8, ::1, and their
// IPv4-in-IPv6 forms) is refused an admin write unless an admin key guards it or the operator opened it.
func protectedRefuses(haveAdminKey, allowRemote bool, remote net.IP) bool {
	return !haveAdminKey && !allowRemote && !remote.IsLoopback()
}

// exposure says, in words, what this gateway leaves open to whoever reaches its API: nothing when it listens
// on loopback only. duet logs it at start (Server.Exposure) and the dashboard shows it (GET /state's
// "exposure").
func (g *guard) exposure() []string {
	if !g.listensBeyondLoopback {
		return nil
	}
	var out []string
	if len(g.keys) == 0 && len(g.adminKeys) == 0 {
		out = append(out, "No --api-key: the API (chat, models, the cluster's state, the dashboard) is open to anyone who can reach this gateway.")
	}
	switch {
	case len(g.adminKeys) > 0:
	case g.allowRemoteAdmin:
		out = append(out, "No --admin-key and --allow-remote-admin: anyone who can reach this gateway may load and unload models, change instance links, swap the router among the registered ones, and rotate the gossip keys.")
	default:
		out = append(out, "No --admin-key: writes that change the cluster (models, instance links, the router, the gossip keys) are taken from this machine's loopback only (protected mode); set --admin-key to make them over the network.")
	}
	if g.hops == nil {
		out = append(out, "No cluster secret: gossip is not encrypted, KV requests are not authenticated, and forwarded requests carry API keys; set --cluster-secret-file on every node.")
	}
	return out
}
