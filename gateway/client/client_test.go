package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fake answers every request with status and body, and records what it got.
type fake struct {
	status int
	body   string
	got    []*http.Request
	bodies []string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.got = append(f.got, r)
	f.bodies = append(f.bodies, string(b))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	io.WriteString(w, f.body)
}

func serve(t *testing.T, status int, body string, opts ...Option) (*Client, *fake) {
	t.Helper()
	f := &fake{status: status, body: body}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return New(srv.URL+"/", opts...), f
}

func TestErrorDecoding(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body                string
		status                    int
		message, typ, param, code string
	}{
		{name: "envelope", status: 400,
			body:    `{"error":{"message":"role \"x\" is not prefill, decode or both","type":"invalid_request_error","param":"role","code":null}}`,
			message: `role "x" is not prefill, decode or both`, typ: "invalid_request_error", param: "role"},
		{name: "envelope with code", status: 403,
			body:    `{"error":{"message":"this gateway is in protected mode","type":"permission_error","param":null,"code":"protected_mode"}}`,
			message: "this gateway is in protected mode", typ: "permission_error", code: "protected_mode"},
		{name: "healthz", status: 503, body: `{"status":"unavailable","error":"the engine plugin is not ready"}`,
			message: "the engine plugin is not ready"},
		{name: "not JSON", status: 502, body: "  bad gateway\n", message: "bad gateway"},
		{name: "long text", status: 500, body: strings.Repeat("x", 400), message: strings.Repeat("x", 300) + "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl, _ := serve(t, c.status, c.body)
			_, err := cl.Router(context.Background())
			e := AsError(err)
			if e == nil {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Status != c.status || e.Message != c.message || e.Type != c.typ || e.Param != c.param || e.Code != c.code {
				t.Errorf("got %+v", e)
			}
			if e.Method != "GET" || !strings.HasSuffix(e.URL, "/admin/v1/router") || string(e.Body) != c.body {
				t.Errorf("got method %q, URL %q, body %q", e.Method, e.URL, e.Body)
			}
			if StatusOf(err) != c.status || !strings.Contains(err.Error(), c.message[:min(len(c.message), 20)]) {
				t.Errorf("StatusOf = %d, Error() = %q", StatusOf(err), err)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		opts             []Option
		read, write, adm string
	}{
		{name: "no keys"},
		{name: "api key only", opts: []Option{WithAPIKey("k")}, read: "Bearer k", write: "Bearer k", adm: "Bearer k"},
		{name: "both", opts: []Option{WithAPIKey("k"), WithAdminKey("a")}, read: "Bearer k", write: "Bearer a", adm: "Bearer a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl, f := serve(t, 200, `{}`, c.opts...)
			ctx := context.Background()
			_, _ = cl.Instances(ctx)
			_ = cl.DeleteInstance(ctx, "a/b")
			_, _ = cl.Keys(ctx)
			if len(f.got) != 3 {
				t.Fatalf("%d requests", len(f.got))
			}
			for i, want := range []string{c.read, c.write, c.adm} {
				if got := f.got[i].Header.Get("Authorization"); got != want {
					t.Errorf("request %d (%s %s): Authorization %q, want %q", i, f.got[i].Method, f.got[i].URL, got, want)
				}
			}
			if p := f.got[1].URL.EscapedPath(); p != "/v1/instances/a%2Fb" {
				t.Errorf("delete path %q", p)
			}
		})
	}
}

func TestDecoding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl, f := serve(t, 200, `{"instances":[{"id":"i1","model":"echo","node":"n1","role":"both","status":"ready","engine":"echo",`+
		`"kv":{"layers":2,"kv_heads":1,"head_dim":4,"dtype":"float32","bytes_per_token":64},"load":{"in_flight":3,"queued":1}}],"estimate_errors":{}}`)
	ins, err := cl.Instances(ctx)
	if err != nil || len(ins) != 1 || ins[0].ID != "i1" || ins[0].KV == nil || ins[0].KV.BytesPerToken != 64 || ins[0].Load.InFlight != 3 {
		t.Fatalf("Instances = %+v, %v", ins, err)
	}
	f.body = `{"version":3,"local":"n1","nodes":[{"id":"n1","status":"alive","tags":{"node_id":"n1","api_addr":"127.0.0.1:1"},"gossip":"127.0.0.1:2"}],"instances":[],"links":[{"link_id":"link-1","prefill_instances":["a"],"decode_instances":["b"],"revision":{"ltime":1,"origin":"n1"}}]}`
	st, err := cl.State(ctx)
	if n, ok := st.Node("n1"); err != nil || !ok || n.Tags.APIAddr != "127.0.0.1:1" || len(st.Links) != 1 || st.Links[0].DecodeInstances[0] != "b" {
		t.Fatalf("State = %+v, %v", st, err)
	}
	f.body = `{"object":"list","data":[{"id":"echo","object":"model","created":1,"owned_by":"duet"}]}`
	if ms, err := cl.Models(ctx); err != nil || len(ms) != 1 || ms[0].ID != "echo" {
		t.Fatalf("Models = %+v, %v", ms, err)
	}
	f.body = `{"message":"instance link created","command_id":"c","link_id":""}`
	if _, err := cl.CreateLink(ctx, []string{"a"}, []string{"b"}); err == nil || !strings.Contains(err.Error(), "no link_id") {
		t.Errorf("CreateLink without a link_id: %v", err)
	}
	if got := f.bodies[len(f.bodies)-1]; got != `{"decode_instances":["b"],"prefill_instances":["a"]}` {
		t.Errorf("CreateLink sent %s", got)
	}
	f.body = `{"node":"n1","capacity":256,"last":7,"requests":[]}`
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		q    RequestsQuery
		want string
	}{
		{RequestsQuery{}, "/admin/v1/requests"},
		{RequestsQuery{Since: 5}, "/admin/v1/requests?since=5"},
		{RequestsQuery{SinceTime: since, Node: "n2"}, "/admin/v1/requests?node=n2&since=2026-01-02T03%3A04%3A05Z"},
	} {
		if r, err := cl.Requests(ctx, c.q); err != nil || r.Last != 7 {
			t.Fatalf("Requests = %+v, %v", r, err)
		}
		if got := f.got[len(f.got)-1].URL.RequestURI(); got != c.want {
			t.Errorf("Requests(%+v) asked %s, want %s", c.q, got, c.want)
		}
	}
	f.body = `not json`
	if _, err := cl.Status(ctx); err == nil || AsError(err) != nil {
		t.Errorf("a 200 that is not JSON: %v", err)
	}
}

func TestDeadlines(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	cl := New(srv.URL, WithTimeout(50*time.Millisecond))
	if _, err := cl.Health(context.Background()); !errors.Is(err, context.DeadlineExceeded) || AsError(err) != nil {
		t.Errorf("no deadline in the context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(srv.URL).State(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
	if _, err := New("http://127.0.0.1:1").State(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach duet") {
		t.Errorf("nothing listening: %v", err)
	}
}
