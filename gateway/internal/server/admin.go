package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/pipeline"
	"github.com/duet-ai/duet/sdk/engine"
)

// adminAPI is the admin API beside the instances (those are the clusterAPI's): exo's instance links, feature
// flags and state, this node's status, the router in use and its swap, the model aliases (aliases.go), and the
// gossip keyring. Reads need an API key when keys are set; writes an admin key when those are, and loopback
// without one (protected mode).
type adminAPI struct {
	agent   *cluster.Agent
	reg     *node.Registry
	engines node.EngineProvider
	swap    node.RouterSwapper // nil: the router cannot be swapped
	aliases *alias.Table
	// limiter is the request path's admission control, whose figures the status shows.
	limiter *pipeline.Limiter
	status  StatusFunc // nil: no plugin status
	// exposure is what the gateway leaves open (guard.exposure), for GET /state.
	exposure func() []string
	log      *slog.Logger
}

// routes registers the admin API: exo's paths under /v1 and /state, the rest under /admin/v1. Writes pass the
// guard's admin checks; GET /state takes an API key.
func (a *adminAPI) routes(app, v1, admin fiber.Router, g *guard) {
	v1.Get("/instance-links", a.listLinks)
	v1.Post("/instance-links", g.adminOnly, g.localAdminOnly, a.createLink)
	v1.Put("/instance-links/:id", g.adminOnly, g.localAdminOnly, a.updateLink)
	v1.Delete("/instance-links/:id", g.adminOnly, g.localAdminOnly, a.deleteLink)
	v1.Get("/feature-flags", a.featureFlags)
	app.Get("/state", g.auth, a.state)
	admin.Get("/status", a.adminStatus)
	admin.Put("/router", g.adminOnly, g.localAdminOnly, a.putRouter)
	admin.Get("/router", a.getRouter)
	admin.Get("/model-aliases", a.getModelAliases)
	admin.Put("/model-aliases", g.adminOnly, g.localAdminOnly, a.putModelAliases)
	admin.Get("/cluster/keys", g.adminOnly, g.localAdminOnly, a.listKeys)
	admin.Post("/cluster/keys", g.adminOnly, g.localAdminOnly, a.changeKeys)
}

type linkBody struct {
	PrefillInstances []string `json:"prefill_instances"`
	DecodeInstances  []string `json:"decode_instances"`
}

func (a *adminAPI) listLinks(c *fiber.Ctx) error {
	snap := a.agent.Snapshot()
	out := make([]client.Link, 0, len(snap.Links))
	for _, l := range snap.Links {
		check, err := cluster.CheckLink(snap, l.PrefillInstances, l.DecodeInstances)
		out = append(out, client.Link{LinkID: l.LinkID, PrefillInstances: l.PrefillInstances,
			DecodeInstances: l.DecodeInstances, Exact: err == nil && check.Exact})
	}
	return c.JSON(out)
}

func (a *adminAPI) createLink(c *fiber.Ctx) error { return a.writeLink(c, cluster.NewLinkID(), false) }

func (a *adminAPI) updateLink(c *fiber.Ctx) error {
	id := c.Params("id")
	if _, ok := a.agent.Snapshot().Link(id); !ok {
		return linkNotFound(id)
	}
	return a.writeLink(c, id, true)
}

func linkNotFound(id string) error {
	return &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "not_found",
		Message: fmt.Sprintf("no instance link %q", id)}
}

// writeLink validates and writes a link: serfcluster replicates it to every node (any node may write).
func (a *adminAPI) writeLink(c *fiber.Ctx, id string, update bool) error {
	var b linkBody
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return apicore.BadRequest("", "the body must be {\"prefill_instances\": [...], \"decode_instances\": [...]}: %v", err)
	}
	check, err := cluster.CheckLink(a.agent.Snapshot(), b.PrefillInstances, b.DecodeInstances)
	if err != nil {
		param := "prefill_instances"
		if strings.Contains(err.Error(), "decode_instances") {
			param = "decode_instances"
		}
		return apicore.BadRequest(param, "%v", err)
	}
	if err := a.agent.Cluster().PutInstanceLink(cluster.InstanceLink{
		LinkID: id, PrefillInstances: b.PrefillInstances, DecodeInstances: b.DecodeInstances,
	}); err != nil {
		return apicore.BadRequest("", "%v", err)
	}
	verb := "created"
	if update {
		verb = "updated"
	}
	return c.JSON(client.LinkWrite{Message: "instance link " + verb, CommandID: commandID(), LinkID: id,
		Exact: check.Exact})
}

func (a *adminAPI) deleteLink(c *fiber.Ctx) error {
	id := c.Params("id")
	err := a.agent.Cluster().DeleteInstanceLink(id)
	if errors.Is(err, cluster.ErrNotFound) {
		return linkNotFound(id)
	}
	if err != nil {
		return apicore.Internal(err.Error())
	}
	return c.JSON(fiber.Map{"message": "instance link deleted", "command_id": commandID(), "link_id": id})
}

// commandID is exo's acknowledgement of a write. The write is applied here at once and gossiped; the id
// names it in logs.
func commandID() string { return strings.TrimPrefix(cluster.NewLinkID(), "link-") }

func (a *adminAPI) featureFlags(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"disaggregation": true})
}

