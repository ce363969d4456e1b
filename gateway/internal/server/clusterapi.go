package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"sort"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// clusterAPI is the cluster API of models and instances: the models the whole cluster serves, every node's
// instances, and loading and unloading an instance on any node (a write for another node is forwarded to
// that node's gateway). Reads need an API key when keys are set; writes an admin key when those are, and
// loopback without one (protected mode). Instance links, the router and the keyring are the adminAPI's.
type clusterAPI struct {
	agent   *cluster.Agent
	reg     *node.Registry
	engines node.EngineProvider
	fwd     *forward.Client
	catalog *modelCatalog
	load    *loadPolicy
	// requestTimeout bounds a load and a forwarded write (Config.RequestTimeout).
	requestTimeout time.Duration
	log            *slog.Logger
}

// routes registers the cluster API on /v1; its writes pass the guard's admin checks.
func (a *clusterAPI) routes(v1 fiber.Router, g *guard) {
	v1.Get("/models", a.listModels)
	v1.Get("/models/+", a.getModel)
	v1.Get("/instances", a.listInstances)
	v1.Post("/instances", g.adminOnly, g.localAdminOnly, a.createInstance)
	v1.Delete("/instances/+", g.adminOnly, g.localAdminOnly, a.deleteInstance)
}

// listModels lists the models the whole cluster serves, and this node's aliases of them.
func (a *clusterAPI) listModels(c *fiber.Ctx) error {
	models := a.catalog.usableModels()
	out := make([]openai.Model, 0, len(models))
	for _, id := range sortedKeys(models) {
		out = append(out, openai.Model{ID: id, Created: models[id].Unix(), OwnedBy: "duet"})
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(openai.AppendModelList(nil, out))
}

func (a *clusterAPI) getModel(c *fiber.Ctx) error {
	id, err := url.PathUnescape(c.Params("+"))
	if err != nil {
		return apicore.ModelNotFound(c.Params("+"))
	}
	created, ok := a.catalog.usableModels()[id]
	if !ok {
		return apicore.ModelNotFound(id)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(openai.AppendModel(nil, openai.Model{ID: id, Created: created.Unix(), OwnedBy: "duet"}))
}

// modelCatalog is what models the cluster serves, by every name a client may ask for: GET /v1/models here,
// and Ollama's /api/tags.
type modelCatalog struct {
	agent   *cluster.Agent
	reg     *node.Registry
	aliases *alias.Table
	// started is when this gateway started: a model first seen in the cluster's state is as old as that.
	started time.Time
}

// usableModels is clusterModels with this node's aliases of the models in it, each as old as its model: every
// name a request may ask for.
func (m *modelCatalog) usableModels() map[string]time.Time {
	out := m.clusterModels()
	for name, to := range m.aliases.All() {
		if t, ok := out[to]; ok {
			out[name] = t
		}
	}
	return out
}

// clusterModels maps each model some instance of the cluster serves (or is loading) to when this node first
// saw one, by the name the cluster routes by (an instance's model as it was loaded).
func (m *modelCatalog) clusterModels() map[string]time.Time {
	out := map[string]time.Time{}
	for _, in := range m.agent.Snapshot().Instances {
		if in.Status == cluster.InstanceUnavailable {
			continue
		}
		if _, ok := out[in.Model]; !ok {
			out[in.Model] = m.started
		}
	}
	for _, in := range m.reg.All() {
		if t, ok := out[in.Spec.Model]; !ok || in.LoadedAt.Before(t) {
			out[in.Spec.Model] = in.LoadedAt
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// speedView is an instance's measured speed: prompt tokens per second by prompt-length band, tokens out per
// second, the queue wait, the KV it moves per prompt token and once per transfer (a hybrid's linear-attention
// states) and the goodput measured into it from each node that prefilled for it.
type speedView struct {
	PrefillTPS      []bandView    `json:"prefill_tokens_per_second"`
	DecodeTPS       float64       `json:"decode_tokens_per_second,omitempty"`
	QueueWaitMs     float64       `json:"queue_wait_ms"`
	KVBytesPerToken int64         `json:"kv_bytes_per_token,omitempty"`
	KVStateBytes    int64         `json:"kv_state_bytes,omitempty"`
	IngestBPS       float64       `json:"ingest_bytes_per_second,omitempty"`
	Ingress         []ingressView `json:"kv_ingress,omitempty"`
	Samples         int64         `json:"samples"`
}

type bandView struct {
	// From and To bound the band's prompt lengths in tokens; To 0 is unbounded.
	From, To int
	TPS      float64 `json:"tokens_per_second"`
}

func (b bandView) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		From int     `json:"from_tokens"`
		To   int     `json:"to_tokens,omitempty"`
		TPS  float64 `json:"tokens_per_second"`
	}{b.From, b.To, math.Round(b.TPS*10) / 10})
}

type ingressView struct {
	From           string  `json:"from_node"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	RTTMs          float64 `json:"rtt_ms,omitempty"`
	Samples        int64   `json:"samples"`
	// PrefillTPS: prompt tokens per second of whole remote prefills from that node (request to last byte), by
	// band as prefill_tokens_per_second.
	PrefillTPS []bandView `json:"remote_prefill_tokens_per_second,omitempty"`
}

func speedViewOf(sp *cluster.Speed) *speedView {
	if sp == nil {
		return nil
	}
	v := &speedView{
		DecodeTPS: math.Round(sp.DecodeTPS*10) / 10, QueueWaitMs: float64(sp.QueueWait.Microseconds()) / 1000,
		KVBytesPerToken: sp.KVBytesPerToken, KVStateBytes: sp.KVStateBytes, IngestBPS: math.Round(sp.IngestBPS), Samples: sp.Samples,
	}
	v.PrefillTPS = bandsOf(sp.PrefillTPS)
	for _, l := range sp.Ingress {
		v.Ingress = append(v.Ingress, ingressView{From: string(l.From), BytesPerSecond: math.Round(l.BytesPerSecond),
			RTTMs: float64(l.RTT.Microseconds()) / 1000, Samples: l.Samples, PrefillTPS: bandsOf(l.PrefillTPS)})
	}
	return v
}

// bandsOf labels rates by prompt-length band with the bands' bounds.
func bandsOf(rates []float64) []bandView {
	var out []bandView
	from := 0
	for i, tps := range rates {
		b := bandView{From: from, TPS: tps}
		if i < len(speedBandLimits) {
			b.To = speedBandLimits[i]
			from = b.To
		}
		out = append(out, b)
	}
	return out
}

// speedBandLimits are router.PrefillBand's bounds, for the view.
var speedBandLimits = func() []int {
	var out []int
	for n, b := 1, 0; n < 1<<30 && len(out) < router.PrefillBands-1; n++ {
		if nb := router.PrefillBand(n); nb != b {
			out, b = append(out, n), nb
		}
	}
	return out
}()

// viewOf is an instance as GET /v1/instances shows it.
func viewOf(in cluster.Record) client.Instance {
	f, _ := cluster.FactsFromLabels(in.Labels)
	v := client.Instance{
		ID: in.ID, Model: in.Model, Node: string(in.Node), Role: string(in.Role), Status: string(in.Status),
		Engine: in.Engine, Backend: f.Backend, Architecture: f.Architecture, Quantization: f.Quantization,
		Parameters: f.Parameters, ContextLength: f.ContextLength, KVEndpoint: in.KVEndpoint, Fingerprint: in.Fingerprint,
		KVCompat: f.KVCompat, MaxBytesPerToken: f.MaxBytesPerToken,
		Load: client.Load{InFlight: in.Load.InFlight, Queued: in.Load.Queued, UpdatedAt: in.Load.UpdatedAt},
	}
	if f.KV.NumLayers > 0 {
		v.KV = &client.KVLayout{Layers: f.KV.NumLayers, KVHeads: f.KV.NumKVHeads, HeadDim: f.KV.HeadDim,
			DType: f.KV.DType, BytesPerToken: f.KV.BytesPerToken(), LinearLayers: f.KV.LinearLayers, StateBytes: f.KV.StateBytes}
	}
	if sp := speedViewOf(in.Load.Speed); sp != nil {
		v.Speed, _ = json.Marshal(sp) // a struct of numbers and strings: it always marshals
	}
	return v
}

func (a *clusterAPI) listInstances(c *fiber.Ctx) error {
	snap := a.agent.Snapshot()
	local := a.reg.LocalLoads()
	out := make([]client.Instance, 0, len(snap.Instances))
	for _, in := range snap.Instances {
		if n, ok := local[in.ID]; ok && string(in.Node) == a.reg.Node() {
			in.Load.InFlight = n // exact here; gossip lags
			if sp, ok := a.agent.Speeds().Speed(in.ID); ok {
				in.Load.Speed = &sp // newest here; gossip carries it at a bounded rate
			}
		}
		out = append(out, viewOf(in))
	}
	// How far this gateway's estimates (PD auto) were from what happened, by placement.
	return c.JSON(fiber.Map{"instances": out, "estimate_errors": a.agent.Speeds().EstimateErrors()})
}

// createInstance loads a model on a node: here, or on the node named, through that node's gateway. It answers
// once the model is loaded (the cluster shows the instance loading meanwhile).
func (a *clusterAPI) createInstance(c *fiber.Ctx) error {
	var b client.NewInstance
	if err := json.Unmarshal(c.Body(), &b); err != nil {
		return apicore.BadRequest("", "the body must be a JSON object {model, node?, id?, role?, options?}: %v", err)
	}
	if b.Model == "" {
		return apicore.BadRequest("model", "model is required")
	}
	role := cluster.Role(b.Role)
	switch role {
	case "":
		role = cluster.RoleBoth
	case cluster.RolePrefill, cluster.RoleDecode, cluster.RoleBoth:
	default:
		return apicore.BadRequest("role", "role %q is not prefill, decode or both", b.Role)
	}
	if b.ID != "" {
		if err := cluster.CheckNodeID(b.ID); err != nil {
			return apicore.BadRequest("id", "instance id: %v", err)
		}
		if _, taken := a.agent.Snapshot().Instance(b.ID); taken {
			return &apicore.Error{Status: fiber.StatusConflict, Type: apicore.TypeInvalidRequest, Code: "conflict",
				Message: fmt.Sprintf("instance %q exists already", b.ID)}
		}
	}
	if err := checkLoadOptions(b.Options); err != nil {
		return err
	}
	if b.Node != "" && b.Node != a.reg.Node() {
		return a.forwardAdmin(c, b.Node)
	}
	// The node that loads decides what it loads: its --models-dir, its memory, its limit.
	model, size, err := a.load.resolveAPIModel(b.Model)
	if err != nil {
		return err
	}
	if err := checkFits(b.Model, size); err != nil {
		return err
	}
	e, _, err := a.engines.Get()
	if err != nil {
		a.log.Warn("engine unavailable", "error", err)
		return apicore.Unavailable("the engine plugin is not running now; retry shortly")
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.requestTimeout)
	defer cancel()
	in, err := a.reg.Add(ctx, e, node.InstanceSpec{ID: b.ID, Model: model, Options: b.Options, Role: role})
	if errors.Is(err, node.ErrTooManyInstances) {
		return &apicore.Error{Status: fiber.StatusConflict, Type: apicore.TypeInvalidRequest, Code: "too_many_instances", Message: err.Error()[len(node.ErrTooManyInstances.Error())+2:]}
	}
	if err != nil {
		var ee *engine.Error
		if errors.As(err, &ee) {
			return apicore.FromEngine(err)
		}
		return apicore.BadRequest("", "%v", err)
	}
	rec, ok := a.agent.Snapshot().Instance(in.Desc.InstanceID)
	if !ok {
		return c.JSON(fiber.Map{"id": in.Desc.InstanceID, "node": a.reg.Node(), "model": in.Desc.ModelID})
	}
	return c.Status(fiber.StatusCreated).JSON(viewOf(rec))
}

// deleteInstance unloads an instance, on whichever node serves it.
func (a *clusterAPI) deleteInstance(c *fiber.Ctx) error {
	id, err := url.PathUnescape(c.Params("+"))
	if err != nil {
		return apicore.BadRequest("", "bad instance id")
	}
	rec, ok := a.agent.Snapshot().Instance(id)
	if ok && string(rec.Node) != a.reg.Node() {
		return a.forwardAdmin(c, string(rec.Node))
	}
	e, _, _ := a.engines.Get()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.reg.Remove(ctx, e, id); errors.Is(err, node.ErrNoInstance) {
		return &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no instance %q in the cluster", id)}
	} else if err != nil {
		return apicore.FromEngine(err)
	}
	return c.JSON(fiber.Map{"message": "instance unloaded", "id": id})
}

// forwardAdmin carries an admin write to the node it concerns, authenticated as a hop, and passes its answer
// back.
func (a *clusterAPI) forwardAdmin(c *fiber.Ctx, node string) error {
	if _, hop := locals.Hop(c); hop {
		return &apicore.Error{Status: fiber.StatusLoopDetected, Type: apicore.TypeInvalidRequest, Code: "loop_detected",
			Message: fmt.Sprintf("node %s was asked to forward a forwarded request", a.reg.Node())}
	}
	hostPort, tls, ok := cluster.APIEndpoint(a.agent.Snapshot(), a.reg.Node(), node)
	if !ok {
		return &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Code: "not_found",
			Message: fmt.Sprintf("no node %q in the cluster (or it advertises no API address)", node)}
	}
	header := locals.RequestHeader(c)
	ctx, cancel := context.WithTimeout(context.Background(), a.requestTimeout)
	defer cancel()
	resp, err := a.fwd.Send(ctx, forward.Target{HostPort: hostPort, TLS: tls}, forward.Request{
		Method: c.Method(), Path: string(c.Request().URI().PathOriginal()), Body: c.Body(), RequestID: requestIDOf(c),
		Route: forward.Route{EntryNode: a.reg.Node(), DecodeNode: node}, Header: header,
	})
	if err != nil {
		a.log.Warn("forward: admin write", "node", node, "error", err)
		return apicore.Unavailable(fmt.Sprintf("node %s did not answer; retry (request id %s)", node, requestIDOf(c)))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return apicore.Unavailable(fmt.Sprintf("node %s broke off its answer (request id %s)", node, requestIDOf(c)))
	}
	c.Set(fiber.HeaderContentType, resp.Header.Get(fiber.HeaderContentType))
	return c.Status(resp.StatusCode).Send(body)
}
