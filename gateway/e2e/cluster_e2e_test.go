package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// The cluster tests run several duet processes on 127.0.0.1, .2 and .3 (the whole 127.0.0.0/8 is loopback on
// Linux), one API port for all, each gossiping on its API host's port 7946, as a user would run one duet per
// machine.

// clusterPort picks a port that is free on 127.0.0.1, .2 and .3.
func clusterPort(t testing.TB) string {
	t.Helper()
	for range 20 {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		ok := true
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on 127.0.0.1-3")
	return ""
}

// node is one duet of a test cluster.
type node struct {
	*gateway
	ip, dataDir string
	args        []string
}

// startNode runs duet on ip:port with the cluster's secret, joining join (a gossip host) when set.
func startNode(t *testing.T, ip, port, secret, join string, extra ...string) *node {
	t.Helper()
	n := &node{ip: ip, dataDir: t.TempDir()}
	n.args = []string{"--data-dir", n.dataDir, "--cluster-secret-file", secret}
	if !slices.Contains(extra, "--engine") {
		n.args = append(n.args, "--engine-opt", "remote_prefill_threshold=64,kv_frame_timeout=20s")
	}
	if join != "" {
		n.args = append(n.args, "--join", join)
	}
	n.args = append(n.args, extra...)
	n.gateway = startDuetWith(t, duetOptions{listen: net.JoinHostPort(ip, port), setup: routerEnv}, n.args...)
	return n
}

// routerEnv sends prompts of 64 uncached tokens or more to remote prefill (1000 by default, as exo), so that
// the test's prompts stay small.
func routerEnv(cmd *exec.Cmd) {
	cmd.Env = append(cmd.Env, "DUET_DISAGG_PREFILL_THRESHOLD=64")
}

func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// instances lists the instances g sees (GET /v1/instances, no key).
func (g *gateway) instances(t *testing.T) []client.Instance {
	t.Helper()
	ins, err := g.api.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

// links lists the instance links g sees (GET /v1/instance-links, no key).
func (g *gateway) links(t *testing.T) []client.Link {
	t.Helper()
	ls, err := g.api.Links(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// readyOn returns the ready instances g sees, by node id.
func (g *gateway) readyOn(t *testing.T) map[string]client.Instance {
	t.Helper()
	out := map[string]client.Instance{}
	for _, in := range g.instances(t) {
		if in.Status == "ready" {
			out[in.Node] = in
		}
	}
	return out
}

// nodeID is the id the node created for itself.
func (n *node) nodeID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dataDir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

type chatAnswer struct {
	Status  int
	Content string
	Timings client.Timings `json:"timings"`
}

// chat sends a greedy chat completion and returns its answer.
func (g *gateway) chat(t *testing.T, prompt string, maxTokens int) chatAnswer {
	t.Helper()
	body := map[string]any{"model": "embedded", "temperature": 0, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt}}}
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		chatAnswer
	}
	// The OpenAI endpoint through the client's Call: the OpenAI clients do not read duet's timings.
	st, err := g.api.Call(t.Context(), client.APIKey, "POST", "/v1/chat/completions", body, &out)
	out.Status = st
	if out.Status != 200 {
		t.Fatalf("chat: status %d: %v", out.Status, err)
	}
	a := out.chatAnswer
	a.Status = out.Status
	if len(out.Choices) == 1 {
		a.Content = out.Choices[0].Message.Content
	}
	if a.Timings.Route == nil {
		t.Fatalf("chat: the answer's timings say nothing of its route: %+v", a.Timings)
	}
	return a
}

var longPrompt = strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 20)

