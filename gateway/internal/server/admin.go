package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/openai"
)

// The cluster API's writes and the admin endpoints beside the instances (clusterapi.go): exo's instance
// links, feature flags and state, the router in use and its swap, the gossip keyring.

// linkView is an instance link as exo's API shows it, with whether its pairs are exact.
type linkView struct {
	LinkID           string   `json:"link_id"`
	PrefillInstances []string `json:"prefill_instances"`
	DecodeInstances  []string `json:"decode_instances"`
	Exact            bool     `json:"exact"`
}

type linkBody struct {
	PrefillInstances []string `json:"prefill_instances"`
	DecodeInstances  []string `json:"decode_instances"`
}

func (s *Server) listLinks(c *fiber.Ctx) error {
	snap := s.agent.Snapshot()
	out := make([]linkView, 0, len(snap.Links))
	for _, l := range snap.Links {
		check, err := cluster.CheckLink(snap, l.PrefillInstances, l.DecodeInstances)
		out = append(out, linkView{LinkID: l.LinkID, PrefillInstances: l.PrefillInstances, DecodeInstances: l.DecodeInstances,
			Exact: err == nil && check.Exact})
	}
	return c.JSON(out)
}

func (s *Server) createLink(c *fiber.Ctx) error { return s.writeLink(c, cluster.NewLinkID(), false) }

func (s *Server) updateLink(c *fiber.Ctx) error {
	id := c.Params("id")
	if _, ok := s.agent.Snapshot().Link(id); !ok {
		return linkNotFound(id)
	}
	return s.writeLink(c, id, true)
}

func linkNotFound(id string) error {
	return &openai.Error{Status: fiber.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "not_found",
		Message: fmt.Sprintf("no instance link %q", id)}
}

// writeLink validates and writes a link: serfcluster replicates it to every node (any node may write).
func (s *Server) writeLink(c *fiber.Ctx, id string, update bool) error {
	var b linkBody
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return openai.BadRequest("", "the body must be {\"prefill_instances\": [...], \"decode_instances\": [...]}: %v", err)
	}
	check, err := cluster.CheckLink(s.agent.Snapshot(), b.PrefillInstances, b.DecodeInstances)
	if err != nil {
		param := "prefill_instances"
		if strings.Contains(err.Error(), "decode_instances") {
			param = "decode_instances"
		}
		return openai.BadRequest(param, "%v", err)
	}
	if err := s.agent.Cluster().PutInstanceLink(cluster.InstanceLink{
		LinkID: id, PrefillInstances: b.PrefillInstances, DecodeInstances: b.DecodeInstances,
	}); err != nil {
		return openai.BadRequest("", "%v", err)
	}
	verb := "created"
	if update {
		verb = "updated"
	}
	return c.JSON(fiber.Map{"message": "instance link " + verb, "command_id": commandID(), "link_id": id, "exact": check.Exact})
}

func (s *Server) deleteLink(c *fiber.Ctx) error {
	id := c.Params("id")
	err := s.agent.Cluster().DeleteInstanceLink(id)
	if errors.Is(err, cluster.ErrNotFound) {
		return linkNotFound(id)
	}
	if err != nil {
		return openai.Internal(err.Error())
	}
	return c.JSON(fiber.Map{"message": "instance link deleted", "command_id": commandID(), "link_id": id})
}

// commandID is exo's acknowledgement of a write. The write is applied here at once and gossiped; the id
// names it in logs.
func commandID() string { return strings.TrimPrefix(cluster.NewLinkID(), "link-") }

func (s *Server) featureFlags(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"disaggregation": true})
}

// state is the cluster snapshot, as exo's /state is its whole state.
func (s *Server) state(c *fiber.Ctx) error {
	return c.JSON(struct {
		*cluster.Snapshot
		// Exposure is what this gateway leaves open to the network (Exposure), for the dashboard's banner.
		Exposure []string `json:"exposure,omitempty"`
	}{s.agent.Snapshot(), s.Exposure()})
}

func (s *Server) getRouter(c *fiber.Ctx) error {
	name, available := "", []string{}
	if s.swap != nil {
		name, available = s.swap.Current(), s.swap.Available()
	}
	return c.JSON(fiber.Map{"router": name, "available": available})
}

// putRouter starts another router and routes new requests to it once it is ready; the old one is stopped
// after its calls returned. A router that fails to start leaves the old one in place.
func (s *Server) putRouter(c *fiber.Ctx) error {
	if s.swap == nil {
		return &openai.Error{Status: fiber.StatusNotImplemented, Type: openai.TypeServer, Message: "this gateway cannot swap its router"}
	}
	var b struct {
		Router string `json:"router"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(c.Body(), &b); err != nil || b.Router == "" {
		return openai.BadRequest("router", "the body must be {\"router\": name, \"sha256\"?: hex}")
	}
	var sum []byte
	if b.SHA256 != "" {
		var err error
		if sum, err = decodeHex32(b.SHA256); err != nil {
			return openai.BadRequest("sha256", "%v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.swap.SwapRouter(ctx, b.Router, sum); err != nil {
		if errors.Is(err, node.ErrRouterRefused) {
			return openai.BadRequest("router", "the router was not swapped: %s", strings.TrimPrefix(err.Error(), node.ErrRouterRefused.Error()+": "))
		}
		// What a plugin printed (its stderr, a handshake line on its stdout) is for the operator's log only.
		s.log.Warn("router swap failed", "request_id", requestIDOf(c), "router", b.Router, "error", err)
		return openai.BadRequest("router", "the router was not swapped: router %q did not start; the gateway's log says why (request id %s)", b.Router, requestIDOf(c))
	}
	s.log.Info("router swapped", "router", s.swap.Current())
	return c.JSON(fiber.Map{"router": s.swap.Current(), "message": "new requests use this router"})
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
func (s *Server) listKeys(c *fiber.Ctx) error {
	st, err := s.agent.Cluster().ListKeys()
	if err != nil {
		return openai.BadRequest("", "%v", err)
	}
	return c.JSON(st)
}

// changeKeys rotates the gossip key online, cluster-wide: install the new key, use it, remove the old one
// (serf rewrites every node's keyring file). The KV and hop keys rotate through the secret file.
func (s *Server) changeKeys(c *fiber.Ctx) error {
	var b struct {
		Op  string `json:"op"`
		Key string `json:"key"`
	}
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return openai.BadRequest("", "the body must be {\"op\": install|use|remove, \"key\": base64}")
	}
	key, err := base64.StdEncoding.DecodeString(b.Key)
	if err != nil {
		return openai.BadRequest("key", "key is not base64: %v", err)
	}
	cl := s.agent.Cluster()
	switch b.Op {
	case "install":
		err = cl.InstallKey(key)
	case "use":
		err = cl.UseKey(key)
	case "remove":
		err = cl.RemoveKey(key)
	default:
		return openai.BadRequest("op", "op %q is not install, use or remove", b.Op)
	}
	if err != nil {
		return openai.BadRequest("", "%v", err)
	}
	return c.JSON(fiber.Map{"message": "keyring " + b.Op + " done"})
}
