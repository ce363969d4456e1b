package serfcluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/internal/netnstest"
)

// The partition test runs three gateways, each in its own network namespace, joined by veth pairs to a
// bridge in a fourth namespace (package netnstest builds them): 10.213.0.1-3/24. Nothing touches the host's
// own network namespace. Each gateway is this test binary re-executed under `ip netns exec` as a helper
// process (TestNetnsHelper), driven by JSON lines on its stdin and answering on its stdout.

const (
	netnsHelperEnv  = "SERFCLUSTER_NETNS_HELPER"
	netnsRequireEnv = "SERFCLUSTER_REQUIRE_NETNS"
	netnsSubnet     = "10.213.0"
	helperReplyTag  = "DSC-REPLY "
	gossipPort      = "7946"
	apiPort         = "8080"
)

// helperCmd is one command to a helper process.
type helperCmd struct {
	Op       string        `json:"op"` // put-instance, put-link, snapshot, quit
	Instance *Instance     `json:"instance,omitempty"`
	Link     *InstanceLink `json:"link,omitempty"`
	Paths    []NodeID      `json:"paths,omitempty"`
}

// helperReply is a helper's answer: an error, or a snapshot with the paths asked for.
type helperReply struct {
	Err      string          `json:"err,omitempty"`
	Snapshot *Snapshot       `json:"snapshot,omitempty"`
	Paths    map[NodeID]Path `json:"paths,omitempty"`
}

// TestNetnsHelper is not a test: it is the gateway process of TestNetnsPartition, run inside a namespace.
func TestNetnsHelper(t *testing.T) {
	if os.Getenv(netnsHelperEnv) != "1" {
		t.Skip("helper process for TestNetnsPartition")
	}
	os.Exit(runNetnsHelper())
}

func runNetnsHelper() int {
	ip := os.Getenv("SERFCLUSTER_HELPER_IP")
	cfg := DefaultConfig()
	cfg.NodeID = NodeID(os.Getenv("SERFCLUSTER_HELPER_ID"))
	cfg.BindAddr = ip + ":" + gossipPort
	cfg.APIAddr = ip + ":" + apiPort
	cfg.Timings = LocalTimings()
	cfg.Timings.ProbeInterval = 200 * time.Millisecond
	cfg.Timings.ProbeTimeout = 150 * time.Millisecond
	cfg.AntiEntropyInterval = 500 * time.Millisecond
	cfg.LoadInterval = 100 * time.Millisecond
	cfg.Logger = testLogger()
	if j := os.Getenv("SERFCLUSTER_HELPER_JOIN"); j != "" {
		cfg.JoinAddrs = []string{j}
	}
	// Addresses are detected for real: inside the namespace that is eth0 (a veth) and lo.
	c, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer c.Shutdown()
	go func() {
		srvErr := serveState(cfg.APIAddr, c)
		fmt.Fprintln(os.Stderr, "helper: state server:", srvErr)
	}()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var cmd helperCmd
		var rep helperReply
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			rep.Err = err.Error()
		} else {
			switch cmd.Op {
			case "put-instance":
				err = c.PutInstance(*cmd.Instance)
			case "put-link":
				err = c.PutInstanceLink(*cmd.Link)
			case "snapshot":
				s := c.Snapshot()
				rep.Snapshot = s
				rep.Paths = map[NodeID]Path{}
				for _, to := range cmd.Paths {
					if p, ok := s.Path(c.id, to); ok {
						rep.Paths[to] = p
					}
				}
			case "quit":
				return 0
			default:
				err = fmt.Errorf("unknown op %q", cmd.Op)
			}
			if err != nil {
				rep.Err = err.Error()
			}
		}
		b, _ := json.Marshal(rep)
		fmt.Printf("%s%s\n", helperReplyTag, b)
	}
	return 0 // stdin closed: the test is gone
}

