package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/sdk/engine"
)

// Config is what a node is started with: the gateway's flags that concern it, and how its API is reached.
type Config struct {
	// NodeID names this node; empty: the one kept in DataDir (created once).
	NodeID  string
	DataDir string
	// SecretFile and SecretEnv are the cluster secret (--cluster-secret-file, DUET_CLUSTER_SECRET); neither:
	// an unauthenticated cluster.
	SecretFile, SecretEnv string

	// Engine and Router name the plugins (built-in names or paths), pinned by their SHA-256 when given;
	// PluginDir registers more that PUT /admin/v1/router may name.
	Engine, Router             string
	EngineSHA256, RouterSHA256 []byte
	PluginDir                  string
	// RouterSubprocess runs built-in routers as plugins too.
	RouterSubprocess bool
	// PD, when set, is router-disagg's placement mode (DUET_DISAGG_PD, which plugins inherit).
	PD       string
	LogLevel string

	// Models are loaded at start; EngineOptions are every instance's defaults.
	Models          []string
	EngineOptions   map[string]string
	CalibrateTokens int
	MaxInstances    int

	// ListenHost is the host of the API's listener; APIAddr is how peers reach the API, APITLS whether it is
	// served over TLS, PeerTLS how peers' certificates are trusted (nil: plain HTTP).
	ListenHost, APIAddr string
	APITLS              bool
	PeerTLS             *tls.Config
	// StateKey is the key this node pulls peers' cluster state with when there is no cluster secret.
	StateKey string

	// ClusterBind is the gossip address (empty: the API's host, DefaultGossipPort); ClusterBindSet says it was
	// given explicitly. ClusterAdvertise, Join and Hardware are as their flags.
	ClusterBind      string
	ClusterBindSet   bool
	ClusterAdvertise string
	Join             []string
	Hardware         string

	// HopIdleTimeout bounds a hop's wait for any sign of life from the owner (forward.Client).
	HopIdleTimeout time.Duration
	// LinkProbeEvery is how often an unmeasured link into this node is probed; 0: never.
	LinkProbeEvery time.Duration

	Version string
	Logger  *slog.Logger
}

// Node owns what a gateway runs besides requests: its identity and keys, its membership in the cluster, the
// engine plugin and the instances loaded into it, the router and its swap, the link prober, and the hop
// client to other gateways. The HTTP server asks it; it knows nothing of HTTP.
type Node struct {
	cfg       Config
	log       *slog.Logger
	id        string
	secrets   *cluster.Secrets
	agent     *cluster.Agent
	left      bool
	reg       *Registry
	view      *cluster.LocalView
	engines   *lateEngines
	routers   *routers
	sockets   string
	rmSockets func()
	fwd       *forward.Client
	engineCat *pluginhost.Catalog
	stopProbe context.CancelFunc
}