// state is the cluster snapshot, as exo's /state is its whole state.
func (a *adminAPI) state(c *fiber.Ctx) error {
	return c.JSON(struct {
		*cluster.Snapshot
		// Exposure is what this gateway leaves open to the network (Server.Exposure), for the dashboard's banner.
		Exposure []string `json:"exposure,omitempty"`
	}{a.agent.Snapshot(), a.exposure()})
}

func (a *adminAPI) getRouter(c *fiber.Ctx) error {
	name, available := "", []string{}
	if a.swap != nil {
		name, available = a.swap.Current(), a.swap.Available()
	}
	return c.JSON(client.Router{Router: name, Available: available})
}

// putRouter starts another router and routes new requests to it once it is ready; the old one is stopped
// after its calls returned. A router that fails to start leaves the old one in place.
func (a *adminAPI) putRouter(c *fiber.Ctx) error {
	if a.swap == nil {
		return &apicore.Error{Status: fiber.StatusNotImplemented, Type: apicore.TypeServer, Message: "this gateway cannot swap its router"}
	}
	var b struct {
		Router string `json:"router"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(c.Body(), &b); err != nil || b.Router == "" {
		return apicore.BadRequest("router", "the body must be {\"router\": name, \"sha256\"?: hex}")
	}
	var sum []byte
	if b.SHA256 != "" {
		var err error
		if sum, err = decodeHex32(b.SHA256); err != nil {
			return apicore.BadRequest("sha256", "%v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.swap.SwapRouter(ctx, b.Router, sum); err != nil {
		if errors.Is(err, node.ErrRouterRefused) {
			return apicore.BadRequest("router", "the router was not swapped: %s", strings.TrimPrefix(err.Error(), node.ErrRouterRefused.Error()+": "))
		}
		// What a plugin printed (its stderr, a handshake line on its stdout) is for the operator's log only.
		a.log.Warn("router swap failed", "request_id", requestIDOf(c), "router", b.Router, "error", err)
		return apicore.BadRequest("router", "the router was not swapped: router %q did not start; the gateway's log says why (request id %s)", b.Router, requestIDOf(c))
	}
	a.log.Info("router swapped", "router", a.swap.Current())
	return c.JSON(fiber.Map{"router": a.swap.Current(), "message": "new requests use this router"})
}

func decodeHex32(s string) ([]byte, error) {
	var out [32]byte
	if len(s) != 64 {
		return nil, errors.New("want the 64 hex digits of a SHA-256")
	}
	for i := range out {
		var v byte
		for _, c := range []byte(s[2*i : 2*i+2]) {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= c - '0'
			case c >= 'a' && c <= 'f':
				v |= c - 'a' + 10
			case c >= 'A' && c <= 'F':
				v |= c - 'A' + 10
			default:
				return nil, errors.New("want the 64 hex digits of a SHA-256")
			}
		}
		out[i] = v
	}
	return out[:], nil
}

// listKeys reports the gossip keyring across the cluster (how many nodes hold each key, and use it).
func (a *adminAPI) listKeys(c *fiber.Ctx) error {
	st, err := a.agent.Cluster().ListKeys()
	if err != nil {
		return apicore.BadRequest("", "%v", err)
	}
	return c.JSON(st)
}

// changeKeys rotates the gossip key online, cluster-wide: install the new key, use it, remove the old one
// (serf rewrites every node's keyring file). The KV and hop keys rotate through the secret file.
func (a *adminAPI) changeKeys(c *fiber.Ctx) error {
	var b struct {
		Op  string `json:"op"`
		Key string `json:"key"`
	}
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return apicore.BadRequest("", "the body must be {\"op\": install|use|remove, \"key\": base64}")
	}
	key, err := base64.StdEncoding.DecodeString(b.Key)
	if err != nil {
		return apicore.BadRequest("key", "key is not base64: %v", err)
	}
	cl := a.agent.Cluster()
	switch b.Op {
	case "install":
		err = cl.InstallKey(key)
	case "use":
		err = cl.UseKey(key)
	case "remove":
		err = cl.RemoveKey(key)
	default:
		return apicore.BadRequest("op", "op %q is not install, use or remove", b.Op)
	}
	if err != nil {
		return apicore.BadRequest("", "%v", err)
	}
	return c.JSON(fiber.Map{"message": "keyring " + b.Op + " done"})
}

// adminStatus is GET /admin/v1/status: this node's admission figures, its instances, its engine's figures
// (peers read them for the dashboard's cluster stats) and its plugins.
func (a *adminAPI) adminStatus(c *fiber.Ctx) error {
	type instance struct {
		engine.Description
		InFlight int64     `json:"in_flight"`
		LoadedAt time.Time `json:"loaded_at"`
	}
	out := fiber.Map{"in_flight": a.limiter.InFlight(), "queued": a.limiter.Queued()}
	var ins []instance
	for _, in := range a.reg.All() {
		ins = append(ins, instance{Description: in.Desc, InFlight: in.InFlight(), LoadedAt: in.LoadedAt})
	}
	out["instances"] = ins
	if e, _, err := a.engines.Get(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if st, err := e.Stats(ctx); err == nil {
			out["engine_stats"] = st
		}
		cancel()
	}
	if a.status != nil {
		out["plugins"] = a.status()
	}
	return c.JSON(out)
}
