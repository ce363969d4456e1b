package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// The stages without a binary: a pipeline over a scripted engine (apitest.Engine) and a router that answers
// what a test says, served on loopback by fiber as the gateway serves it.

// fakeRouter decides what a test says, and keeps the requests it was asked to place.
type fakeRouter struct {
	decision router.Decision
	err      error

	mu  sync.Mutex
	got []router.Request
}

func (f *fakeRouter) Acquire() (router.Router, func(), error) { return f, func() {}, nil }

func (f *fakeRouter) Route(_ context.Context, req router.Request, _ *router.Snapshot) (router.Decision, error) {
	f.mu.Lock()
	f.got = append(f.got, req)
	f.mu.Unlock()
	return f.decision, f.err
}

// engines hands out one engine.
type engines struct{ e engine.Engine }

func (e engines) Get() (engine.Engine, uint64, error) { return e.e, 1, nil }
func (engines) Explain(uint64) (bool, string)         { return false, "" }

// fixedView is the router's view of a cluster that does not change.
type fixedView struct{ snap *router.Snapshot }

func (v fixedView) Current() *router.Snapshot { return v.snap }

// lifecycle is an observer that writes down what it is told, in order.
type lifecycle struct {
	mu    sync.Mutex
	calls []string
}

func (l *lifecycle) note(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *lifecycle) decided(r *request) {
	where := "local " + r.decision.DecodeInstance
	if r.local == nil {
		where = "remote " + r.decision.DecodeNode
	}
	l.note("decided " + where)
}
func (l *lifecycle) firstToken(*request, time.Time) { l.note("first token") }
func (l *lifecycle) token(*request, time.Time)      { l.note("token") }
func (l *lifecycle) final(_ *request, choice int, f *engine.Final) {
	l.note(fmt.Sprintf("final %d %s", choice, f.FinishReason))
}
func (l *lifecycle) finished(r *request) { l.note(fmt.Sprintf("finished %d", r.answer.status)) }

func (l *lifecycle) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// stageFixture is a pipeline of a node (n1 unless said) with an instance of model m (n1-0), its observers
// and its recent ring, in a cluster where n1-0 and n2-0 serve m.
type stageFixture struct {
	p      *Pipeline
	router *fakeRouter
	engine *apitest.Engine
	life   *lifecycle
	ring   *Recent
}

func newStageFixture(t testing.TB, events ...engine.Event) *stageFixture {
	t.Helper()
	return newNodeFixture(t, "n1", events...)
}

func newNodeFixture(t testing.TB, self string, events ...engine.Event) *stageFixture {
	t.Helper()
	eng := &apitest.Engine{Events: events}
	reg := node.NewRegistry(node.RegistryConfig{Node: self})
	reg.AddSpec(node.InstanceSpec{ID: self + "-0", Model: "m"})
	if err := reg.LoadAll(context.Background(), eng); err != nil {
		t.Fatal(err)
	}
	cfg := Config{RequestTimeout: 30 * time.Minute, WriteTimeout: time.Minute, Heartbeat: time.Hour,
		TokenizeMinBytes: DefaultTokenizeMinBytes}
	snap := &router.Snapshot{Self: self, Instances: []router.Instance{
		{ID: "n1-0", Node: "n1", Model: "m", Status: router.InstanceReady},
		{ID: "n2-0", Node: "n2", Model: "m", Status: router.InstanceReady},
	}}
	f := &stageFixture{
		router: &fakeRouter{decision: router.Decision{DecodeInstance: self + "-0", Reason: "least loaded"}},
		engine: eng, life: &lifecycle{}, ring: &Recent{},
	}
	f.p = &Pipeline{
		cfg: &cfg, reg: reg, view: fixedView{snap}, engines: engines{eng}, routers: f.router,
		limiter: NewLimiter(256, 1024, 30*time.Second), aliases: alias.New(nil),
		log: slog.New(slog.DiscardHandler), heartbeat: func(*fiber.Ctx) time.Duration { return time.Hour },
	}
	f.p.observe(f.life, false)
	f.p.observe(&recentObserver{ring: f.ring}, false)
	return f
}

// serve serves the fixture's OpenAI routes on loopback, with the request id and the end of each request as
// the server's middleware gives them, and returns the base URL.
func (f *stageFixture) serve(t *testing.T) string {
	t.Helper()
	return f.serveB(t)
}

func (f *stageFixture) serveB(t testing.TB) string {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		e := apicore.ErrorOf(err)
		return c.Status(e.Status).Send(e.AppendEnvelope(nil))
	}})
	app.Use(func(c *fiber.Ctx) error {
		locals.SetRequestID(c, "rid-1")
		if h := c.Get(forward.HeaderRoute); h != "" { // a hop, as authOrHop takes it in a cluster without a secret
			route, err := forward.DecodeRoute(h)
			if err != nil {
				return err
			}
			locals.SetHop(c, route)
		}
		err := c.Next()
		status := c.Response().StatusCode()
		var apiErr *apicore.Error
		if errors.As(err, &apiErr) {
			status = apiErr.Status
		}
		Finish(c, status, err)
		return err
	})
	openai.Routes(app.Group("/v1"), f.p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	return "http://" + ln.Addr().String()
}