// Start identifies the node, joins the cluster (before any model loads: instances are published loading,
// then ready) and starts the router. The engine starts with StartEngine, once the API answers. On an error
// nothing it started is left running.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	n = &Node{cfg: cfg, log: log, engines: &lateEngines{}, stopProbe: func() {}}
	started := n
	defer func() {
		if err != nil {
			started.Close()
		}
	}()

	// Identity and keys.
	n.id = cfg.NodeID
	if n.id == "" {
		if n.id, err = cluster.LoadNodeID(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("node id: %w", err)
		}
	} else if err := cluster.CheckNodeID(n.id); err != nil {
		return nil, fmt.Errorf("--node-id: %w", err)
	}
	if n.secrets, err = cluster.LoadSecrets(cfg.SecretFile, cfg.SecretEnv); err != nil {
		return nil, err
	}
	engineCat, routerCat, err := catalogs(cfg)
	if err != nil {
		return nil, err
	}
	n.engineCat = engineCat

	bind := cfg.ClusterBind
	if bind == "" {
		bind = net.JoinHostPort(cfg.ListenHost, strconv.Itoa(cluster.DefaultGossipPort))
		if cfg.ListenHost == "" {
			bind = net.JoinHostPort("0.0.0.0", strconv.Itoa(cluster.DefaultGossipPort))
		}
	}
	hardware := cfg.Hardware
	if hardware == "" {
		hardware = detectHardware()
	}
	n.agent, err = cluster.Start(cluster.Config{
		NodeID: n.id, DataDir: cfg.DataDir, Bind: bind, BindExplicit: cfg.ClusterBindSet,
		Advertise: cfg.ClusterAdvertise, APIAddr: cfg.APIAddr, APITLS: cfg.APITLS, TLS: cfg.PeerTLS,
		Join: cfg.Join, Secrets: n.secrets, Addresses: cluster.ListenAddresses(cfg.ListenHost), Hardware: hardware, Version: cfg.Version,
		Timings: timingsFromEnv(), Logger: log.With("component", "cluster"), StateKey: cfg.StateKey,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}

	n.reg = NewRegistry(RegistryConfig{
		Node: n.id, Engine: cfg.Engine, Agent: n.agent, Defaults: cfg.EngineOptions, KVHost: kvHost(cfg.ListenHost),
		CalibrateTokens: cfg.CalibrateTokens, MaxInstances: cfg.MaxInstances, Logger: log,
	})
	for _, m := range cfg.Models {
		n.reg.AddSpec(InstanceSpec{Model: m})
	}
	n.view = cluster.NewLocalView(n.agent, n.reg)

	if n.sockets, n.rmSockets, err = pluginhost.RunDir(""); err != nil {
		return nil, err
	}
	if cfg.PD != "" {
		// router-disagg reads its settings from the environment, in process and as a plugin (which inherits it).
		if err := os.Setenv("DUET_DISAGG_PD", cfg.PD); err != nil {
			return nil, err
		}
	}
	rs := &routers{log: log, sockets: n.sockets, logLevel: cfg.LogLevel, subprocess: cfg.RouterSubprocess, catalog: routerCat}
	initialRouter, err := routerCat.Lookup(pluginName(cfg.Router))
	if err != nil {
		return nil, err
	}
	initial, err := rs.start(ctx, initialRouter)
	if err != nil {
		return nil, err
	}
	rs.sw = NewRouterSwitch(initial)
	n.routers = rs

	var hopKey []byte
	if n.secrets != nil {
		hopKey = n.secrets.HopKeys()[0]
	}
	n.fwd = forward.NewClient(hopKey, cfg.PeerTLS)
	n.fwd.SetIdleTimeout(cfg.HopIdleTimeout)
	return n, nil
}

// StartEngine starts the engine plugin and loads every instance into it (again whenever it restarts), and
// starts probing links. It returns once the engine's first start finished; a bad --model fails it.
func (n *Node) StartEngine(ctx context.Context) error {
	p, err := n.engineCat.Lookup(pluginName(n.cfg.Engine))
	if err != nil {
		return err
	}
	cmd, err := pluginCommand("engine", p)
	if err != nil {
		return err
	}
	sup, err := pluginhost.Start(ctx, pluginhost.Spec[engine.Engine]{
		Name:         "engine " + n.cfg.Engine,
		Command:      cmd,
		ClientConfig: engine.ClientConfig,
		Connect:      engine.Connect,
		Checksum:     p.SHA256,
		SocketDir:    n.sockets,
		Env:          pluginEnv(n.secrets),
		Ready:        n.reg.LoadAll,
		OnExit:       n.reg.EngineGone,
		Logger:       n.log,
		PluginLog:    os.Stderr,
		LogLevel:     n.cfg.LogLevel,
	})
	if err != nil {
		return err
	}
	n.engines.sup.Store(sup)
	return nil
}

