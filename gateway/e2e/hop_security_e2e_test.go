package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// The hop tests attack the gateway-to-gateway hop as a client on the network would: hop headers from a client,
// a pinned decision that names a KV server of the client's, a body that holds the body budget before its
// sender is known, an owner that freezes, and a link probe nobody reads.

// openNode runs duet on ip:port without a cluster secret, gossiping on ip:gossip and joining join (a gossip
// host:port) when set. The gossip port is the test's own: on the default one, another test's node may answer.
func openNode(t *testing.T, ip, port, gossip, join string, extra ...string) *node {
	t.Helper()
	n := &node{ip: ip, dataDir: t.TempDir()}
	n.args = []string{"--data-dir", n.dataDir, "--cluster-bind", net.JoinHostPort(ip, gossip)}
	if join != "" {
		n.args = append(n.args, "--join", join)
	}
	n.args = append(n.args, extra...)
	n.gateway = startDuetWith(t, duetOptions{listen: net.JoinHostPort(ip, port)}, n.args...)
	return n
}

// hopCall sends a request with headers to g and returns the status and the error envelope's code.
func hopCall(t *testing.T, g *gateway, method, path, body string, headers map[string]string) (int, string) {
	t.Helper()
	resp, data := send(t, method, g.url+path, body, headers)
	var out struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out.Error.Code
}

