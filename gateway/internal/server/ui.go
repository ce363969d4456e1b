package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/pipeline"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/ui"
)

// The dashboard: its files at / and /ui/ (no key: the page asks for one and sends it with its API calls), and
// the few reads it needs beyond the cluster API: the recent requests, the paths between nodes, every node's
// engine figures, and a dry run of an instance link.

// dashboardPolicy lets the page load and call nothing but this gateway.
const dashboardPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// dashboard serves the page and the reads it needs beyond the cluster and admin APIs. A fan-out to other
// nodes (their recent requests, their engine figures) goes to their gateways as hops.
type dashboard struct {
	agent   *cluster.Agent
	reg     *node.Registry
	engines node.EngineProvider
	fwd     *forward.Client // nil: no peer is asked
	// recent is the request path's ring of recent requests, which the dashboard lists.
	recent *pipeline.Recent
}

// routes registers the page's files on app (no key) and its reads on the admin group.
func (d *dashboard) routes(app, admin fiber.Router) {
	app.Get("/", func(c *fiber.Ctx) error { return serveAsset(c, "index.html") })
	app.Get("/ui/*", func(c *fiber.Ctx) error { return serveAsset(c, c.Params("*")) })
	admin.Get("/requests", d.listRequests)
	admin.Get("/paths", d.listPaths)
	admin.Get("/cluster/stats", d.clusterStats)
	admin.Post("/instance-links/check", d.checkLink)
}

type asset struct {
	body  []byte
	etag  string
	ctype string
}

var assets = sync.OnceValue(func() map[string]asset {
	out := map[string]asset{}
	_ = fs.WalkDir(ui.Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(ui.Files(), p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[p] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: contentType(p)}
		return nil
	})
	return out
})

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json":
		return "application/json"
	}
	return "application/octet-stream"
}

// serveAsset answers with one of the dashboard's files, revalidated by its ETag.
func serveAsset(c *fiber.Ctx, name string) error {
	a, ok := assets()[name]
	if !ok {
		return &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "unknown_url",
			Message: fmt.Sprintf("The dashboard has no file %q.", name)}
	}
	c.Set("Content-Security-Policy", dashboardPolicy)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Referrer-Policy", "no-referrer")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderETag, a.etag)
	if strings.Contains(c.Get(fiber.HeaderIfNoneMatch), a.etag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	c.Set(fiber.HeaderContentType, a.ctype)
	return c.Send(a.body)
}

// listPaths is GET /admin/v1/paths: the path between every ordered pair of eligible nodes, as this node
// sees them (addresses, link kinds and speeds from tags; RTT from Vivaldi coordinates).
func (d *dashboard) listPaths(c *fiber.Ctx) error {
	snap := d.agent.Snapshot()
	var ids []cluster.NodeID
	for _, n := range snap.Nodes {
		if n.Eligible() {
			ids = append(ids, n.ID)
		}
	}
	out := make([]client.Path, 0, len(ids)*len(ids))
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			p, ok := snap.Path(a, b)
			if !ok {
				continue
			}
			v := client.Path{From: string(a), To: string(b), Interface: p.Address.Interface, Kind: string(p.Kind),
				SpeedMbps: p.SpeedMbps, RTTKnown: p.RTTKnown, Quality: p.Quality, Direct: p.Direct}
			if p.Address.IP.IsValid() {
				v.Address = p.Address.IP.String()
			}
			if p.RTTKnown {
				v.RTTMS = msOf(p.RTT)
			}
			out = append(out, v)
		}
	}
	return c.JSON(client.Paths{From: d.reg.Node(), Paths: out})
}

// peerStatsConcurrency bounds how many peers are asked at once; peerStatsTimeout how long each may take.
const (
	peerStatsConcurrency = 8
	peerStatsTimeout     = 3 * time.Second
)

// clusterStats is GET /admin/v1/cluster/stats: every alive node's engine figures (KV memory, prefix cache),
// which are not gossiped: this node asks each gateway for its /admin/v1/status. A node that does not answer
// in time is listed with an error.
func (d *dashboard) clusterStats(c *fiber.Ctx) error {
	snap := d.agent.Snapshot()
	var nodes []string
	for _, n := range snap.Nodes {
		if n.Eligible() && (n.Status == cluster.StatusAlive || n.Status == cluster.StatusSuspect) {
			nodes = append(nodes, string(n.ID))
		}
	}
	if len(nodes) == 0 {
		nodes = []string{d.reg.Node()}
	}
	out := make([]client.NodeStats, len(nodes))
	pr := peerRequestOf(c)
	sem := make(chan struct{}, peerStatsConcurrency)
	var wg sync.WaitGroup
	for i, id := range nodes {
		out[i].Node = id
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), peerStatsTimeout)
			defer cancel()
			st, err := d.nodeStats(ctx, pr, id)
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			for _, in := range st.Instances {
				out[i].Instances = append(out[i].Instances, client.InstanceFigures{ID: in.InstanceID, InFlight: in.InFlight,
					Queued: in.Queued, KVBytes: in.KVBytes, KVCapacityBytes: in.KVCapacityBytes,
					PrefixHits: in.PrefixCache.Hits, PrefixMisses: in.PrefixCache.Misses,
					PrefixHitTokens: in.PrefixCache.HitTokens, PrefixBytes: in.PrefixCache.Bytes})
			}
		})
	}
	wg.Wait()
	return c.JSON(client.ClusterStats{Nodes: out})
}

