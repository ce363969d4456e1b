// Command duet is the duet gateway: an OpenAI-compatible API in front of engine plugins, with a router plugin
// that decides where each request runs. Every gateway is a member of a cluster (of one, by default); together
// they serve one API. See the README at the repository root.
//
//	duet [flags]                  serve (see duet -h)
//	duet plugin <kind> <name>     serve a built-in plugin; the gateway runs this itself
//	duet bench <benchmark>        benchmark a cluster: pd, gateway, kvwire, load (see duet bench -h)
//	duet launch claude|codex      run a coding agent pointed at this gateway (see duet launch -h)
//	duet version
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/duet-ai/duet/bench"
	"github.com/duet-ai/duet/gateway/internal/builtin"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/config"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/launch"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/gateway/internal/responses"
	"github.com/duet-ai/duet/gateway/internal/server"
	"github.com/duet-ai/duet/gateway/internal/tracing"
	"github.com/duet-ai/duet/sdk/clustersecret"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/serfcluster"
	"github.com/duet-ai/duet/serfcluster/netif"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "plugin":
			if len(os.Args) != 4 {
				fmt.Fprintln(os.Stderr, "usage: duet plugin <engine|router> <name>")
				os.Exit(2)
			}
			if err := builtin.Serve(os.Args[2], os.Args[3]); err != nil {
				fmt.Fprintln(os.Stderr, "duet:", err)
				os.Exit(2)
			}
			return
		case "bench":
			os.Exit(bench.Main(os.Args[2:], version))
		case "launch":
			os.Exit(launch.Main(os.Args[2:], os.Getenv, os.Environ(), os.Stdin, os.Stdout, os.Stderr))
		case "version":
			fmt.Println("duet", version)
			return
		}
	}
	cfg, err := config.Parse(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "duet:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "duet:", err)
		os.Exit(1)
	}
}

