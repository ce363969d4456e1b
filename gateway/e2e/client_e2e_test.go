package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// TestClientAgainstGateway runs every method of gateway/client against a real gateway with keys and a cluster
// secret: two instances of the embedded model (so that a link can be made), its reads with the API key, its
// writes with the admin key, and its refusals as *client.Error with the envelope's fields.
func TestClientAgainstGateway(t *testing.T) {
	secret := writeSecret(t, "the secret of the client's gateway, long enough")
	g := startDuet(t, "--model", "embedded", "--model", "embedded", "--api-key", "k1", "--admin-key", "a1",
		"--cluster-secret-file", secret)
	ctx := t.Context()
	user := client.New(g.url, client.WithAPIKey("k1"))
	admin := client.New(g.url, client.WithAPIKey("k1"), client.WithAdminKey("a1"))

	if h, err := g.api.Health(ctx); err != nil || h.Status != "ok" || h.Instances != 2 {
		t.Errorf("Health: %+v %v", h, err)
	}
	if _, err := g.api.Instances(ctx); client.StatusOf(err) != 401 {
		t.Errorf("Instances without a key: %v, want 401", err)
	}
	ins, err := user.Instances(ctx)
	if err != nil || len(ins) != 2 || ins[0].Status != "ready" || ins[0].KVEndpoint == "" || ins[0].KV == nil || ins[0].KV.BytesPerToken == 0 {
		t.Fatalf("Instances: %+v %v", ins, err)
	}
	st, err := user.State(ctx)
	if n, ok := st.Node(st.Local); err != nil || !ok || n.Status != "alive" || n.Tags.APIAddr == "" || len(st.Instances) != 2 {
		t.Errorf("State: %+v %v", st, err)
	}
	if ms, err := user.Models(ctx); err != nil || !slices.ContainsFunc(ms, func(m client.Model) bool { return m.ID == "embedded" }) {
		t.Errorf("Models: %+v %v", ms, err)
	}
	if f, err := user.FeatureFlags(ctx); err != nil || !f["disaggregation"] {
		t.Errorf("FeatureFlags: %v %v", f, err)
	}

	// Links: checked, made, changed and removed.
	p, d := ins[0].ID, ins[1].ID
	if c, err := user.CheckLink(ctx, []string{p}, []string{d}); err != nil || !c.OK || !c.Exact {
		t.Errorf("CheckLink: %+v %v", c, err)
	}
	if c, err := user.CheckLink(ctx, []string{p}, []string{p}); err != nil || c.OK || c.Message == "" {
		t.Errorf("CheckLink of an instance with itself: %+v %v", c, err)
	}
	_, err = user.CreateLink(ctx, []string{p}, []string{d})
	if e := client.AsError(err); e == nil || e.Status != 403 || e.Code != "admin_key_required" || e.Message == "" {
		t.Errorf("CreateLink with the API key: %v, want 403 admin_key_required", err)
	}
	w, err := admin.CreateLink(ctx, []string{p}, []string{d})
	if err != nil || w.LinkID == "" || !w.Exact {
		t.Fatalf("CreateLink: %+v %v", w, err)
	}
	if w2, err := admin.UpdateLink(ctx, w.LinkID, []string{d}, []string{p}); err != nil || w2.LinkID != w.LinkID {
		t.Errorf("UpdateLink: %+v %v", w2, err)
	}
	if ls, err := user.Links(ctx); err != nil || len(ls) != 1 || ls[0].LinkID != w.LinkID || !slices.Equal(ls[0].PrefillInstances, []string{d}) {
		t.Errorf("Links: %+v %v", ls, err)
	}
	if err := admin.DeleteLink(ctx, w.LinkID); err != nil {
		t.Errorf("DeleteLink: %v", err)
	}
	if ls, err := user.Links(ctx); err != nil || len(ls) != 0 {
		t.Errorf("Links after the delete: %+v %v", ls, err)
	}
	_, err = admin.CreateLink(ctx, []string{"ghost"}, []string{d})
	if e := client.AsError(err); e == nil || e.Status != 400 || e.Type != "invalid_request_error" {
		t.Errorf("CreateLink of an unknown instance: %v", err)
	}

	// The router, the aliases and the keyring.
	if r, err := user.Router(ctx); err != nil || r.Router != "router-disagg" || !slices.Contains(r.Available, "roundrobin") {
		t.Errorf("Router: %+v %v", r, err)
	}
	if now, err := admin.SetRouter(ctx, "roundrobin", ""); err != nil || now != "roundrobin" {
		t.Errorf("SetRouter: %q %v", now, err)
	}
	if _, err := admin.SetRouter(ctx, "roundrobin", "not hex"); client.StatusOf(err) != 400 || client.AsError(err).Param != "sha256" {
		t.Errorf("SetRouter with a bad sha256: %v", err)
	}
	if a, err := admin.SetModelAliases(ctx, map[string]string{"small": "embedded"}); err != nil || a["small"] != "embedded" {
		t.Errorf("SetModelAliases: %v %v", a, err)
	}
	if a, err := user.ModelAliases(ctx); err != nil || len(a) != 1 || a["small"] != "embedded" {
		t.Errorf("ModelAliases: %v %v", a, err)
	}
	if _, err := user.Keys(ctx); client.StatusOf(err) != 403 {
		t.Errorf("Keys with the API key: %v, want 403", err)
	}
	if k, err := admin.Keys(ctx); err != nil || k.NumNodes != 1 || len(k.Keys) != 1 || len(k.PrimaryKeys) != 1 {
		t.Errorf("Keys: %+v %v", k, err)
	}
	if err := admin.ChangeKeys(ctx, "rotate", "AAAA"); client.StatusOf(err) != 400 || client.AsError(err).Param != "op" {
		t.Errorf("ChangeKeys with an unknown op: %v", err)
	}

	// A request, then what the gateway says of it and of itself.
	if st, err := user.Call(ctx, client.APIKey, "POST", "/v1/completions", map[string]any{"model": "small", "prompt": "hi", "max_tokens": 2}, nil); err != nil || st != 200 {
		t.Fatalf("a completion through Call: %d %v", st, err)
	}
	if r, err := user.Requests(ctx, client.RequestsQuery{}); err != nil || len(r.Requests) != 1 || r.Requests[0].Timings == nil ||
		r.Requests[0].Timings.PrefillSource == "" || r.Requests[0].Usage == nil || r.Requests[0].Route.DecodeInstance == "" {
		t.Errorf("Requests: %+v %v", r, err)
		if err == nil && len(r.Requests) == 1 {
			t.Logf("timings %+v", r.Requests[0].Timings)
		}
	} else if later, err := user.Requests(ctx, client.RequestsQuery{Since: r.Last}); err != nil || len(later.Requests) != 0 {
		t.Errorf("Requests since the last: %+v %v", later, err)
	}
	if s, err := user.Status(ctx); err != nil || len(s.Instances) != 2 || len(s.Plugins) == 0 || len(s.EngineStats.Instances) != 2 {
		t.Errorf("Status: %+v %v", s, err)
	}
	if cs, err := user.ClusterStats(ctx); err != nil || len(cs.Nodes) != 1 || cs.Nodes[0].Error != "" || len(cs.Nodes[0].Instances) != 2 {
		t.Errorf("ClusterStats: %+v %v", cs, err)
	}
	if ps, err := user.Paths(ctx); err != nil || ps.From != st.Local || len(ps.Paths) != 0 {
		t.Errorf("Paths of a cluster of one: %+v %v", ps, err)
	}
	if n, err := user.LinkProbe(ctx); err != nil || n != 4<<20 {
		t.Errorf("LinkProbe: %d bytes, %v", n, err)
	}

	// Instances loaded and unloaded.
	in, err := admin.CreateInstance(ctx, client.NewInstance{Model: "embedded", ID: "extra", Role: "decode"})
	if err != nil || in.ID != "extra" || in.Role != "decode" || in.Status != "ready" {
		t.Fatalf("CreateInstance: %+v %v", in, err)
	}
	if _, err := admin.CreateInstance(ctx, client.NewInstance{Model: "embedded", ID: "extra"}); client.StatusOf(err) != 409 || client.AsError(err).Code != "conflict" {
		t.Errorf("CreateInstance of a taken id: %v", err)
	}
	if err := admin.DeleteInstance(ctx, "extra"); err != nil {
		t.Errorf("DeleteInstance: %v", err)
	}
	if err := admin.DeleteInstance(ctx, "extra"); client.StatusOf(err) != 404 {
		t.Errorf("DeleteInstance of an instance gone: %v", err)
	}

	// A deadline that passed: no answer, and no *Error.
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := user.State(dctx); !errors.Is(err, context.DeadlineExceeded) || client.AsError(err) != nil {
		t.Errorf("a deadline that passed: %v", err)
	}
}
