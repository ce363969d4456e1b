package netnstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// prefix starts the name of every namespace this package makes, followed by the test process's id.
const prefix = "duet"

// Config says what network a test needs.
type Config struct {
	// Nodes is how many machines there are.
	Nodes int
	// Subnet is the first three octets of the machines' /24, such as "10.215.0".
	Subnet string
	// RequireEnv names the environment variable that, set to 1, makes missing namespace support fail the
	// test instead of skipping it.
	RequireEnv string
}

// Net is the namespaces of one test.
type Net struct {
	t      testing.TB
	subnet string
	bridge string
	nodes  []string
}

// New builds the network, or skips the test (fails it, under Config.RequireEnv=1) where it cannot. The
// namespaces go when the test ends.
func New(t testing.TB, cfg Config) *Net {
	t.Helper()
	unavailable := func(why string) {
		t.Helper()
		msg := "network namespaces unavailable: " + why + " (needs root and iproute2 with netns and veth support)"
		if cfg.RequireEnv != "" && os.Getenv(cfg.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		unavailable("not running as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable("the ip command is not installed")
	}
	sweep()
	pid := os.Getpid()
	n := &Net{t: t, subnet: cfg.Subnet, bridge: fmt.Sprintf("%s%d-br", prefix, pid)}
	t.Cleanup(n.teardown) // registered first, so that it runs even if the setup fails half way
	if err := ip("netns", "add", n.bridge); err != nil {
		unavailable(err.Error())
	}
	steps := [][]string{
		{"-n", n.bridge, "link", "add", "br0", "type", "bridge"},
		{"-n", n.bridge, "addr", "add", cfg.Subnet + ".254/24", "dev", "br0"},
		{"-n", n.bridge, "link", "set", "br0", "up"},
		{"-n", n.bridge, "link", "set", "lo", "up"},
	}
	for i := 1; i <= cfg.Nodes; i++ {
		ns := fmt.Sprintf("%s%d-n%d", prefix, pid, i)
		n.nodes = append(n.nodes, ns)
		peer := fmt.Sprintf("vb%d", i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", n.bridge},
			[]string{"-n", ns, "addr", "add", n.IP(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", n.bridge, "link", "set", peer, "master", "br0"},
			[]string{"-n", n.bridge, "link", "set", peer, "up"},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			unavailable(err.Error())
		}
	}
	return n
}

// Bridge is the name of the bridge's namespace, where the test sits at <subnet>.254.
func (n *Net) Bridge() string { return n.bridge }

// Node is the name of machine i's namespace (1-based).
func (n *Net) Node(i int) string { return n.nodes[i-1] }

// IP is machine i's address (1-based).
func (n *Net) IP(i int) string { return n.subnet + "." + strconv.Itoa(i) }

// Exec is the command prefix that runs a command on machine i (1-based): ip netns exec <namespace>.
func (n *Net) Exec(i int) []string { return []string{"ip", "netns", "exec", n.Node(i)} }

// SetLink takes machine i's cable (the bridge side of its veth) out, or plugs it back.
func (n *Net) SetLink(i int, up bool) {
	n.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	if err := ip("-n", n.bridge, "link", "set", fmt.Sprintf("vb%d", i), state); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Net) teardown() {
	for _, ns := range append(n.nodes, n.bridge) {
		if err := ip("netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			n.t.Logf("cleanup: %v", err)
		}
	}
}

// DialContext dials from inside the named network namespace, for an http.Transport: the socket is made on an
// OS thread that joined the namespace (and that never leaves it: it ends with its goroutine).
func DialContext(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread, tainted by Setns, exits with this goroutine
			f, err := os.Open("/var/run/netns/" + ns)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// sweep deletes the namespaces of test processes that no longer run.
func sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for line := range strings.Lines(string(out)) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidText); err == nil && !running(pid) {
			_ = ip("netns", "del", name)
		}
	}
}

// running reports whether pid is a process that still runs (a zombie waiting for its reaper counts as gone).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