// serveState serves c's state endpoint on addr, as the gateway would.
func serveState(addr string, c *Cluster) error {
	mux := http.NewServeMux()
	mux.Handle(StatePath, c.StateHandler())
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// helper is a gateway process inside a namespace.
type helper struct {
	id      NodeID
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan helperReply
	stderr  *lockedBuffer
	mu      sync.Mutex // one request at a time
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		b.buf.Reset() // keep the tail only
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startHelper(t *testing.T, env *netnstest.Net, i int, join string) *helper {
	t.Helper()
	id := NodeID(fmt.Sprintf("g%d", i))
	args := append(env.Exec(i), os.Args[0], "-test.run=^TestNetnsHelper$", "-test.count=1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(),
		netnsHelperEnv+"=1",
		"SERFCLUSTER_HELPER_ID="+string(id),
		"SERFCLUSTER_HELPER_IP="+env.IP(i),
		"SERFCLUSTER_HELPER_JOIN="+join,
	)
	h := &helper{id: id, cmd: cmd, replies: make(chan helperReply, 1), stderr: &lockedBuffer{}}
	cmd.Stderr = h.stderr
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 4<<20), 4<<20)
		for sc.Scan() {
			if b, ok := bytes.CutPrefix(sc.Bytes(), []byte(helperReplyTag)); ok {
				var r helperReply
				if err := json.Unmarshal(b, &r); err != nil {
					r.Err = "bad reply: " + err.Error()
				}
				h.replies <- r
			}
		}
		close(h.replies)
	}()
	t.Cleanup(func() {
		_ = h.stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s stderr tail:\n%s", id, tail(h.stderr.String(), 4000))
		}
	})
	return h
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func (h *helper) call(t *testing.T, cmd helperCmd) helperReply {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(cmd)
	if _, err := h.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", h.id, err, tail(h.stderr.String(), 4000))
	}
	select {
	case r, ok := <-h.replies:
		if !ok {
			t.Fatalf("%s exited\nstderr:\n%s", h.id, tail(h.stderr.String(), 4000))
		}
		if r.Err != "" {
			t.Fatalf("%s: %s: %s", h.id, cmd.Op, r.Err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no reply to %s", h.id, cmd.Op)
	}
	return helperReply{}
}

func (h *helper) snapshot(t *testing.T, paths ...NodeID) helperReply {
	t.Helper()
	return h.call(t, helperCmd{Op: "snapshot", Paths: paths})
}

func nodeStatus(s *Snapshot, id NodeID) Status {
	for _, n := range s.Nodes {
		if n.ID == id && n.Problem == "" {
			return n.Status
		}
	}
	return ""
}

func instanceIn(s *Snapshot, id string) (Instance, bool) {
	for _, in := range s.Instances {
		if in.ID == id {
			return in, true
		}
	}
	return Instance{}, false
}

func linkIn(s *Snapshot, id string) (InstanceLink, bool) {
	for _, l := range s.Links {
		if l.LinkID == id {
			return l, true
		}
	}
	return InstanceLink{}, false
}

// TestNetnsPartition cuts one gateway off with its veth link down, checks that both sides route around the
// other (nodes failed, instances unavailable), writes conflicting changes on both sides, heals the link and
// checks that membership recovers and every table converges to one state.
func TestNetnsPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("partition test in -short mode")
	}
	env := netnstest.New(t, netnstest.Config{Nodes: 3, Subnet: netnsSubnet, RequireEnv: netnsRequireEnv})
	first := env.IP(1) + ":" + gossipPort
	hs := []*helper{startHelper(t, env, 1, ""), startHelper(t, env, 2, first), startHelper(t, env, 3, first)}
	ids := []NodeID{"g1", "g2", "g3"}

	waitHelpers := func(timeout time.Duration, what string, pred func(h *helper, r helperReply) (bool, string)) {
		t.Helper()
		waitFor(t, timeout, func() (bool, string) {
			for _, h := range hs {
				if ok, why := pred(h, h.snapshot(t, ids...)); !ok {
					return false, fmt.Sprintf("%s: on %s: %s", what, h.id, why)
				}
			}
			return true, ""
		})
	}
	allAlive := func(_ *helper, r helperReply) (bool, string) {
		for _, id := range ids {
			if st := nodeStatus(r.Snapshot, id); st != StatusAlive {
				return false, fmt.Sprintf("%s is %q", id, st)
			}
		}
		return true, ""
	}
	waitHelpers(30*time.Second, "forming", allAlive)

	for i, h := range hs {
		in := testInstance(h.id, "a")
		in.KVEndpoint = env.IP(i+1) + ":9000"
		h.call(t, helperCmd{Op: "put-instance", Instance: &in})
	}
	hs[0].call(t, helperCmd{Op: "put-link", Link: &InstanceLink{LinkID: "pd", PrefillInstances: []string{"g1/a"}, DecodeInstances: []string{"g2/a"}}})
	waitHelpers(20*time.Second, "replicating", func(_ *helper, r helperReply) (bool, string) {
		if len(r.Snapshot.Instances) != 3 || len(r.Snapshot.Links) != 1 {
			return false, fmt.Sprintf("%d instances, %d links", len(r.Snapshot.Instances), len(r.Snapshot.Links))
		}
		return true, ""
	})
	// Link state from real detection: the peer's veth address, on a shared subnet.
	p := hs[0].snapshot(t, "g3").Paths["g3"]
	if p.Address.IP.String() != env.IP(3) || !p.Direct {
		t.Fatalf("path g1->g3 = %+v, want %s direct", p, env.IP(3))
	}

	env.SetLink(3, false)
	majority, isolated := hs[:2], hs[2]
	waitFor(t, 30*time.Second, func() (bool, string) {
		for _, h := range majority {
			r := h.snapshot(t)
			in, _ := instanceIn(r.Snapshot, "g3/a")
			if st := nodeStatus(r.Snapshot, "g3"); st != StatusFailed || in.Status != InstanceUnavailable {
				return false, fmt.Sprintf("on %s: g3 is %q, g3/a is %q", h.id, st, in.Status)
			}
		}
		r := isolated.snapshot(t)
		for _, id := range ids[:2] {
			in, _ := instanceIn(r.Snapshot, string(id)+"/a")
			if st := nodeStatus(r.Snapshot, id); st != StatusFailed || in.Status != InstanceUnavailable {
				return false, fmt.Sprintf("on g3: %s is %q, its instance %q", id, st, in.Status)
			}
		}
		return true, ""
	})

	// Conflicting writes on both sides of the partition; the isolated side writes last.
	hs[1].call(t, helperCmd{Op: "put-link", Link: &InstanceLink{LinkID: "pd", PrefillInstances: []string{"g1/a"}, DecodeInstances: []string{"g1/a"}}})
	drained := testInstance("g3", "a")
	drained.Status = InstanceDraining
	drained.KVEndpoint = env.IP(3) + ":9000"
	isolated.call(t, helperCmd{Op: "put-instance", Instance: &drained})
	isolated.call(t, helperCmd{Op: "put-link", Link: &InstanceLink{LinkID: "pd", PrefillInstances: []string{"g3/a"}, DecodeInstances: []string{"g2/a"}}})
	isolated.call(t, helperCmd{Op: "put-link", Link: &InstanceLink{LinkID: "from-g3", DecodeInstances: []string{"g3/a"}}})

	env.SetLink(3, true)
	waitHelpers(60*time.Second, "healing", allAlive)
	var ref helperReply
	waitFor(t, 30*time.Second, func() (bool, string) {
		ref = hs[0].snapshot(t)
		for _, h := range hs[1:] {
			r := h.snapshot(t)
			if r.Snapshot.Digest != ref.Snapshot.Digest {
				return false, fmt.Sprintf("%s digest %s, g1 %s", h.id, r.Snapshot.Digest, ref.Snapshot.Digest)
			}
		}
		return true, ""
	})
	in, _ := instanceIn(ref.Snapshot, "g3/a")
	if in.Status != InstanceDraining {
		t.Errorf("g3/a is %q after healing, want draining", in.Status)
	}
	if _, ok := linkIn(ref.Snapshot, "from-g3"); !ok {
		t.Error("the isolated side's new link was lost")
	}
	pd, _ := linkIn(ref.Snapshot, "pd")
	t.Logf("link pd after healing: %+v (written last by %s)", pd, pd.Revision.Origin)
}