func newLogger(cfg config.Config) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func run(ctx context.Context, cfg config.Config) error {
	log := newLogger(cfg)
	cfg.Server.Logger = log
	if addr := os.Getenv("DUET_PPROF"); addr != "" {
		// Profiling on a separate listener, only when asked for (net/http/pprof registers on the default mux).
		go func() { log.Warn("pprof stopped", "error", http.ListenAndServe(addr, nil)) }()
	}

	// Identity and keys.
	nodeID := cfg.NodeID
	if nodeID == "" {
		var err error
		if nodeID, err = cluster.LoadNodeID(cfg.DataDir); err != nil {
			return fmt.Errorf("node id: %w", err)
		}
	} else if err := cluster.CheckNodeID(nodeID); err != nil {
		return fmt.Errorf("--node-id: %w", err)
	}
	secrets, err := cluster.LoadSecrets(cfg.SecretFile, os.Getenv("DUET_CLUSTER_SECRET"))
	if err != nil {
		return err
	}
	reasoningKeys, err := cluster.ReasoningKeys(secrets, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("the key that seals reasoning: %w", err)
	}
	reasoning, err := responses.NewSealer(reasoningKeys...)
	if err != nil {
		return err
	}
	engineCatalog, routerCatalog, err := catalogs(cfg)
	if err != nil {
		return err
	}

	// The API's listener first: its port is what peers are told.
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	listenHost, _, _ := net.SplitHostPort(cfg.Server.Listen)
	apiAddr := cfg.APIAdvertise
	if apiAddr == "" {
		apiAddr = advertisedAPI(ln.Addr().(*net.TCPAddr), log)
	}
	var tlsServer, tlsClient *tls.Config
	scheme := "http"
	if cfg.TLSCert != "" {
		if tlsServer, err = newTLSConfig(cfg.TLSCert, cfg.TLSKey); err != nil {
			return err
		}
		if tlsClient, err = peerTLS(cfg.TLSCert); err != nil {
			return err
		}
		ln, scheme = tls.NewListener(ln, tlsServer), "https"
	}
	// Ollama's port, when asked for: the same app on a second listener, so Ollama apps find it unconfigured.
	// It is served as --listen is (TLS included) and closed with it on shutdown.
	var ollamaLn net.Listener
	if cfg.OllamaListen != "" {
		if ollamaLn, err = net.Listen("tcp", cfg.OllamaListen); err != nil {
			return fmt.Errorf("--ollama-listen: %w", err)
		}
		defer ollamaLn.Close()
		if tlsServer != nil {
			ollamaLn = tls.NewListener(ollamaLn, tlsServer)
		}
	}

	// The cluster, before any model loads: instances are published loading, then ready.
	bind := cfg.ClusterBind
	if bind == "" {
		bind = net.JoinHostPort(listenHost, strconv.Itoa(cluster.DefaultGossipPort))
		if listenHost == "" {
			bind = net.JoinHostPort("0.0.0.0", strconv.Itoa(cluster.DefaultGossipPort))
		}
	}
	hardware := cfg.Hardware
	if hardware == "" {
		hardware = detectHardware()
	}
	agent, err := cluster.Start(cluster.Config{
		NodeID: nodeID, DataDir: cfg.DataDir, Bind: bind, BindExplicit: cfg.ClusterBindSet,
		Advertise: cfg.ClusterAdvertise, APIAddr: apiAddr, APITLS: tlsServer != nil, TLS: tlsClient,
		Join: cfg.Join, Secrets: secrets, Addresses: addressesFor(listenHost), Hardware: hardware, Version: version,
		Timings: timingsFromEnv(), Logger: log.With("component", "cluster"), StateKey: stateKey(cfg.Server),
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	left := false
	defer func() {
		if !left {
			agent.Shutdown()
		}
	}()

	reg := server.NewRegistry(server.RegistryConfig{
		Node: nodeID, Engine: cfg.Engine, Agent: agent, Defaults: cfg.EngineOptions, KVHost: kvHost(listenHost, apiAddr),
		CalibrateTokens: cfg.CalibrateTokens, MaxInstances: cfg.MaxInstances, Logger: log,
	})
	for _, m := range cfg.Models {
		reg.AddSpec(server.InstanceSpec{Model: m})
	}

	sockets, removeSockets, err := pluginhost.RunDir("")
	if err != nil {
		return err
	}
	defer removeSockets()

	// The server answers while the engine starts (peers pull this node's state; /healthz says "starting").
	engines := &lateEngines{}
	if cfg.PD != "" {
		// router-disagg reads its settings from the environment, in process and as a plugin (which inherits it).
		if err := os.Setenv("DUET_DISAGG_PD", cfg.PD); err != nil {
			return err
		}
	}
	routers := &routerSwapper{log: log, sockets: sockets, logLevel: cfg.LogLevel, subprocess: cfg.RouterSubprocess, catalog: routerCatalog}
	initialRouter, err := routerCatalog.Lookup(pluginName(cfg.Router))
	if err != nil {
		return err
	}
	initial, err := routers.start(ctx, initialRouter)
	if err != nil {
		return err
	}
	routers.sw = server.NewRouterSwitch(initial)
	defer routers.sw.Stop()
	var hopKey []byte
	if secrets != nil {
		hopKey = secrets.HopKeys()[0]
	}
	pluginStatus := func() []pluginhost.Status {
		out := []pluginhost.Status{routers.status()}
		if s := engines.sup.Load(); s != nil {
			out = append(out, s.Status())
		}
		return out
	}
	var m *metrics.Metrics
	var srv *server.Server // set before anything is served, so before the first scrape reads it
	if !cfg.NoMetrics {
		m = newMetrics(cfg, nodeID, agent, engines, func() *server.Server { return srv }, pluginStatus)
		agent.Speeds().OnEstimateError(m.EstimateError) // PD auto's estimates against what happened
	}
	tracer, err := tracing.New(tracing.Config{Endpoint: cfg.OTLPEndpoint, Node: nodeID, Version: version})
	if err != nil {
		return fmt.Errorf("--otlp-endpoint: %w", err)
	}
	defer func() {
		// The spans still queued go out, within a bound: a collector that is down must not hold up an exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(ctx); err != nil {
			log.Warn("exporting the last spans", "error", err)
		}
	}()
	cfg.Server.ListensBeyondLoopback = !loopbackOnly(ln.Addr())
	if ollamaLn != nil && !loopbackOnly(ollamaLn.Addr()) {
		cfg.Server.ListensBeyondLoopback = true
	}
	hops := forward.NewClient(hopKey, tlsClient)
	hops.SetIdleTimeout(cfg.Server.HopIdleTimeout)
	srv = server.New(cfg.Server, server.Deps{
		Registry: reg, Agent: agent, Engines: engines, Routers: routers.sw, Swapper: routers,
		Forward: hops, HopKeys: secrets.HopKeys(),
		Status:  func() any { return pluginStatus() },
		Metrics: m, Tracer: tracer, Reasoning: reasoning,
	})
	for _, w := range srv.Exposure() {
		log.Warn("open to the network: "+w, "listen", ln.Addr().String())
	}
	served := make(chan error, 3)
	go func() { served <- srv.Serve(ln) }()
	if ollamaLn != nil {
		go func() { served <- srv.Serve(ollamaLn) }()
	}
	if cfg.MetricsListen != "" {
		// /metrics alone, without an API key, for a scraper on a private network; plain HTTP (Prometheus
		// scrapes a private listener so), closed on shutdown.
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
		go func() {
			if err := ms.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				served <- fmt.Errorf("--metrics-listen: %w", err)
			}
		}()
		defer ms.Close()
		log.Info("serving metrics", "url", "http://"+mln.Addr().String()+"/metrics")
	}

	enginePlugin, err := engineCatalog.Lookup(pluginName(cfg.Engine))
	if err != nil {
		return err
	}
	engineCmd, err := pluginCommand("engine", enginePlugin)
	if err != nil {
		return err
	}
	sup, err := pluginhost.Start(ctx, pluginhost.Spec[engine.Engine]{
		Name:         "engine " + cfg.Engine,
		Command:      engineCmd,
		ClientConfig: engine.ClientConfig,
		Connect:      engine.Connect,
		Checksum:     enginePlugin.SHA256,
		SocketDir:    sockets,
		Env:          pluginEnv(secrets),
		Ready:        reg.LoadAll,
		OnExit:       reg.EngineGone,
		Logger:       log,
		PluginLog:    os.Stderr,
		LogLevel:     cfg.LogLevel,
	})
	if err != nil {
		return err
	}
	engines.sup.Store(sup)
	defer sup.Stop()

	log.Info("duet is serving", "url", scheme+"://"+ln.Addr().String()+"/v1", "node", nodeID, "models", cfg.Models,
		"engine", cfg.Engine, "auth", len(cfg.Server.APIKeys) > 0, "gossip", agent.GossipAddr(), "api_advertise", apiAddr,
		"encrypted", secrets != nil)
	if ollamaLn != nil {
		log.Info("serving the Ollama API", "url", scheme+"://"+ollamaLn.Addr().String()+"/api")
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	reg.Draining()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if lerr := agent.Leave(); lerr != nil {
		log.Warn("leaving the cluster", "error", lerr)
	}
	left = true
	return err
}

// newMetrics builds the gateway's series, reading this node's state from its parts when scraped.
func newMetrics(cfg config.Config, nodeID string, agent *cluster.Agent, engines *lateEngines,
	srv func() *server.Server, plugins func() []pluginhost.Status) *metrics.Metrics {
	return metrics.New(metrics.Sources{
		Node: nodeID, Version: version,
		KnownModel: func(model string) bool {
			for _, in := range agent.Snapshot().Instances {
				if in.Model == model {
					return true
				}
			}
			return false
		},
		EngineStats: func(ctx context.Context) (engine.Stats, error) {
			e, _, err := engines.Get()
			if err != nil {
				return engine.Stats{}, err
			}
			return e.Stats(ctx)
		},
		StatsEvery: cfg.MetricsStatsInterval,
		Instances:  func() []metrics.Instance { return srv().Instances() },
		Admission:  func() metrics.AdmissionState { return srv().Admission() },
		Cluster: func() (map[string]int, map[string]int) {
			snap := agent.Snapshot()
			members, instances := map[string]int{}, map[string]int{}
			for _, n := range snap.Nodes {
				members[string(n.Status)]++
			}
			for _, in := range snap.Instances {
				instances[string(in.Status)]++
			}
			return members, instances
		},
		Plugins: func() []metrics.Plugin {
			var out []metrics.Plugin
			for _, st := range plugins() {
				out = append(out, metrics.Plugin{Name: st.Name, Running: st.State == pluginhost.StateRunning, Restarts: st.Restarts})
			}
			return out
		},
	})
}

// lateEngines is the engine provider before and after the engine plugin is up.
type lateEngines struct {
	sup atomic.Pointer[pluginhost.Supervisor[engine.Engine]]
}

var errStarting = errors.New("the engine plugin is starting")

func (l *lateEngines) Get() (engine.Engine, uint64, error) {
	s := l.sup.Load()
	if s == nil {
		return nil, 0, errStarting
	}
	return s.Get()
}

func (l *lateEngines) Explain(gen uint64) (bool, string) {
	s := l.sup.Load()
	if s == nil {
		return false, ""
	}
	return s.Explain(gen)
}

// pluginEnv is the environment of engine plugins: this process's, without the cluster secret, plus the KV
// wire keys derived from it (all an engine needs).
func pluginEnv(s *cluster.Secrets) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DUET_CLUSTER_SECRET=") && !strings.HasPrefix(kv, clustersecret.KVKeyEnv+"=") {
			env = append(env, kv)
		}
	}
	if e := s.KVKeyEnv(); e != "" {
		env = append(env, e)
	}
	return env
}