// peerRequest is what a fan-out needs of the client's request; it is copied before the handler returns.
type peerRequest struct {
	requestID string
	header    http.Header
}

func peerRequestOf(c *fiber.Ctx) peerRequest {
	h := http.Header{}
	for _, k := range []string{fiber.HeaderAuthorization, "X-Api-Key"} {
		if v := c.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return peerRequest{requestID: requestIDOf(c), header: h}
}

// nodeStats is a node's engine figures: this one's from its engine, another's from its gateway.
func (d *dashboard) nodeStats(ctx context.Context, pr peerRequest, node string) (engine.Stats, error) {
	if node == d.reg.Node() {
		e, _, err := d.engines.Get()
		if err != nil {
			return engine.Stats{}, errors.New("the engine plugin is not running now")
		}
		return e.Stats(ctx)
	}
	body, err := d.peerFetch(ctx, pr, node, "/admin/v1/status")
	if err != nil {
		return engine.Stats{}, err
	}
	var st struct {
		EngineStats *engine.Stats `json:"engine_stats"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return engine.Stats{}, fmt.Errorf("node %s answered its status with something else: %v", node, err)
	}
	if st.EngineStats == nil {
		return engine.Stats{}, fmt.Errorf("node %s reports no engine figures (its engine is not running)", node)
	}
	return *st.EngineStats, nil
}

// peerGet reads one of another gateway's admin endpoints for the client, as an API error on failure.
func (d *dashboard) peerGet(c *fiber.Ctx, node, p string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), peerStatsTimeout)
	defer cancel()
	body, err := d.peerFetch(ctx, peerRequestOf(c), node, p)
	if err != nil {
		var apiErr *apicore.Error
		if errors.As(err, &apiErr) {
			return nil, apiErr
		}
		return nil, apicore.Unavailable(err.Error())
	}
	return body, nil
}

// peerFetch GETs path (no query: a hop's proof covers the path alone) from node's gateway as a hop.
func (d *dashboard) peerFetch(ctx context.Context, pr peerRequest, node, p string) ([]byte, error) {
	snap := d.agent.Snapshot()
	hostPort, tls, ok := cluster.APIEndpoint(snap, d.reg.Node(), node)
	if !ok || d.fwd == nil {
		return nil, &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no node %q in the cluster (or it advertises no API address)", node)}
	}
	resp, err := d.fwd.Send(ctx, forward.Target{HostPort: hostPort, TLS: tls}, forward.Request{
		Method: fiber.MethodGet, Path: p, RequestID: pr.requestID, Header: pr.header,
		Route: forward.Route{EntryNode: d.reg.Node(), DecodeNode: node},
	})
	if err != nil {
		return nil, fmt.Errorf("node %s did not answer", node)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("node %s broke off its answer", node)
	}
	if resp.StatusCode != http.StatusOK {
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &env)
		return nil, fmt.Errorf("node %s answered %d: %s", node, resp.StatusCode, env.Error.Message)
	}
	return body, nil
}

// checkLink is POST /admin/v1/instance-links/check: the checks a write of the link would make, without
// writing it, so the dashboard can say why a pair cannot work before it is saved. The message is the one the
// write's 400 would carry.
func (d *dashboard) checkLink(c *fiber.Ctx) error {
	var b linkBody
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return apicore.BadRequest("", "the body must be {\"prefill_instances\": [...], \"decode_instances\": [...]}: %v", err)
	}
	check, err := cluster.CheckLink(d.agent.Snapshot(), b.PrefillInstances, b.DecodeInstances)
	if err != nil {
		return c.JSON(fiber.Map{"ok": false, "message": err.Error()})
	}
	return c.JSON(fiber.Map{"ok": true, "exact": check.Exact})
}

// listRequests is GET /admin/v1/requests: the recent requests after ?since= (a seq from an earlier answer's
// "last", or an RFC 3339 time), oldest first.
func (d *dashboard) listRequests(c *fiber.Ctx) error {
	var seq uint64
	var t time.Time
	if v := c.Query("since"); v != "" {
		var err error
		if seq, err = strconv.ParseUint(v, 10, 64); err != nil {
			if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return apicore.BadRequest("since", "since must be a seq number from an earlier answer or an RFC 3339 time, not %q", v)
			}
		}
	}
	if node := c.Query("node"); node != "" && node != d.reg.Node() {
		return d.peerRequests(c, node, seq, t)
	}
	recs, last := d.recent.Since(seq, t)
	return c.JSON(fiber.Map{"node": d.reg.Node(), "capacity": pipeline.RecentCapacity, "last": last, "requests": recs})
}

// peerRequests answers GET /admin/v1/requests?node= from that node's gateway: its whole ring, filtered here
// (a hop carries no query).
func (d *dashboard) peerRequests(c *fiber.Ctx, node string, seq uint64, t time.Time) error {
	body, err := d.peerGet(c, node, "/admin/v1/requests")
	if err != nil {
		return err
	}
	var ans struct {
		Node     string                   `json:"node"`
		Capacity int                      `json:"capacity"`
		Last     uint64                   `json:"last"`
		Requests []pipeline.RecentRequest `json:"requests"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return apicore.Unavailable("node " + node + " answered its recent requests with something else: " + err.Error())
	}
	kept := ans.Requests[:0]
	for _, r := range ans.Requests {
		if r.Seq > seq && !r.Start.Before(t) {
			kept = append(kept, r)
		}
	}
	return c.JSON(fiber.Map{"node": ans.Node, "capacity": ans.Capacity, "last": ans.Last, "requests": kept})
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