// TestClusterDisaggregated is the walkthrough of docs/cluster.md on one machine: three gateways, one secret,
// joined through the first, each with an instance of the embedded model. Node 1's instance is linked as
// prefill for node 2's through node 3's API; a long prompt sent to node 3 is decoded on node 2 and prefilled
// on node 1, and its greedy output is a single node's.
func TestClusterDisaggregated(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the three nodes of the lighthouse share this secret")
	n1 := startNode(t, "127.0.0.1", port, secret, "")
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1")
	n3 := startNode(t, "127.0.0.3", port, secret, "127.0.0.1")
	id1, id2, id3 := n1.nodeID(t), n2.nodeID(t), n3.nodeID(t)
	waitFor(t, 20*time.Second, "every node to see three ready instances", func() bool {
		return len(n1.readyOn(t)) == 3 && len(n2.readyOn(t)) == 3 && len(n3.readyOn(t)) == 3
	})
	ready := n3.readyOn(t)
	p, d := ready[id1], ready[id2]
	if p.KVEndpoint == "" {
		t.Fatalf("node 1's instance serves no KV: %+v", p)
	}

	// A single node's answer, for comparison: a gateway of its own, in no cluster.
	solo := startDuet(t)
	want := solo.chat(t, longPrompt, 24)

	link, err := n3.api.CreateLink(t.Context(), []string{p.ID}, []string{d.ID})
	if err != nil || link.LinkID == "" || !link.Exact {
		t.Fatalf("creating the link: %v %+v", err, link)
	}
	for _, g := range []*node{n1, n2, n3} {
		waitFor(t, 10*time.Second, "the link everywhere", func() bool {
			links := g.links(t)
			return len(links) == 1 && links[0].LinkID == link.LinkID
		})
	}

	got := n3.chat(t, longPrompt, 24)
	r := got.Timings.Route
	t.Logf("route %+v, remote %+v", r, got.Timings.Remote)
	if r.EntryNode != id3 || r.DecodeNode != id2 || r.DecodeInstance != d.ID || !r.Forwarded {
		t.Errorf("decoded on %s (%s) from entry %s, forwarded %v; want node 2's %s from node 3", r.DecodeNode, r.DecodeInstance, r.EntryNode, r.Forwarded, d.ID)
	}
	if !strings.Contains(r.Reason, "prefill on") {
		t.Errorf("the owner's timings.route.reason %q does not carry node 3's decision through the hop", r.Reason)
	}
	if got.Timings.PrefillSource != "remote" || got.Timings.Remote == nil || got.Timings.Remote.InstanceID != p.ID || !got.Timings.Remote.Exact {
		t.Errorf("prefill %q %+v; want remote on node 1's %s, exact", got.Timings.PrefillSource, got.Timings.Remote, p.ID)
	}
	if r.PrefillAddress == "" || strings.HasPrefix(r.PrefillAddress, "0.0.0.0") {
		t.Errorf("prefill address %q", r.PrefillAddress)
	}
	if got.Content != want.Content {
		t.Errorf("the disaggregated answer differs from a single node's:\n got %q\nwant %q", got.Content, want.Content)
	}

	// Streamed through the hop, chunk by chunk, with the official client: the same text.
	c := n3.client()
	params := chatParams("embedded", longPrompt)
	params.MaxTokens = openai.Int(24)
	params.Temperature = openai.Float(0)
	stream := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithHeader("X-Request-Id", "stream-through-n3"))
	var b strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || b.String() != want.Content {
		t.Errorf("streamed through the hop: %q (%v), want %q", b.String(), err, want.Content)
	}

	// A client that leaves a stream through the hop cancels it on the owner.
	sctx, cancel := context.WithCancel(context.Background())
	params.MaxTokens = openai.Int(2000)
	stream = c.Chat.Completions.NewStreaming(sctx, params)
	for range 2 { // the role chunk and a token: the owner is generating
		if !stream.Next() {
			t.Fatalf("stream: %v", stream.Err())
		}
	}
	if n2.status(t).InFlight != 1 {
		t.Fatalf("the stream is not decoded on node 2")
	}
	cancel()
	stream.Close()
	left := time.Now()
	waitFor(t, 5*time.Second, "node 2 to stop the generation", func() bool { return n2.status(t).InFlight == 0 })
	t.Logf("node 2 stopped %v after the client left node 3", time.Since(left).Round(time.Millisecond))

	// A short prompt on node 2 is prefilled there.
	short := n2.chat(t, "Hello there", 8)
	if short.Timings.Route.DecodeNode != id2 || short.Timings.PrefillSource == "remote" || short.Timings.Remote != nil {
		t.Errorf("a short prompt: %+v", short.Timings)
	}
}

// linkPD links node p's instance as prefill for node d's, through g, and waits until every node sees it.
func linkPD(t *testing.T, g *node, prefillID, decodeID string, all ...*node) string {
	t.Helper()
	link, err := g.api.CreateLink(t.Context(), []string{prefillID}, []string{decodeID})
	if err != nil {
		t.Fatalf("creating the link: %v", err)
	}
	for _, n := range all {
		waitFor(t, 10*time.Second, "the link everywhere", func() bool {
			links := n.links(t)
			return len(links) == 1 && links[0].LinkID == link.LinkID
		})
	}
	return link.LinkID
}

// statusOf is the status g sees for an instance ("" when it does not know it).
func (g *gateway) statusOf(t *testing.T, id string) string {
	t.Helper()
	for _, in := range g.instances(t) {
		if in.ID == id {
			return in.Status
		}
	}
	return ""
}

