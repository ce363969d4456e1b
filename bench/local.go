package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// The local clusters are ordinary duet processes (re-executions of this binary) on loopback: one per role,
// on 127.0.0.1 and 127.0.0.2 as if on two machines, sharing one secret, joined, each pinned to a CPU of its own
// with taskset when it is available, so that on a small machine the two nodes do not steal each other's
// time (as plugins/mlx-engine's P/D benchmarks do).

// nodeSpec says how to start one local node.
type nodeSpec struct {
	Name string   // for messages: "prefill", "decode", "gateway"
	Host string   // loopback address to listen on
	CPU  int      // CPU to pin the node (and its plugins) to; -1: not pinned
	Args []string // duet's flags, beyond --listen, --data-dir and --cluster-bind
	Env  []string // added to this process's environment
}

// localNode is a running local duet.
type localNode struct {
	spec   nodeSpec
	URL    string
	Gossip string // host:port of its serf agent, for --join
	cmd    *exec.Cmd
	log    *tail
	exited chan struct{}
	dir    string
}

// tail keeps the last bytes a process wrote, so that a node that fails says why.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// freePort picks a TCP port that is free on every host given.
func freePort(hosts ...string) (string, error) {
	for range 50 {
		ln, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ok := true
		var held []net.Listener
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, port))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		ln.Close()
		if ok {
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free on %v", hosts)
}

// secondLoopback is 127.0.0.2 when this machine routes it to itself (Linux does, for all of 127/8), else
// 127.0.0.1: the second node then only differs by its port.
func secondLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return "127.0.0.1"
	}
	ln.Close()
	return "127.0.0.2"
}

// pinning says how local nodes are pinned: the taskset binary, or why they are not.
type pinning struct {
	taskset string
	cpus    [2]int
	note    string
}

// pinPlan decides whether to pin two nodes to the CPUs asked for.
func pinPlan(cpus [2]int, want bool) pinning {
	if !want {
		return pinning{cpus: [2]int{-1, -1}, note: "not pinned (--cpus none): the nodes share every CPU"}
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return pinning{cpus: [2]int{-1, -1}, note: "not pinned: taskset is not installed, so the nodes share every CPU"}
	}
	n := runtime.NumCPU()
	if cpus[0] >= n || cpus[1] >= n {
		return pinning{cpus: [2]int{-1, -1}, note: fmt.Sprintf("not pinned: this machine has %d CPUs, --cpus asks for %d and %d", n, cpus[0], cpus[1])}
	}
	return pinning{taskset: ts, cpus: cpus,
		note: fmt.Sprintf("pinned with taskset: the prefill node (gateway, engine and router) on CPU %d, the decode node on CPU %d, one core each; engines compute on one thread", cpus[0], cpus[1])}
}

// startNode starts a duet and waits until its API answers /healthz.
func startNode(ctx context.Context, exe, root string, spec nodeSpec, pin pinning, join string) (*localNode, error) {
	port, err := freePort(spec.Host)
	if err != nil {
		return nil, err
	}
	gport, err := freePort(spec.Host)
	if err != nil {
		return nil, err
	}
	n := &localNode{spec: spec, URL: "http://" + net.JoinHostPort(spec.Host, port), Gossip: net.JoinHostPort(spec.Host, gport),
		log: &tail{max: 64 << 10}, exited: make(chan struct{}), dir: filepath.Join(root, spec.Name)}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return nil, err
	}
	args := []string{"--listen", net.JoinHostPort(spec.Host, port), "--data-dir", n.dir, "--cluster-bind", n.Gossip, "--log-level", "warn"}
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, spec.Args...)
	argv := append([]string{exe}, args...)
	if spec.CPU >= 0 && pin.taskset != "" {
		argv = append([]string{pin.taskset, "-c", strconv.Itoa(spec.CPU)}, argv...)
	}
	n.cmd = exec.Command(argv[0], argv[1:]...)
	n.cmd.Env = append(append(os.Environ(), "DUET_CLUSTER_TIMINGS=local"), spec.Env...)
	if spec.CPU >= 0 && pin.taskset != "" {
		// On one CPU Go would run each process with GOMAXPROCS=1, and an engine's compute goroutine would then
		// hold the only P between preemptions: its tokens would reach the gateway in bursts every few tens of
		// milliseconds. Two Ps on the one CPU let the kernel switch to the gRPC sender and the gateway as each
		// token is ready; the engine computes on one thread (threads=1, set with the engine options).
		n.cmd.Env = append(n.cmd.Env, "GOMAXPROCS=2")
	}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C at the terminal reaches the bench, which stops the nodes in order
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s node: %w", spec.Name, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	health := client.New(n.URL, client.WithTimeout(5*time.Second))
	for {
		select {
		case <-n.exited:
			return nil, fmt.Errorf("the %s node exited during start:\n%s", spec.Name, n.log.String())
		case <-ctx.Done():
			n.stop()
			return nil, ctx.Err()
		default:
		}
		if _, err := health.Health(ctx); err == nil {
			return n, nil
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("the %s node did not answer /healthz within 2m:\n%s", spec.Name, n.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends a node as an operator would: SIGTERM (the gateway drains and stops its plugins), SIGKILL to its
// process group after 15 s.
func (n *localNode) stop() {
	if n == nil || n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
}

// alive reports an error when the node has exited.
func (n *localNode) alive() error {
	select {
	case <-n.exited:
		return fmt.Errorf("the %s node exited:\n%s", n.spec.Name, n.log.String())
	default:
		return nil
	}
}

// writeSecret writes a fresh cluster secret into dir and returns the file's path.
func writeSecret(dir string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "cluster-secret")
	return p, os.WriteFile(p, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}

// executable is the duet binary to re-execute.
func executable(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the duet binary to start local nodes: %w", err)
	}
	return p, nil
}

// engineOptArgs turns engine options into duet's --engine-opt flag.
func engineOptArgs(o options) []string {
	if len(o) == 0 {
		return nil
	}
	return []string{"--engine-opt", o.String()}
}

// oneReady waits until base lists a ready instance on node (any node when empty) and returns it.
func oneReady(ctx context.Context, a *api, base, node string, timeout time.Duration) (instance, error) {
	var found instance
	err := waitUntil(ctx, timeout, "a ready instance at "+base, func() (bool, error) {
		ins, err := a.at(base).Instances(ctx)
		if err != nil {
			return false, err
		}
		for _, in := range ins {
			if in.Status == "ready" && (node == "" || in.Node == node) {
				found = in
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

// nodeID is the id a node gave itself.
func nodeID(ctx context.Context, a *api, base string) (string, error) {
	st, err := a.at(base).State(ctx)
	if err != nil {
		return "", err
	}
	if st.Local == "" {
		return "", errors.New(base + "/state names no local node")
	}
	return st.Local, nil
}