// ProbeLinks probes the links into this node's instances that nothing measured yet, in the background, until
// Close; it does nothing without a LinkProbeEvery.
func (n *Node) ProbeLinks() {
	if n.cfg.LinkProbeEvery <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stopProbe = cancel
	p := &prober{agent: n.agent, reg: n.reg, fwd: n.fwd, every: n.cfg.LinkProbeEvery, log: n.log}
	go p.run(ctx)
}

// ID is this node's id.
func (n *Node) ID() string { return n.id }

// Secrets are the cluster's keys; nil without a cluster secret.
func (n *Node) Secrets() *cluster.Secrets { return n.secrets }

// Registry is this node's instances.
func (n *Node) Registry() *Registry { return n.reg }

// Agent is this node's membership in the cluster.
func (n *Node) Agent() *cluster.Agent { return n.agent }

// View is the router's snapshot of the cluster, with this node's exact loads laid over it.
func (n *Node) View() *cluster.LocalView { return n.view }

// Engines hands out the engine plugin (an error while it starts).
func (n *Node) Engines() EngineProvider { return n.engines }

// Routers hands out the router in use for one call.
func (n *Node) Routers() RouterProvider { return n.routers.sw }

// Swapper swaps the router in use.
func (n *Node) Swapper() RouterSwapper { return n.routers }

// Forward is the client of hops to other gateways.
func (n *Node) Forward() *forward.Client { return n.fwd }

// Plugins is the state of the node's plugin supervisors (router, then engine).
func (n *Node) Plugins() []pluginhost.Status {
	var out []pluginhost.Status
	if n.routers != nil && n.routers.sw != nil {
		out = append(out, n.routers.status())
	}
	if s := n.engines.sup.Load(); s != nil {
		out = append(out, s.Status())
	}
	return out
}

// Draining publishes every instance draining (the gateway is shutting down).
func (n *Node) Draining() { n.reg.Draining() }

// Leave leaves the cluster gracefully; Close then only stops what runs.
func (n *Node) Leave() error {
	n.left = true
	return n.agent.Leave()
}

// Close stops the link prober, the engine and the router, and the cluster agent unless it left.
func (n *Node) Close() {
	n.stopProbe()
	if n.fwd != nil {
		n.fwd.CloseIdle()
	}
	if s := n.engines.sup.Load(); s != nil {
		s.Stop()
	}
	if n.routers != nil && n.routers.sw != nil {
		n.routers.sw.Stop()
	}
	if n.rmSockets != nil {
		n.rmSockets()
	}
	if n.agent != nil && !n.left {
		if err := n.agent.Shutdown(); err != nil && !errors.Is(err, net.ErrClosed) {
			n.log.Debug("cluster shutdown", "error", err)
		}
	}
}

// kvHost is where instances serve KV by default: the API's host when it is bound to one address, else every
// interface (the router resolves the address peers dial from link state).
func kvHost(listenHost string) string {
	if ip, err := netip.ParseAddr(listenHost); err == nil && !ip.IsUnspecified() {
		return listenHost
	}
	if listenHost == "localhost" {
		return "127.0.0.1"
	}
	return "0.0.0.0"
}

// detectHardware names this machine's class for routers that prefer some hardware for prefill: the CPU's
// brand on a Mac (apple-m3-ultra), the OS and architecture elsewhere.
func detectHardware() string {
	if runtime.GOOS == "darwin" {
		if out, err := exec.Command("sysctl", "-n", "machdep.cpu.brand_string").Output(); err == nil {
			if s := strings.ToLower(strings.Join(strings.Fields(string(out)), "-")); s != "" && len(s) <= 48 {
				return s
			}
		}
	}
	return runtime.GOOS + "-" + runtime.GOARCH
}

// timingsFromEnv picks serfcluster's gossip timings: LAN by default, DUET_CLUSTER_TIMINGS=local for a cluster
// on one machine (tests), which detects failures a few times faster.
func timingsFromEnv() cluster.Timings {
	if os.Getenv("DUET_CLUSTER_TIMINGS") == "local" {
		return cluster.LocalTimings()
	}
	return cluster.LANTimings()
}
