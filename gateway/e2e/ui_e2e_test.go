package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/internal/testnode"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// The dashboard's tests: its files served without a key and with a policy that allows only the gateway, and
// headless Chromium (Debian's chromium, driven by npm's playwright-core from testdata/node) against real
// gateways: the user's walk through every view on a cluster of two, and the page's speed with a cluster of
// 64 nodes and 256 instances. Screenshots of each step go to $DUET_SCREENSHOTS/<test> when it is set, else
// to the test's artifact directory (kept by go test -artifacts -outputdir DIR, DIR existing).

// chromiumPath finds the browser: $DUET_CHROMIUM, else chromium on PATH. Without one the browser tests skip,
// unless DUET_REQUIRE_FIXTURES=1 (CI, which installs Debian's chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DUET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	why := "no chromium to drive the dashboard (apt-get install chromium, or set DUET_CHROMIUM)"
	if os.Getenv("DUET_REQUIRE_FIXTURES") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

func screenshotDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("DUET_SCREENSHOTS"); d != "" {
		dir := filepath.Join(d, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}

// runBrowserScript runs one of testdata's ui_*.mjs scripts with cfg as JSON on stdin. It logs the script's
// JSON lines as they come (steps, screenshots, figures) and returns them; a failed script fails the test
// with its error.
func runBrowserScript(t *testing.T, script string, cfg map[string]any) []map[string]any {
	t.Helper()
	dir := testnode.Dir(t)
	testnode.Module(t, "playwright-core")
	abs, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(cfg)
	cmd := exec.Command("node", abs)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		t.Logf("%s: %s", script, sc.Text())
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return lines
}

// requests reads GET /admin/v1/requests with q through c.
func requests(t *testing.T, c *client.Client, q client.RequestsQuery) client.Requests {
	t.Helper()
	r, err := c.Requests(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// findRecent is the record of the request with id in a, nil when there is none.
func findRecent(a client.Requests, id string) *client.RequestRecord {
	for i := range a.Requests {
		if a.Requests[i].RequestID == id {
			return &a.Requests[i]
		}
	}
	return nil
}

// TestUIAssets: the dashboard at / and its files under /ui/ need no key, carry a policy that lets the page
// reach this gateway only, and revalidate by ETag; the API behind them still needs the key.
func TestUIAssets(t *testing.T) {
	g := startGateway(t, "--api-key", "k1")
	get := func(path string, header ...string) (*http.Response, []byte) {
		return send(t, "GET", g.url+path, "", headerPairs(header...))
	}
	resp, page := get("/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("the policy allows something unsafe: %q", csp)
	}
	// Every file the page links, and every module main.js imports (transitively), is served as what it is.
	refs := regexp.MustCompile(`(?:href|src)="(/ui/[^"]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 4 {
		t.Fatalf("the page links %d files", len(refs))
	}
	seen := map[string]bool{}
	var visit func(path string)
	visit = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		resp, body := get(path)
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
			return
		}
		ct := resp.Header.Get("Content-Type")
		switch pathpkg.Ext(path) {
		case ".js":
			if !strings.HasPrefix(ct, "text/javascript") {
				t.Errorf("%s is served as %q", path, ct)
			}
			for _, m := range regexp.MustCompile(`(?m)^\s*import\b[^'"]*['"]([^'"]+)['"]`).FindAllStringSubmatch(string(body), -1) {
				visit(pathpkg.Join(pathpkg.Dir(path), m[1]))
			}
		case ".css":
			if !strings.HasPrefix(ct, "text/css") {
				t.Errorf("%s is served as %q", path, ct)
			}
		}
	}
	for _, r := range refs {
		visit(r[1])
	}
	if !seen["/ui/js/views/routes.js"] || !seen["/ui/vendor/uplot/uPlot.esm.js"] {
		t.Errorf("the modules reached from the page: %v", seen)
	}
	if resp, _ := get("/", "If-None-Match", resp.Header.Get("ETag")); resp.StatusCode != 304 {
		t.Errorf("revalidating with the ETag: %d", resp.StatusCode)
	}
	if resp, _ := get("/ui/no-such-file.js"); resp.StatusCode != 404 {
		t.Errorf("a file the dashboard does not have: %d", resp.StatusCode)
	}
	if resp, _ := get("/admin/v1/requests"); resp.StatusCode != 401 {
		t.Errorf("the recent requests without a key: %d", resp.StatusCode)
	}
	if resp, _ := get("/admin/v1/requests", "Authorization", "Bearer k1"); resp.StatusCode != 200 {
		t.Errorf("the recent requests with a key: %d", resp.StatusCode)
	}
}

// TestUIRecentRequests: GET /admin/v1/requests records every generation once it is over, streamed or not,
// failed or not, with its route and timings, and answers ?since= with the later ones only.
func TestUIRecentRequests(t *testing.T) {
	g := startGateway(t)
	post := func(id, body string) {
		req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post("plain-1", `{"model":"echo","max_tokens":4,"messages":[{"role":"user","content":"one two three"}]}`)
	post("stream-1", `{"model":"echo","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"one two three"}]}`)
	post("unknown-1", `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`)
	var all client.Requests
	waitFor(t, 5*time.Second, "three records", func() bool {
		all = requests(t, g.api, client.RequestsQuery{})
		return len(all.Requests) == 3
	})
	plain, stream, unknown := findRecent(all, "plain-1"), findRecent(all, "stream-1"), findRecent(all, "unknown-1")
	if plain == nil || stream == nil || unknown == nil {
		t.Fatalf("records: %+v", all.Requests)
	}
	for _, r := range []*client.RequestRecord{plain, stream} {
		if r.Status != 200 || r.Timings == nil || r.Timings.PrefillSource == "" || r.Usage == nil || r.Usage.CompletionTokens == 0 ||
			r.Route.DecodeNode != all.Node || r.Route.DecodeInstance == "" || r.Route.RoutingMS <= 0 {
			t.Errorf("%s: %+v (timings %+v)", r.RequestID, r, r.Timings)
		}
	}
	if !stream.Stream || plain.Stream {
		t.Errorf("stream flags: %v %v", plain.Stream, stream.Stream)
	}
	if unknown.Status != 404 || unknown.Timings != nil {
		t.Errorf("the unknown model: %+v", unknown)
	}
	later := requests(t, g.api, client.RequestsQuery{Since: all.Requests[1].Seq})
	if len(later.Requests) != 1 || later.Requests[0].RequestID != all.Requests[2].RequestID || later.Last != all.Last {
		t.Errorf("since %d: %+v", all.Requests[1].Seq, later)
	}
	later = requests(t, g.api, client.RequestsQuery{SinceTime: time.Now().Add(time.Minute)})
	if len(later.Requests) != 0 {
		t.Errorf("since a time to come: %+v", later.Requests)
	}
	// A since the client cannot send: through Call.
	if _, err := g.api.Call(t.Context(), client.APIKey, "GET", "/admin/v1/requests?since=yesterday", nil, nil); client.StatusOf(err) != 400 || client.AsError(err).Param != "since" {
		t.Errorf("a bad since: %v", err)
	}
}

const (
	uiUserKey  = "the-users-key"
	uiAdminKey = "the-admins-key"
)

// TestUIDashboard walks the dashboard in headless Chromium against two real gateways in one cluster, with an
// API key and an admin key: the page asks for the key; the cluster view shows both nodes, the path between
// them and their instances; loading a model asks for the admin key; a route made with the keyboard by
// toggling roles is checked by the gateway and listed; an invalid pair shows the API's reason and cannot be
// saved; a long chat message streams in and its timeline shows the remote prefill on node 1; Stop ends an
// answer; the requests view and the route's figures show it; the route is edited and removed; the router is
// swapped and back; dark mode. No request leaves for another host, and the page violates no CSP.
func TestUIDashboard(t *testing.T) {
	browser := chromiumPath(t)
	testnode.Module(t, "playwright-core")
	port := clusterPort(t)
	secret := writeSecret(t, "the two nodes of the dashboard share this secret")
	// The page loads a model of its own, from a directory the nodes let the API load from (--models-dir).
	models := t.TempDir()
	keys := []string{"--api-key", uiUserKey, "--admin-key", uiAdminKey, "--models-dir", models}
	// Gossip on ports of their own: other tests on this machine may hold the default one.
	gossip1, gossip2 := freeAddr(t), "127.0.0.2:"+clusterPort(t)
	n1 := startNode(t, "127.0.0.1", port, secret, "", append(keys, "--cluster-bind", gossip1)...)
	n2 := startNode(t, "127.0.0.2", port, secret, gossip1, append(keys, "--cluster-bind", gossip2)...)
	id1, id2 := n1.nodeID(t), n2.nodeID(t)
	user1, user2 := n1.as(uiUserKey), n2.as(uiUserKey)
	ready := func(c *client.Client) map[string]string {
		ins, err := c.Instances(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, in := range ins {
			if in.Status == "ready" {
				m[in.Node] = in.ID
			}
		}
		return m
	}
	waitFor(t, 30*time.Second, "both nodes to see two ready instances", func() bool {
		return len(ready(user1)) == 2 && len(ready(user2)) == 2
	})
	ins := ready(user1)
	tiny := filepath.Join(models, "tiny")
	if err := modelgen.Generate(tiny, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	state, err := user1.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	name1 := id1
	for _, n := range state.Nodes {
		if n.ID == id1 && n.Name != "" {
			name1 = n.Name
		}
	}
	shots := screenshotDir(t)
	lines := runBrowserScript(t, "ui_dashboard.mjs", map[string]any{
		"url": n1.url, "chromium": browser, "shots": shots, "apiKey": uiUserKey, "adminKey": uiAdminKey,
		"node1": id1, "node2": id2, "node1Name": name1, "prefill": ins[id1], "decode": ins[id2], "tinyModel": tiny,
		"longPrompt": longPrompt, "maxTokens": 160,
	})
	var answerID string
	for _, l := range lines {
		if l["ok"] == true {
			answerID, _ = l["answer_request_id"].(string)
		}
	}
	if answerID == "" {
		t.Fatal("the script did not finish")
	}
	t.Logf("screenshots in %s", shots)

	// What the page did, as the API sees it.
	if links, err := user2.Links(t.Context()); err != nil || len(links) != 0 {
		t.Errorf("links left after the page removed its route: %+v %v", links, err)
	}
	if got := ready(user1); len(got) != 2 {
		t.Errorf("instances after unloading the extra one: %v", got)
	}
	r1, r2 := requests(t, user1, client.RequestsQuery{}), requests(t, user2, client.RequestsQuery{})
	entry, owner := findRecent(r1, answerID), findRecent(r2, answerID)
	if entry == nil || owner == nil {
		t.Fatalf("the chat's request %s: on node 1 %+v, on node 2 %+v", answerID, entry, owner)
	}
	if entry.Status != 200 || !entry.Route.Forwarded || entry.Route.DecodeNode != id2 || entry.Timings == nil ||
		entry.Timings.PrefillSource != "remote" || entry.Timings.Remote == nil || entry.Timings.Remote.InstanceID != ins[id1] || entry.Hop ||
		entry.Route.RoutingMS <= 0 {
		t.Errorf("node 1's record of the chat: %+v (timings %+v)", entry, entry.Timings)
	}
	if !owner.Hop || owner.Status != 200 || owner.Timings == nil || owner.Timings.PrefillSource != "remote" {
		t.Errorf("node 2's record of the chat: %+v", owner)
	}
	via := requests(t, user1, client.RequestsQuery{Node: id2})
	if r := findRecent(via, answerID); via.Node != id2 || r == nil || !r.Hop {
		t.Errorf("node 2's recent requests read through node 1: %s %+v", via.Node, r)
	}
	stats, err := user1.ClusterStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Nodes) != 2 {
		t.Errorf("engine figures of %d nodes: %+v", len(stats.Nodes), stats)
	}
	for _, n := range stats.Nodes {
		if n.Error != "" || len(n.Instances) != 1 {
			t.Errorf("node %s's engine figures: %+v", n.Node, n)
		}
	}
	paths, err := user2.Paths(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(paths.Paths) != 2 || paths.Paths[0].Quality <= 0 {
		t.Errorf("paths: %+v", paths)
	}
	stopped := slices.IndexFunc(r1.Requests, func(r client.RequestRecord) bool { return r.Status == 499 })
	if stopped < 0 {
		t.Errorf("no record of the stopped answer on node 1: %+v", r1.Requests)
	}
	waitFor(t, 5*time.Second, "node 2 to have stopped the answer the page stopped", func() bool {
		st, err := user2.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return st.InFlight == 0
	})
}

// TestUIDashboardScale: with 64 nodes, 256 instances, 32 routes, 4032 paths and 512 recent requests (served
// by request interception), the page's first render and its refreshes stay fast.
func TestUIDashboardScale(t *testing.T) {
	browser := chromiumPath(t)
	testnode.Module(t, "playwright-core")
	g := startGateway(t)
	lines := runBrowserScript(t, "ui_scale.mjs", map[string]any{
		"url": g.url, "chromium": browser, "shots": screenshotDir(t), "nodes": 64, "instances": 256, "timeoutMs": 60000,
	})
	var res struct {
		OK          bool                              `json:"ok"`
		FirstRender float64                           `json:"first_render_ms"`
		FirstData   float64                           `json:"first_data_ms"`
		Refreshes   []struct{ Fetch, Render float64 } `json:"refreshes"`
		Filter      float64                           `json:"filter_ms"`
		Routes      float64                           `json:"routes_ms"`
		Editor      float64                           `json:"editor_ms"`
		Toggle      float64                           `json:"toggle_and_check_ms"`
		Requests    float64                           `json:"requests_ms"`
		LongTasks   []float64                         `json:"long_tasks_ms"`
	}
	for _, l := range lines {
		if l["ok"] == true {
			b, _ := json.Marshal(l)
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !res.OK {
		t.Fatal("the script did not finish")
	}
	var worst, sum float64
	for _, r := range res.Refreshes[1:] { // the first is the first render
		worst = max(worst, r.Render+r.Fetch)
		sum += r.Render + r.Fetch
	}
	mean := sum / float64(len(res.Refreshes)-1)
	t.Logf("64 nodes, 256 instances: first data %.0f ms and first full render %.0f ms after navigation; refresh (fetch + render) mean %.0f ms, worst %.0f ms; filter %.0f ms; routes %.0f ms, editor %.0f ms, toggle+check %.0f ms; requests view %.0f ms; longest tasks %v ms",
		res.FirstData, res.FirstRender, mean, worst, res.Filter, res.Routes, res.Editor, res.Toggle, res.Requests, res.LongTasks)
	// Bounds with room for a loaded CI machine: the page must stay usable, not win a race.
	if res.FirstRender > 5000 {
		t.Errorf("the first render took %.0f ms", res.FirstRender)
	}
	if worst > 1500 {
		t.Errorf("a refresh took %.0f ms", worst)
	}
}