// killTree SIGKILLs a gateway and its plugins, as a machine that loses power.
func killTree(t *testing.T, g *gateway) {
	t.Helper()
	pids := []int{g.cmd.Process.Pid}
	for _, p := range g.status(t).Plugins {
		if p.PID != 0 {
			pids = append(pids, p.PID)
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-g.exited
}

// TestClusterFailures kills the prefill node mid-transfer and the decode node mid-stream. A request whose
// prefill node dies completes with a local prefill and says why; the dead node's instance is unavailable
// everywhere within the failure-detection time and no longer offered. A stream whose decode node dies ends
// with an error at the gateway the client called, and new requests go to another instance. A node restarted
// on its data directory rejoins with its instance and serves again.
func TestClusterFailures(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "a secret for the failing cluster of three")
	// Node 1 prefills in small chunks, so that its transfer lasts long enough to be cut.
	n1 := startNode(t, "127.0.0.1", port, secret, "", "--engine-opt", "prefill_chunk=16")
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1")
	n3 := startNode(t, "127.0.0.3", port, secret, "127.0.0.1")
	id1, id2, id3 := n1.nodeID(t), n2.nodeID(t), n3.nodeID(t)
	waitFor(t, 20*time.Second, "three ready instances", func() bool { return len(n3.readyOn(t)) == 3 && len(n2.readyOn(t)) == 3 })
	ready := n3.readyOn(t)
	p, d := ready[id1], ready[id2]
	// Node 3 takes the requests and decodes none of them: it unloads its instance.
	if err := n1.api.DeleteInstance(t.Context(), ready[id3].ID); err != nil {
		t.Fatalf("unloading node 3's instance through node 1: %v", err)
	}
	waitFor(t, 10*time.Second, "node 3's instance gone", func() bool { return n3.statusOf(t, ready[id3].ID) == "" })
	linkPD(t, n3, p.ID, d.ID, n1, n2, n3)

	// About 2200 tokens: node 1's prefill of them takes several times the pause below on an idle machine (840
	// tokens took 260 ms, less than the pause, and the transfer was over before the kill). Killed before it
	// starts, node 1 fails the fetch all the same.
	long := strings.Repeat(longPrompt, 8)
	answer := make(chan chatAnswer, 1)
	go func() { answer <- n3.chat(t, long, 8) }()
	waitFor(t, 20*time.Second, "node 2 to take the request", func() bool { return n2.status(t).InFlight == 1 })
	time.Sleep(100 * time.Millisecond) // node 1 is prefilling in small chunks and streaming them to node 2
	killed := time.Now()
	killTree(t, n1.gateway)
	for _, g := range []*node{n2, n3} {
		waitFor(t, 10*time.Second, "node 1's instance unavailable", func() bool { return g.statusOf(t, p.ID) == "unavailable" })
	}
	t.Logf("node 1's instance unavailable on every node %v after the kill", time.Since(killed).Round(time.Millisecond))
	a := <-answer
	if a.Timings.Route.DecodeNode != id2 || a.Timings.PrefillSource != "local" || a.Timings.Remote == nil || a.Timings.Remote.FallbackReason == "" {
		t.Errorf("the request whose prefill node died: %+v", a.Timings)
	} else {
		t.Logf("completed %v after the kill, prefilled locally because: %s", time.Since(killed).Round(time.Millisecond), a.Timings.Remote.FallbackReason)
	}
	// The next long prompt (another one: node 2's prefix cache holds the last) is not offered the dead node.
	next := n3.chat(t, strings.Repeat("Gulls circled over the harbour as the boats came in. ", 25), 8)
	if next.Timings.Route.DecodeNode != id2 || next.Timings.PrefillSource != "local" || next.Timings.Route.PrefillInstance != "" {
		t.Errorf("the next request still offers the dead prefill node: %+v", next.Timings)
	}

	// Node 1 comes back on its data directory, and node 3 gets an instance to fall back on.
	restartNode(t, n1, port)
	waitFor(t, 20*time.Second, "node 1's instance ready again", func() bool { return n3.statusOf(t, p.ID) == "ready" })
	var spare client.Instance
	if st, err := n3.api.Call(t.Context(), client.AdminKey, "POST", "/v1/instances", client.NewInstance{Model: "embedded"}, &spare); st != 201 {
		t.Fatalf("loading an instance on node 3: %d %v", st, err)
	}

	// A long prompt streams from node 2 (its prefill partner is back) through node 3; node 2 dies.
	c := n3.client()
	params := chatParams("embedded", long)
	params.MaxTokens = openai.Int(400)
	params.Temperature = openai.Float(0)
	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	for i := 0; i < 3; i++ {
		if !stream.Next() {
			t.Fatalf("the stream ended early: %v", stream.Err())
		}
	}
	if n2.status(t).InFlight != 1 {
		t.Fatalf("the stream is not decoded on node 2")
	}
	killed = time.Now()
	killTree(t, n2.gateway)
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Errorf("the stream through a dead decode node ended without an error")
	} else {
		t.Logf("the stream ended %v after node 2 died: %v", time.Since(killed).Round(time.Millisecond), stream.Err())
	}
	waitFor(t, 10*time.Second, "node 2's instance unavailable", func() bool { return n3.statusOf(t, d.ID) == "unavailable" })
	t.Logf("node 2's instance unavailable %v after the kill", time.Since(killed).Round(time.Millisecond))
	if a := n3.chat(t, long, 8); a.Timings.Route.DecodeInstance != spare.ID {
		t.Errorf("with node 2 gone, decoded on %q, want node 3's %s", a.Timings.Route.DecodeInstance, spare.ID)
	}

	// Node 2 comes back and decodes long prompts again.
	restartNode(t, n2, port)
	waitFor(t, 20*time.Second, "node 2's instance ready again", func() bool { return n3.statusOf(t, d.ID) == "ready" })
	if a := n3.chat(t, long, 8); a.Timings.Route.DecodeNode != id2 || a.Timings.PrefillSource != "remote" {
		t.Errorf("after node 2 came back: %+v", a.Timings)
	}
}