// TestHopHeadersGrantNothing: in a cluster with API and admin keys but no secret, a client with the API key
// who adds hop headers gets no admin write (the hop headers once skipped the admin check), the plain-JSON
// cluster state takes a key, and the cluster still works: state pulled with the nodes' key, a chat and an
// admin write forwarded to the node they concern with the client's own key.
func TestHopHeadersGrantNothing(t *testing.T) {
	port, gossip := clusterPort(t), clusterPort(t)
	keys := []string{"--api-key", "k1", "--admin-key", "a1", "--engine", "echo"}
	n1 := openNode(t, "127.0.0.1", port, gossip, "", append(keys, "--model", "echo")...)
	n2 := openNode(t, "127.0.0.2", port, gossip, "127.0.0.1:"+gossip, append(keys, "--model", "echo-2")...)
	api := func(g *gateway, method, path, key, body string, hop bool) (int, string) {
		t.Helper()
		h := map[string]string{}
		if key != "" {
			h["Authorization"] = "Bearer " + key
		}
		if hop {
			h[forward.HeaderHop] = "1"
			h[forward.HeaderRoute] = forward.Route{EntryNode: "x", DecodeNode: "y"}.Encode()
		}
		return hopCall(t, g, method, path, body, h)
	}
	ready := func(g *gateway) int {
		ins, err := g.as("k1").Instances(t.Context())
		if err != nil && client.StatusOf(err) == 0 {
			t.Fatal(err)
		}
		n := 0
		for _, in := range ins {
			if in.Status == "ready" {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "both nodes see both instances", func() bool { return ready(n1.gateway) == 2 && ready(n2.gateway) == 2 })

	writes := []struct{ method, path, body string }{
		{"PUT", "/admin/v1/router", `{"router":"roundrobin"}`},
		{"POST", "/v1/instance-links", `{"prefill_instances":["a"],"decode_instances":["b"]}`},
		{"DELETE", "/v1/instance-links/nope", ""},
		{"POST", "/v1/instances", `{"model":"echo-3"}`},
		{"DELETE", "/v1/instances/nope", ""},
		{"POST", "/admin/v1/cluster/keys", `{}`},
	}
	for _, w := range writes {
		for _, g := range []*gateway{n1.gateway, n2.gateway} {
			if st, code := api(g, w.method, w.path, "k1", w.body, true); st != 403 || code != "admin_key_required" {
				t.Errorf("%s %s with the API key and hop headers: %d %q, want 403 admin_key_required", w.method, w.path, st, code)
			}
			if st, _ := api(g, w.method, w.path, "", w.body, true); st != 401 {
				t.Errorf("%s %s with hop headers and no key: %d, want 401", w.method, w.path, st)
			}
		}
	}
	if router, _ := n1.as("k1").Router(t.Context()); router.Router == "roundrobin" {
		t.Errorf("the router was swapped by an API-key holder with hop headers")
	}

	if st, _ := api(n1.gateway, "GET", "/cluster/v1/state", "", "", false); st != 401 {
		t.Errorf("the cluster state without a key: %d, want 401", st)
	}
	if st, _ := api(n1.gateway, "GET", "/cluster/v1/state", "k1", "", false); st != 200 {
		t.Errorf("the cluster state with the API key: %d, want 200", st)
	}

	// The cluster works without a secret: a chat for node 1's model sent to node 2 is forwarded with the
	// client's key, and an admin write for node 1's instance sent to node 2 takes the client's admin key.
	resp := func(g *gateway, key string) *http.Response {
		req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"echo","max_tokens":2,"messages":[{"role":"user","content":"hello there"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r
	}
	if r := resp(n2.gateway, "k1"); r.StatusCode != 200 || r.Header.Get("X-Duet-Forwarded-To") != n1.nodeID(t) {
		t.Errorf("a chat forwarded without a secret: %d, forwarded to %q", r.StatusCode, r.Header.Get("X-Duet-Forwarded-To"))
	}
	var id string
	if ins, err := n2.as("k1").Instances(t.Context()); err == nil {
		for _, in := range ins {
			if in.Model == "echo" {
				id = in.ID
			}
		}
	}
	if id == "" {
		t.Fatal("node 2 does not list node 1's instance")
	}
	if st, code := api(n2.gateway, "DELETE", "/v1/instances/"+id, "k1", "", false); st != 403 || code != "admin_key_required" {
		t.Errorf("unloading another node's instance with the API key: %d %q", st, code)
	}
	if st, _ := api(n2.gateway, "DELETE", "/v1/instances/"+id, "a1", "", false); st != 200 {
		t.Errorf("unloading another node's instance with the admin key (forwarded): %d", st)
	}
}

// TestForgedHopHoldsNoBudget: a slow body of the largest size with forged hop headers once held the whole
// body budget until the read timed out (the budget was taken before the hop's proof was checked), and an
// authorised 20 KB chat got 429. The proof is checked before the body now: the forged hop is refused at once,
// and the chat is served.
func TestForgedHopHoldsNoBudget(t *testing.T) {
	secret := writeSecret(t, "the secret of a cluster of one, long enough")
	g := startGateway(t, "--cluster-secret-file", secret, "--api-key", "k1", "--queue-timeout", "10s")
	host := strings.TrimPrefix(g.url, "http://")
	route := forward.Route{DecodeInstance: "x"}.Encode()
	forged := map[string]string{
		"no proof":     "",
		"v1 proof":     "v1 " + fmt.Sprint(time.Now().UnixMilli()) + " " + strings.Repeat("A", 43),
		"forged proof": "v2 " + fmt.Sprint(time.Now().UnixMilli()) + " " + strings.Repeat("A", 43) + " " + strings.Repeat("B", 43),
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for name, proof := range forged {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n%s: 1\r\n%s: %s\r\n", 16<<20, forward.HeaderHop, forward.HeaderRoute, route)
		if proof != "" {
			head += forward.HeaderAuth + ": " + proof + "\r\n"
		}
		// The headers and the body's first 16 KiB (the server reads 8 before its handlers run), then nothing: a
		// slow sender.
		if _, err := io.WriteString(c, head+"\r\n"+`{"model":"echo","messages":[{"role":"user","content":"`+strings.Repeat("a", 16<<10)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("%s: no answer before the body: %v", name, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s: %d, want 401 before the body", name, resp.StatusCode)
		}
	}
	body := fmt.Sprintf(`{"model":"echo","max_tokens":2,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("lorem ipsum ", 20<<10/12))
	if st, code := hopCall(t, g, "POST", "/v1/chat/completions", body, map[string]string{"Authorization": "Bearer k1"}); st != 200 {
		t.Errorf("an authorised 20 KB chat beside forged hops: %d %q, want 200", st, code)
	}
}

// TestFrozenOwner: a request forwarded to a node that freezes (SIGSTOP, as a laptop that sleeps) fails over to
// the router's next candidate before the first byte, and ends with an error that says so after it, within
// --hop-idle-timeout; a live owner that is slow (a long prefill, a slow stream, a long non-streamed
// generation) is never cut, since it sends a keep-alive while it works.
func TestFrozenOwner(t *testing.T) {
	port, gossip := clusterPort(t), clusterPort(t)
	secret := writeSecret(t, "three nodes, one of them sleepy, share this")
	// LAN timings: gossip takes seconds to suspect a frozen node, so the entry still routes to it, as in life.
	lan := func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, "DUET_CLUSTER_TIMINGS=lan") }
	start := func(ip, join string, extra ...string) *node {
		n := &node{ip: ip, dataDir: t.TempDir()}
		n.args = append([]string{"--data-dir", n.dataDir, "--cluster-secret-file", secret, "--engine", "echo",
			"--cluster-bind", net.JoinHostPort(ip, gossip)}, extra...)
		if join != "" {
			n.args = append(n.args, "--join", join+":"+gossip)
		}
		n.gateway = startDuetWith(t, duetOptions{listen: net.JoinHostPort(ip, port), setup: lan}, n.args...)
		return n
	}
	n1 := start("127.0.0.1", "", "--model", "other", "--router", "roundrobin", "--hop-idle-timeout", "2s")
	// Node 2 is slow: 500 ms per prompt token (a prompt of 9 tokens waits twice the idle timeout for its first
	// token), then one token every 200 ms.
	n2 := start("127.0.0.2", "127.0.0.1", "--model", "echo", "--engine-opt", "prefill_delay=500ms,token_delay=200ms")
	n3 := start("127.0.0.3", "127.0.0.1", "--model", "echo")
	var frozen atomic.Bool
	t.Cleanup(func() {
		if frozen.Load() {
			n2.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	waitFor(t, 30*time.Second, "node 1 sees both instances of echo", func() bool {
		ready := n1.readyOn(t)
		_, ok2 := ready[n2.nodeID(t)]
		_, ok3 := ready[n3.nodeID(t)]
		return ok2 && ok3
	})
	client := &http.Client{Timeout: 90 * time.Second}
	ask := func(stream bool, maxTokens int) (*http.Response, error) {
		// Temperature 0: the echo engine answers with the prompt's words in order (above 0 it picks them at
		// random, and "tick tock" need not appear in five of them).
		body := fmt.Sprintf(`{"model":"echo","stream":%v,"max_tokens":%d,"temperature":0,"messages":[{"role":"user","content":%q}]}`,
			stream, maxTokens, strings.Repeat("tick tock ", 4))
		return client.Post(n1.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	}
	// onNode2 sends requests until the round-robin router gives one to node 2, and returns its response.
	onNode2 := func(stream bool, maxTokens int) *http.Response {
		t.Helper()
		for range 4 {
			resp, err := ask(stream, maxTokens)
			if err != nil {
				t.Fatalf("a request through node 1: %v", err)
			}
			if resp.Header.Get("X-Duet-Forwarded-To") == n2.nodeID(t) {
				return resp
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		t.Fatal("the round-robin router never chose node 2")
		return nil
	}

	// A slow but live owner: the whole answer, non-streamed and streamed, though each waits twice the idle
	// timeout for its first token.
	resp := onNode2(false, 5)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), "tick tock") {
		t.Fatalf("a long non-streamed generation over a hop: %d %s", resp.StatusCode, data)
	}
	resp = onNode2(true, 5)
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), "[DONE]") || strings.Contains(string(data), `"error"`) {
		t.Fatalf("a stream with a long prefill over a hop: %d %s", resp.StatusCode, data)
	}

	// Frozen before the first byte: the request fails over to node 3, whichever node the router picks first
	// (gossip has not found the freeze out yet).
	n2.cmd.Process.Signal(syscall.SIGSTOP)
	frozen.Store(true)
	for i := range 2 {
		resp, err := ask(false, 3)
		if err != nil {
			t.Fatalf("request %d while node 2 is frozen: %v", i, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Duet-Forwarded-To") != n3.nodeID(t) {
			t.Errorf("request %d while node 2 is frozen: %d from %q: %s", i, resp.StatusCode, resp.Header.Get("X-Duet-Forwarded-To"), data)
		}
	}
	if !strings.Contains(n1.stderr.String(), "sent nothing within the hop idle timeout") {
		t.Logf("no request met the frozen node before gossip found it out (node 1's log has no idle hop)")
	}
	n2.cmd.Process.Signal(syscall.SIGCONT)
	frozen.Store(false)
	waitFor(t, 30*time.Second, "node 2 alive again", func() bool {
		st, _ := hopCall(t, n2.gateway, "GET", "/healthz", "", nil)
		_, ok := n1.readyOn(t)[n2.nodeID(t)]
		return st == 200 && ok
	})

	// Frozen mid-stream: the client hears why, instead of a silent stream.
	resp = onNode2(true, 200)
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its first token: %v", err)
		}
		if strings.HasPrefix(line, "data: {") {
			break
		}
	}
	n2.cmd.Process.Signal(syscall.SIGSTOP)
	frozen.Store(true)
	rest, err := io.ReadAll(rd)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(rest), "sent nothing") {
		t.Errorf("a stream whose owner froze: %v, the rest %q; want an error event saying the node sent nothing", err, cutString(string(rest), 400))
	}

	n2.cmd.Process.Signal(syscall.SIGCONT)
	frozen.Store(false)
}

func cutString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// TestLinkProbeNotHeld: a client with the API key that asks for the link probe and never reads it holds the
// node's one probe slot only for the probe's own write deadline, not for the server's write timeout.
func TestLinkProbeNotHeld(t *testing.T) {
	g := startGateway(t, "--api-key", "k1", "--write-timeout", "10m")
	host := strings.TrimPrefix(g.url, "http://")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	stuck, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := io.WriteString(stuck, "GET /admin/v1/link-probe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The stuck probe is served first; then a reader's probe gets the slot once the stuck one's deadline passed.
	waitFor(t, 10*time.Second, "the stuck probe being served", func() bool {
		st, _ := hopCall(t, g, "GET", "/admin/v1/link-probe/ping", "", map[string]string{"Authorization": "Bearer k1"})
		return st == 200
	})
	got := 0
	waitFor(t, 60*time.Second, "a probe for a client that reads", func() bool {
		n, err := g.as("k1").LinkProbe(t.Context())
		if err != nil {
			got = client.StatusOf(err)
			return false
		}
		got = 200
		return n > 0
	})
	if got != 200 {
		t.Errorf("the probe: %d", got)
	}
}

// poisoner is a KV server of a client's on 127.0.0.66: it answers every request with KV of the right shape
// but wrong (another prompt's, the request's tokens reversed, fetched from a real KV server, with keys and
// values swapped), so that a decode engine that takes it answers something else, and its prefix cache keeps
// the poison.
type poisoner struct {
	addr     string
	upstream string
	mu       sync.Mutex
	asked    int
}

func startPoisoner(t *testing.T, upstream string) *poisoner {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.66:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &poisoner{addr: l.Addr().String(), upstream: upstream}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c)
			}()
		}
	}()
	return p
}

func (p *poisoner) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	body, err := kvwire.NewFrameReader(bufio.NewReader(c), 64<<20).Next()
	if err != nil {
		return
	}
	req, err := kvwire.DecodeRequest(body)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.asked++
	p.mu.Unlock()
	other := req
	other.TokenIDs = slices.Clone(req.TokenIDs)
	slices.Reverse(other.TokenIDs[req.StartPos:])
	other.Auth = nil
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := kvwiretest.PlainFetch(ctx, p.upstream, other)
	if err != nil && len(resp.Messages) == 0 {
		return
	}
	resp.Header.RequestID = req.RequestID
	for _, m := range resp.Messages {
		if ch, ok := m.(*kvwire.KVChunk); ok {
			ch.Keys, ch.Values = ch.Values, ch.Keys // and garbled, so that the poison shows even in a tiny model's answer
		}
	}
	w := bufio.NewWriter(c)
	if kvwiretest.WriteResponse(w, resp) == nil {
		w.Flush()
	}
}

func (p *poisoner) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// TestPinnedAddressIgnored: without a secret, a client's hop that pins a prefill "instance" at an address of
// its own once made the decode engine fetch KV from there and answer from it, and the prefix cache then served
// the poison to every later request with that prompt. The owner resolves a pinned prefill instance from its
// own state now and drops one it does not know: the hop's answer and the later ones are the clean answer, and
// the client's server is never asked.
func TestPinnedAddressIgnored(t *testing.T) {
	kvAddr := freeAddr(t)
	clean := startDuet(t, "--engine-opt", "kv_listen="+kvAddr)
	decode := startDuet(t, "--engine-opt", "remote_prefill_threshold=32")
	evil := startPoisoner(t, kvAddr)
	prompt := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 12)
	body := fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,"messages":[{"role":"user","content":%q}]}`, prompt)
	want, _ := chatText(t, clean, body, nil)

	ins := decode.instances(t)
	if len(ins) != 1 {
		t.Fatalf("the decode node has %d instances, want 1", len(ins))
	}
	route := forward.Route{EntryNode: "attacker", DecodeNode: ins[0].Node, DecodeInstance: ins[0].ID,
		Prefill: []forward.Endpoint{{InstanceID: "evil", Node: "evil", Address: evil.addr}}, Reason: "trust me"}
	got, timings := chatText(t, decode, body, map[string]string{forward.HeaderHop: "1", forward.HeaderRoute: route.Encode()})
	t.Logf("the hop's answer %q, timings %v", got, timings)
	if got != want || timings["prefill_source"] == "remote" {
		t.Errorf("the answer to a hop that pins the client's KV server:\n got %q\nwant %q (timings %v)", got, want, timings)
	}
	for i := range 2 {
		if later, timings := chatText(t, decode, body, nil); later != want {
			t.Errorf("later answer %d to the same prompt:\n got %q\nwant %q (timings %v)", i, later, want, timings)
		}
	}
	if n := evil.requests(); n != 0 {
		t.Errorf("the client's KV server was asked %d times", n)
	}
}