// post sends a chat request and reads the whole answer.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// recorded waits for the ring's one record: a stream's writer records the request after the client has read
// its last byte.
func (f *stageFixture) recorded(t *testing.T) RecentRequest {
	t.Helper()
	for range 1000 {
		if recs, _ := f.ring.Since(0, time.Time{}); len(recs) == 1 {
			return recs[0]
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the request was not recorded")
	return RecentRequest{}
}

func TestServeWhole(t *testing.T) {
	t.Parallel()
	f := newStageFixture(t, apitest.Text("he"), apitest.Text("llo"),
		engine.Event{Final: apitest.Final(engine.FinishStop, engine.Usage{PromptTokens: 3, CompletionTokens: 2})})
	status, body := post(t, f.serve(t), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.Contains(body, `"content":"hello"`) || !strings.Contains(body, `"id":"chatcmpl-rid-1"`) {
		t.Fatalf("%d %s", status, body)
	}
	rec := f.recorded(t)
	if rec.Status != 200 || rec.Stream || rec.Route.DecodeInstance != "n1-0" || rec.Route.Reason != "least loaded" ||
		rec.Usage == nil || rec.Usage.CompletionTokens != 2 || rec.Timings == nil || rec.FirstByteMS != 0 {
		t.Errorf("recorded %+v", rec)
	}
	// Not registered for every token: later tokens are not told.
	want := []string{"decided local n1-0", "first token", "final 0 stop", "finished 200"}
	if got := f.life.got(); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("lifecycle %q, want %q", got, want)
	}
	if g := f.engine.Generated(); len(g) != 1 || g[0].RequestID != "rid-1" || g[0].InstanceID != "n1-0" {
		t.Errorf("the engine got %+v", g)
	}
}

func TestServeStream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		events     []engine.Event
		wantIn     string
		wantStatus int
		wantFinal  string
	}{
		{"complete", []engine.Event{apitest.Text("he"), apitest.Text("llo"),
			{Final: apitest.Final(engine.FinishStop, engine.Usage{PromptTokens: 3, CompletionTokens: 2})}},
			"data: [DONE]", 200, "final 0 stop"},
		{"the engine fails after a token", []engine.Event{apitest.Text("he"),
			{Final: &engine.Final{FinishReason: engine.FinishError, Error: "out of memory"}}},
			"out of memory", 500, "final 0 error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newStageFixture(t, tc.events...)
			f.p.perToken = append(f.p.perToken, f.life) // and told of every token
			status, body := post(t, f.serve(t), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if status != 200 || !strings.Contains(body, `"content":"he"`) || !strings.Contains(body, tc.wantIn) {
				t.Fatalf("%d %s", status, body)
			}
			rec := f.recorded(t)
			if rec.Status != tc.wantStatus || !rec.Stream || rec.FirstByteMS <= 0 {
				t.Errorf("recorded %+v", rec)
			}
			got := f.life.got()
			if len(got) < 3 || got[0] != "decided local n1-0" || got[1] != "first token" ||
				got[len(got)-2] != tc.wantFinal || got[len(got)-1] != fmt.Sprintf("finished %d", tc.wantStatus) {
				t.Errorf("lifecycle %q", got)
			}
		})
	}
}

// TestServeRefused: a request the instance cannot serve is refused after placement, before the engine; its
// observers hear that it finished with the error's status.
func TestServeRefused(t *testing.T) {
	t.Parallel()
	f := newStageFixture(t)
	status, body := post(t, f.serve(t), `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	if status != 400 || !strings.Contains(body, "cannot call tools") {
		t.Fatalf("%d %s", status, body)
	}
	if rec := f.recorded(t); rec.Status != 400 || !strings.Contains(rec.Error, "cannot call tools") {
		t.Errorf("recorded %+v", rec)
	}
	if want := "decided local n1-0; finished 400"; strings.Join(f.life.got(), "; ") != want {
		t.Errorf("lifecycle %q, want %q", f.life.got(), want)
	}
	if len(f.engine.Generated()) != 0 {
		t.Error("the engine ran a refused request")
	}
}

// BenchmarkServe: one short chat request through the pipeline, over loopback, whole and streamed, with the
// recent ring and the lifecycle's bookkeeping; allocs/op include the fasthttp client's few.
func BenchmarkServe(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"whole", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"stream", `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := newStageFixture(b, apitest.Text("hi"),
				engine.Event{Final: apitest.Final(engine.FinishLength, engine.Usage{PromptTokens: 3, CompletionTokens: 1})})
			f.p.observers = f.p.observers[1:] // the recent ring only: the lifecycle's notes would grow
			url := f.serveB(b)
			client := &fasthttp.Client{}
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI(url + "/v1/chat/completions")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			req.SetBodyString(c.body)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatal(err, resp.StatusCode())
				}
			}
		})
	}
}