// restartNode starts a node again on its data directory (same id, same instances).
func restartNode(t *testing.T, n *node, port string) *node {
	t.Helper()
	m := &node{ip: n.ip, dataDir: n.dataDir, args: n.args}
	m.gateway = startDuetWith(t, duetOptions{listen: net.JoinHostPort(n.ip, port), setup: routerEnv}, n.args...)
	return m
}

// TestClusterRouterSwap swaps the router while 32 streams run through a gateway: none of them fails, and new
// requests use the new router.
func TestClusterRouterSwap(t *testing.T) {
	g := startGateway(t, "--engine-opt", "token_delay=20ms")
	c := g.client()
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			p := chatParams("echo", strings.Repeat(fmt.Sprintf("w%d ", i), 60))
			p.MaxTokens = openai.Int(60)
			stream := c.Chat.Completions.NewStreaming(context.Background(), p)
			n := 0
			for stream.Next() {
				n++
			}
			if err := stream.Err(); err != nil {
				errs <- err
				return
			}
			if n < 60 {
				errs <- fmt.Errorf("stream %d: %d chunks", i, n)
				return
			}
			errs <- nil
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if now, err := g.api.SetRouter(t.Context(), "roundrobin", ""); err != nil || now != "roundrobin" {
		t.Fatalf("swap: %v %q", err, now)
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if _, err := c.Chat.Completions.New(context.Background(), chatParams("echo", "after the swap")); err != nil {
		t.Fatal(err)
	}
	if out := g.router(t); out.Router != "roundrobin" {
		t.Errorf("router %q after the swap", out.Router)
	}
	// A router that cannot start leaves the one in use.
	if _, err := g.api.SetRouter(t.Context(), "/nonexistent/router", ""); client.StatusOf(err) != 400 || !strings.Contains(client.AsError(err).Message, "not") {
		t.Errorf("a router that does not exist: %v", err)
	}
	if out := g.router(t); out.Router != "roundrobin" {
		t.Errorf("router %q after a failed swap", out.Router)
	}
}

// TestClusterAPIErrors: the cluster API's refusals, each with the status and reason a client can act on.
func TestClusterAPIErrors(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the secret of the cluster whose API says no")
	// Node 1 lets the API load models from a directory of its operator's choice (--models-dir).
	models := t.TempDir()
	n1 := startNode(t, "127.0.0.1", port, secret, "", "--models-dir", models)
	// Node 2 runs the echo engine: its instance has no KV server and no KV layout.
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1", "--engine", "echo", "--model", "echo")
	id1, id2 := n1.nodeID(t), n2.nodeID(t)
	waitFor(t, 20*time.Second, "two ready instances", func() bool { return len(n1.readyOn(t)) == 2 && len(n2.readyOn(t)) == 2 })
	e1, e2 := n1.readyOn(t)[id1], n1.readyOn(t)[id2]

	// A second model on node 1 with another shape, loaded through node 2's API (carried to node 1).
	other := filepath.Join(models, "tiny")
	if err := modelgen.Generate(other, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	var created client.Instance
	if st, err := n2.api.Call(t.Context(), client.AdminKey, "POST", "/v1/instances", client.NewInstance{Model: other, Node: id1}, &created); st != 201 || created.Node != id1 || created.Status != "ready" {
		t.Fatalf("loading a model on node 1 through node 2: %d %+v %v", st, created, err)
	}
	waitFor(t, 10*time.Second, "the new instance on node 2", func() bool { return n2.statusOf(t, created.ID) == "ready" })

	type errBody struct {
		Error struct {
			Message string `json:"message"`
			Param   string `json:"param"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	links := []struct {
		name            string
		prefill, decode []string
		want            string
	}{
		{"unknown instance", []string{"ghost"}, []string{e1.ID}, "unknown instance"},
		{"both sides", []string{e1.ID}, []string{e1.ID}, "both sides"},
		{"empty prefill side", nil, []string{e1.ID}, "prefill_instances must name"},
		{"empty decode side", []string{e1.ID}, []string{}, "decode_instances must name"},
		{"prefill without a KV server", []string{e2.ID}, []string{e1.ID}, "serves no KV"},
		{"KV that cannot be shared", []string{e1.ID}, []string{created.ID}, "cannot share KV"},
	}
	for _, c := range links {
		_, err := n2.api.CreateLink(t.Context(), c.prefill, c.decode)
		if e := client.AsError(err); e == nil || e.Status != 400 || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %v, want 400 saying %q", c.name, err, c.want)
		}
	}

	body := `{"model":"embedded","messages":[{"role":"user","content":"hi"}]}`
	post := func(headers map[string]string) (int, errBody) {
		resp, data := send(t, "POST", n1.url+"/v1/chat/completions", body, headers)
		var out errBody
		json.Unmarshal(data, &out)
		return resp.StatusCode, out
	}
	route := "eyJkZWNvZGVfaW5zdGFuY2UiOiJ4In0" // {"decode_instance":"x"}
	if st, out := post(map[string]string{"X-Duet-Hop": "2", "X-Duet-Route": route}); st != 508 || out.Error.Code != "loop_detected" {
		t.Errorf("a request forwarded twice: %d %+v", st, out.Error)
	}
	if st, out := post(map[string]string{"X-Duet-Hop": "1", "X-Duet-Route": route}); st != 401 {
		t.Errorf("a hop without the cluster credential: %d %+v", st, out.Error)
	}
	if st, out := post(map[string]string{"X-Duet-Hop": "1", "X-Duet-Route": route, "X-Duet-Hop-Auth": "v1 1 AAAA"}); st != 401 {
		t.Errorf("a hop with a forged credential: %d %+v", st, out.Error)
	}
	if _, err := n1.api.Call(t.Context(), client.APIKey, "POST", "/v1/chat/completions", map[string]any{"model": "no-such-model",
		"messages": []map[string]string{{"role": "user", "content": "hi"}}}, nil); client.StatusOf(err) != 404 || client.AsError(err).Code != "model_not_found" {
		t.Errorf("a model no node serves: %v", err)
	}
	if err := n1.api.DeleteInstance(t.Context(), created.ID); err != nil {
		t.Errorf("unloading an instance: %v", err)
	}
	waitFor(t, 10*time.Second, "the unloaded instance gone everywhere", func() bool { return n2.statusOf(t, created.ID) == "" })

	// A node that stops leaves: its peers drop its instances at once, instead of marking them unavailable.
	echoID := e2.ID
	n2.cmd.Process.Signal(syscall.SIGTERM)
	<-n2.exited
	waitFor(t, 5*time.Second, "node 2's instance gone from node 1", func() bool { return n1.statusOf(t, echoID) == "" })

	// A node with another secret cannot join: neither side ever sees the other.
	wrong := writeSecret(t, "not the secret the others share, at all")
	n3 := startNode(t, "127.0.0.3", port, wrong, "127.0.0.1")
	time.Sleep(3 * time.Second)
	st := n1.state(t)
	for _, n := range st.Nodes {
		if n.ID == n3.nodeID(t) {
			t.Errorf("a node with the wrong secret joined: %+v", st.Nodes)
		}
	}
	if len(n3.readyOn(t)) != 1 {
		t.Errorf("the node with the wrong secret sees %d ready instances, want only its own", len(n3.readyOn(t)))
	}
}
