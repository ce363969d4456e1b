package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/pipeline"
)

// startNode starts a real node of one on loopback: its own gossip port, the in-process router, no engine (the
// admin API answers without one).
func startNode(t *testing.T) *node.Node {
	t.Helper()
	t.Setenv("DUET_CLUSTER_TIMINGS", "local")
	n, err := node.Start(context.Background(), node.Config{
		NodeID: "n1", DataDir: t.TempDir(), Engine: "echo", Router: "roundrobin",
		ListenHost: "127.0.0.1", APIAddr: "127.0.0.1:1", ClusterBind: "127.0.0.1:0", ClusterBindSet: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// adminApp serves the admin API alone behind g, as the server mounts it (the groups authenticate first).
func adminApp(n *node.Node, g *guard) *fiber.App {
	discard := slog.New(slog.DiscardHandler)
	a := &adminAPI{agent: n.Agent(), reg: n.Registry(), engines: n.Engines(), swap: n.Swapper(), aliases: alias.New(nil),
		limiter: pipeline.NewLimiter(4, 4, time.Second), exposure: g.exposure, log: discard,
		status: func() any { return []string{"a plugin"} }}
	app := fiber.New(fiber.Config{ErrorHandler: (&Server{log: discard}).handleError})
	a.routes(app, app.Group("/v1", g.authOrHop), app.Group("/admin/v1", g.authOrHop), g)
	return app
}

// TestAdminAPI walks the admin API of a real node through its routes: reads take the API key, writes the
// admin key; each answer has the status and says what the gateway's clients (the dashboard, duet's own
// commands, exo's clients) read in it.
func TestAdminAPI(t *testing.T) {
	n := startNode(t)
	// Two instances as an engine would publish them: one serves KV, both have the same model.
	for _, in := range []cluster.Instance{
		{ID: "p1", Model: "m", Engine: "echo", Role: cluster.RolePrefill, Status: cluster.InstanceReady, KVEndpoint: "127.0.0.1:9", Fingerprint: "f"},
		{ID: "d1", Model: "m", Engine: "echo", Role: cluster.RoleDecode, Status: cluster.InstanceReady, Fingerprint: "f"},
	} {
		if err := n.Agent().Publish(in); err != nil {
			t.Fatal(err)
		}
	}
	app := adminApp(n, newGuard(Config{APIKeys: []string{"k1"}, AdminKeys: []string{"a1"}, ListensBeyondLoopback: true}, nil, nil))
	var linkID string
	for _, step := range []struct {
		name, method, path, key, body string
		want                          int
		says                          []string
	}{
		{"feature flags", "GET", "/v1/feature-flags", "k1", "", 200, []string{`{"disaggregation":true}`}},
		{"feature flags need a key", "GET", "/v1/feature-flags", "", "", 401, []string{"invalid_api_key"}},
		{"state", "GET", "/state", "k1", "", 200, []string{`"n1"`, `"p1"`, `"exposure":["No cluster secret`}},
		{"status", "GET", "/admin/v1/status", "k1", "", 200, []string{`"in_flight":0`, `"queued":0`, `"plugins":["a plugin"]`}},

		{"router", "GET", "/admin/v1/router", "k1", "", 200, []string{`"router":"roundrobin"`, `"router-disagg"`}},
		{"a router swap needs the admin key", "PUT", "/admin/v1/router", "k1", `{"router":"router-disagg"}`, 403, []string{"admin_key_required"}},
		{"a router swap without a name", "PUT", "/admin/v1/router", "a1", `{}`, 400, []string{`"param":"router"`}},
		{"a router swap with a bad pin", "PUT", "/admin/v1/router", "a1", `{"router":"router-disagg","sha256":"zz"}`, 400, []string{`"param":"sha256"`, "64 hex digits"}},
		{"a router not registered", "PUT", "/admin/v1/router", "a1", `{"router":"/bin/sh"}`, 400, []string{"the router was not swapped"}},
		{"a router swap", "PUT", "/admin/v1/router", "a1", `{"router":"router-disagg"}`, 200, []string{`"router":"router-disagg"`, "new requests use this router"}},
		{"the router after the swap", "GET", "/admin/v1/router", "k1", "", 200, []string{`"router":"router-disagg"`}},

		{"no aliases", "GET", "/admin/v1/model-aliases", "k1", "", 200, []string{`{"aliases":{}}`}},
		{"aliases need the admin key", "PUT", "/admin/v1/model-aliases", "k1", `{"aliases":{"fast":"m"}}`, 403, []string{"admin_key_required"}},
		{"aliases without a map", "PUT", "/admin/v1/model-aliases", "a1", `{}`, 400, []string{`"param":"aliases"`}},
		{"aliases set", "PUT", "/admin/v1/model-aliases", "a1", `{"aliases":{"fast":"m"}}`, 200, []string{`{"aliases":{"fast":"m"}}`}},
		{"aliases read back", "GET", "/admin/v1/model-aliases", "k1", "", 200, []string{`{"aliases":{"fast":"m"}}`}},

		{"no links", "GET", "/v1/instance-links", "k1", "", 200, []string{`[]`}},
		{"a link needs the admin key", "POST", "/v1/instance-links", "k1", `{"prefill_instances":["p1"],"decode_instances":["d1"]}`, 403, []string{"admin_key_required"}},
		{"a link that is not JSON", "POST", "/v1/instance-links", "a1", `{`, 400, []string{"the body must be"}},
		{"a link to nothing", "POST", "/v1/instance-links", "a1", `{"prefill_instances":["p1"],"decode_instances":["nope"]}`, 400, []string{`"param":"decode_instances"`, "unknown instance"}},
		{"a link from an instance without KV", "POST", "/v1/instance-links", "a1", `{"prefill_instances":["d1"],"decode_instances":["p1"]}`, 400, []string{`"param":"prefill_instances"`, "serves no KV"}},
		{"a link", "POST", "/v1/instance-links", "a1", `{"prefill_instances":["p1"],"decode_instances":["d1"]}`, 200, []string{`"message":"instance link created"`, `"exact":true`, `"command_id":"`}},
		{"the link listed", "GET", "/v1/instance-links", "k1", "", 200, []string{`"prefill_instances":["p1"]`, `"decode_instances":["d1"]`, `"exact":true`}},
		{"an update of no link", "PUT", "/v1/instance-links/link-nope", "a1", `{"prefill_instances":["p1"],"decode_instances":["d1"]}`, 404, []string{"not_found", `no instance link \"link-nope\"`}},
		{"an update", "PUT", "/v1/instance-links/{link}", "a1", `{"prefill_instances":["p1"],"decode_instances":["d1"]}`, 200, []string{`"message":"instance link updated"`}},
		{"a delete of no link", "DELETE", "/v1/instance-links/link-nope", "a1", "", 404, []string{"not_found"}},
		{"a delete", "DELETE", "/v1/instance-links/{link}", "a1", "", 200, []string{`"message":"instance link deleted"`}},
		{"no links again", "GET", "/v1/instance-links", "k1", "", 200, []string{`[]`}},

		{"the keyring needs the admin key", "GET", "/admin/v1/cluster/keys", "k1", "", 403, []string{"admin_key_required"}},
		{"the keyring of an unencrypted cluster", "GET", "/admin/v1/cluster/keys", "a1", "", 400, nil},
		{"a keyring op that is none", "POST", "/admin/v1/cluster/keys", "a1", `{"op":"drop","key":""}`, 400, []string{`"param":"op"`}},
		{"a key that is not base64", "POST", "/admin/v1/cluster/keys", "a1", `{"op":"install","key":"%%"}`, 400, []string{`"param":"key"`}},
	} {
		t.Run(step.name, func(t *testing.T) {
			req := httptest.NewRequest(step.method, strings.ReplaceAll(step.path, "{link}", linkID), strings.NewReader(step.body))
			if step.key != "" {
				req.Header.Set("Authorization", "Bearer "+step.key)
			}
			resp, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != step.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, step.want, b)
			}
			for _, s := range step.says {
				if !strings.Contains(string(b), s) {
					t.Errorf("the answer does not say %s: %s", s, b)
				}
			}
			if step.name == "a link" {
				l, ok := n.Agent().Snapshot().Links[0], len(n.Agent().Snapshot().Links) == 1
				if !ok || !strings.Contains(string(b), `"link_id":"`+l.LinkID+`"`) {
					t.Fatalf("the cluster's links %+v, the answer %s", n.Agent().Snapshot().Links, b)
				}
				linkID = l.LinkID
			}
		})
	}
}

// TestAdminAPIProtectedMode: without an admin key, the admin API's writes are refused to a client that is not
// on loopback (app.Test's client is 0.0.0.0), and its reads are not.
func TestAdminAPIProtectedMode(t *testing.T) {
	app := adminApp(startNode(t), newGuard(Config{}, nil, nil))
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/admin/v1/router", "", 200},
		{"PUT", "/admin/v1/router", `{"router":"router-disagg"}`, 403},
		{"PUT", "/admin/v1/model-aliases", `{"aliases":{}}`, 403},
		{"POST", "/v1/instance-links", `{}`, 403},
		{"POST", "/admin/v1/cluster/keys", `{}`, 403},
	} {
		resp, err := app.Test(httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)), -1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == 403 && !strings.Contains(string(b), "protected_mode")) {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.want)
		}
	}
}