// loopbackOnly says a listener takes connections from this machine only.
func loopbackOnly(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// advertisedAPI is how peers reach this API: the listener's address, or for one bound to every interface,
// the best address of this machine (Thunderbolt, Ethernet, Wi-Fi; not loopback).
func advertisedAPI(a *net.TCPAddr, log *slog.Logger) string {
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	addrs, err := netif.Detect()
	if err == nil {
		netif.Sort(addrs)
		for _, ad := range addrs {
			if ad.Kind != netif.KindLoopback && ad.IP.Is4() {
				return net.JoinHostPort(ad.IP.String(), strconv.Itoa(a.Port))
			}
		}
	}
	log.Warn("found no address for peers to reach this API; set --api-advertise", "error", err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
}

// addressesFor is what this node advertises for paths: for an API bound to one address, only that one (peers
// could not reach it elsewhere), with its interface's kind and speed; nil otherwise, to detect them all.
// stateKey is the key this node pulls peers' cluster state with: its first API key (or admin key), which a
// peer without a cluster secret asks for (the nodes of a cluster share their keys).
func stateKey(c server.Config) string {
	if len(c.APIKeys) > 0 {
		return c.APIKeys[0]
	}
	if len(c.AdminKeys) > 0 {
		return c.AdminKeys[0]
	}
	return ""
}

func addressesFor(listenHost string) []netif.Address {
	ip, err := netip.ParseAddr(listenHost)
	if listenHost == "localhost" {
		ip, err = netip.MustParseAddr("127.0.0.1"), nil
	}
	if err != nil || ip.IsUnspecified() {
		return nil
	}
	out := netif.Address{IP: ip, Kind: netif.KindOther}
	if ip.IsLoopback() {
		out.Kind, out.PrefixLen = netif.KindLoopback, 8
	}
	if addrs, err := netif.Detect(); err == nil {
		for _, a := range addrs {
			if p, ok := a.Prefix(); ok && p.Contains(ip) {
				out.PrefixLen, out.Interface, out.Kind, out.SpeedMbps = a.PrefixLen, a.Interface, a.Kind, a.SpeedMbps
				if a.IP == ip {
					break
				}
			}
		}
	}
	return []netif.Address{out}
}

// kvHost is where instances serve KV by default: the API's host when it is bound to one address, else every
// interface (the router resolves the address peers dial from link state).
func kvHost(listenHost, apiAddr string) string {
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
func timingsFromEnv() serfcluster.Timings {
	if os.Getenv("DUET_CLUSTER_TIMINGS") == "local" {
		return serfcluster.LocalTimings()
	}
	return serfcluster.LANTimings()
}

// peerTLS is how this gateway trusts peers' API certificates: the system's roots and the certificates of its
// own --tls-cert file (a cluster that shares a self-signed certificate or a private CA).
func peerTLS(certFile string) (*tls.Config, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	pool.AppendCertsFromPEM(b)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// catalogs registers the plugins a request may name: the built-ins, the --engine and --router paths (pinned by
// their --*-sha256, or by their SHA-256 now) and the executables of --plugin-dir (pinned by their SHA-256
// now). Nothing else is ever started.
func catalogs(cfg config.Config) (engines, routers *pluginhost.Catalog, err error) {
	engines, routers = pluginhost.NewCatalog("engine"), pluginhost.NewCatalog("router")
	for name := range builtin.Engines {
		engines.AddBuiltin(name)
	}
	for name := range builtin.Routers {
		routers.AddBuiltin(name)
	}
	if cfg.PluginDir != "" {
		if err := engines.AddDir(cfg.PluginDir); err != nil {
			return nil, nil, fmt.Errorf("--plugin-dir: %w", err)
		}
		if err := routers.AddDir(cfg.PluginDir); err != nil {
			return nil, nil, fmt.Errorf("--plugin-dir: %w", err)
		}
	}
	add := func(c *pluginhost.Catalog, kind, name string, pin []byte) error {
		if _, ok := builtinOf(kind, name); ok {
			if pin != nil {
				return fmt.Errorf("--%s-sha256 pins an external plugin binary, but %s %q is built into duet", kind, kind, name)
			}
			return nil
		}
		if !strings.ContainsRune(name, filepath.Separator) {
			p, err := c.Lookup(name) // a file of --plugin-dir, by its name
			if err != nil {
				return fmt.Errorf("%s %q is neither a built-in %s, a file of --plugin-dir, nor a path to a plugin binary", kind, name, kind)
			}
			if pin != nil && !bytes.Equal(pin, p.SHA256) {
				return fmt.Errorf("%s plugin %s has SHA-256 %x, but %x is pinned; it was not run", kind, p.Path, p.SHA256, pin)
			}
			return nil
		}
		_, err := c.AddFile(name, pin)
		return err
	}
	if err := add(engines, "engine", cfg.Engine, cfg.EngineSHA256); err != nil {
		return nil, nil, err
	}
	if err := add(routers, "router", cfg.Router, cfg.RouterSHA256); err != nil {
		return nil, nil, err
	}
	return engines, routers, nil
}

func builtinOf(kind, name string) (struct{}, bool) {
	var ok bool
	switch kind {
	case "engine":
		_, ok = builtin.Engines[name]
	case "router":
		_, ok = builtin.Routers[name]
	}
	return struct{}{}, ok
}

// pluginName is the catalog name of a plugin given on the command line: a path registers under its file
// name.
func pluginName(nameOrPath string) string {
	if strings.ContainsRune(nameOrPath, filepath.Separator) {
		if abs, err := filepath.Abs(nameOrPath); err == nil {
			return filepath.Base(abs)
		}
	}
	return nameOrPath
}

// routerSwapper starts the routers of its catalog (built-in ones in process unless --router-subprocess,
// external ones as supervised plugins pinned by their SHA-256), and swaps the one in use.
type routerSwapper struct {
	log        *slog.Logger
	sockets    string
	logLevel   string
	subprocess bool // built-in routers as plugins too
	catalog    *pluginhost.Catalog
	sw         *server.RouterSwitch

	cur atomic.Pointer[pluginhost.Supervisor[router.Router]]
}

func (r *routerSwapper) start(ctx context.Context, p pluginhost.Plugin) (*server.RouterHandle, error) {
	name := p.Name
	if mk, ok := builtin.InProcessRouters[name]; ok && p.Builtin() && !r.subprocess {
		rt, err := mk()
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", name, err)
		}
		r.cur.Store(nil)
		r.log.Info("router ready", "router", name, "in_process", true)
		return &server.RouterHandle{Name: name, Get: func() (router.Router, error) { return rt, nil }}, nil
	}
	cmd, err := pluginCommand("router", p)
	if err != nil {
		return nil, err
	}
	sup, err := pluginhost.Start(ctx, pluginhost.Spec[router.Router]{
		Name:         "router " + name,
		Command:      cmd,
		ClientConfig: router.ClientConfig,
		Connect:      router.Connect,
		Checksum:     p.SHA256,
		SocketDir:    r.sockets,
		Logger:       r.log,
		PluginLog:    os.Stderr,
		LogLevel:     r.logLevel,
	})
	if err != nil {
		return nil, err
	}
	r.cur.Store(sup)
	return &server.RouterHandle{
		Name: name,
		Get:  func() (router.Router, error) { rt, _, err := sup.Get(); return rt, err },
		Stop: sup.Stop,
	}, nil
}

// SwapRouter implements server.RouterSwapper: only a registered name starts, and a pin given with the
// request must be the registered one.
func (r *routerSwapper) SwapRouter(ctx context.Context, name string, checksum []byte) error {
	p, err := r.catalog.Lookup(name)
	if err != nil {
		return fmt.Errorf("%w: %v", server.ErrRouterRefused, err)
	}
	if checksum != nil {
		if p.Builtin() {
			return fmt.Errorf("%w: sha256 pins an external plugin binary, but router %q is built into duet", server.ErrRouterRefused, name)
		}
		if !bytes.Equal(checksum, p.SHA256) {
			return fmt.Errorf("%w: sha256 is not the SHA-256 registered for router %q at start", server.ErrRouterRefused, name)
		}
	}
	h, err := r.start(ctx, p)
	if err != nil {
		return err
	}
	r.sw.Swap(h)
	return nil
}

func (r *routerSwapper) Current() string { return r.sw.Current() }

// Available implements server.RouterSwapper.
func (r *routerSwapper) Available() []string { return r.catalog.Names() }

func (r *routerSwapper) status() pluginhost.Status {
	if s := r.cur.Load(); s != nil {
		return s.Status()
	}
	return pluginhost.Status{Name: "router " + r.sw.Current() + " (in process)", State: pluginhost.StateRunning}
}

// pluginCommand returns how to start a registered plugin: a built-in one by re-executing this binary, an
// external one by its path.
func pluginCommand(kind string, p pluginhost.Plugin) (func() *exec.Cmd, error) {
	if p.Builtin() {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the duet binary to start built-in %s %q: %w", kind, p.Name, err)
		}
		return func() *exec.Cmd { return exec.Command(exe, "plugin", kind, p.Name) }, nil
	}
	path := p.Path
	return func() *exec.Cmd { return exec.Command(path) }, nil
}
