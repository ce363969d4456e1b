// Command duet is the duet gateway: an OpenAI-compatible API in front of engine plugins, with a router plugin
// that decides where each request runs. Every gateway is a member of a cluster (of one, by default); together
// they serve one API. See the README at the repository root.
//
// Serving is three steps: parse the configuration (package config), start the node (package node: identity,
// the cluster, the router, then the engine) and serve its API (package server).
//
//	duet [flags]                  serve (see duet -h)
//	duet plugin <kind> <name>     serve a built-in plugin; the gateway runs this itself
//	duet bench <benchmark>        benchmark a cluster: pd, gateway, kvwire, load (see duet bench -h)
//	duet launch claude|codex      run a coding agent pointed at this gateway (see duet launch -h)
//	duet version
package main

import (
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
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/duet-ai/duet/bench"
	"github.com/duet-ai/duet/gateway/internal/builtin"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/config"
	"github.com/duet-ai/duet/gateway/internal/launch"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	gwnode "github.com/duet-ai/duet/gateway/internal/node"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/gateway/internal/responses"
	"github.com/duet-ai/duet/gateway/internal/server"
	"github.com/duet-ai/duet/gateway/internal/tracing"
	"github.com/duet-ai/duet/sdk/engine"
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

	// The API's listener first: its port is what peers are told.
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	listenHost, _, _ := net.SplitHostPort(cfg.Server.Listen)
	apiAddr := cfg.APIAdvertise
	if apiAddr == "" {
		apiAddr = cluster.AdvertisedAPI(ln.Addr().(*net.TCPAddr), log)
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

	// The node joins the cluster before any model loads (instances are published loading, then ready); its
	// engine starts once the API answers (peers pull this node's state; /healthz says "starting").
	n, err := gwnode.Start(ctx, nodeConfig(cfg, listenHost, apiAddr, tlsServer != nil, tlsClient, log))
	if err != nil {
		return err
	}
	defer n.Close()
	reasoningKeys, err := cluster.ReasoningKeys(n.Secrets(), cfg.DataDir)
	if err != nil {
		return fmt.Errorf("the key that seals reasoning: %w", err)
	}
	reasoning, err := responses.NewSealer(reasoningKeys...)
	if err != nil {
		return err
	}
	var m *metrics.Metrics
	var srv *server.Server // set before anything is served, so before the first scrape reads it
	if !cfg.NoMetrics {
		m = newMetrics(cfg, n, func() *server.Server { return srv })
		n.Agent().Speeds().OnEstimateError(m.EstimateError) // PD auto's estimates against what happened
	}
	tracer, err := tracing.New(tracing.Config{Endpoint: cfg.OTLPEndpoint, Node: n.ID(), Version: version})
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
	srv = server.New(cfg.Server, server.Deps{
		Node: n, HopKeys: n.Secrets().HopKeys(),
		Status:  func() any { return n.Plugins() },
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
	n.ProbeLinks()
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

	if err := n.StartEngine(ctx); err != nil {
		return err
	}
	log.Info("duet is serving", "url", scheme+"://"+ln.Addr().String()+"/v1", "node", n.ID(), "models", cfg.Models,
		"engine", cfg.Engine, "auth", len(cfg.Server.APIKeys) > 0, "gossip", n.Agent().GossipAddr(), "api_advertise", apiAddr,
		"encrypted", n.Secrets() != nil)
	if ollamaLn != nil {
		log.Info("serving the Ollama API", "url", scheme+"://"+ollamaLn.Addr().String()+"/api")
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	n.Draining()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if lerr := n.Leave(); lerr != nil {
		log.Warn("leaving the cluster", "error", lerr)
	}
	return err
}

// nodeConfig is what of the gateway's configuration its node runs on.
func nodeConfig(cfg config.Config, listenHost, apiAddr string, apiTLS bool, peerTLS *tls.Config, log *slog.Logger) gwnode.Config {
	return gwnode.Config{
		NodeID: cfg.NodeID, DataDir: cfg.DataDir, SecretFile: cfg.SecretFile, SecretEnv: os.Getenv("DUET_CLUSTER_SECRET"),
		Engine: cfg.Engine, Router: cfg.Router, EngineSHA256: cfg.EngineSHA256, RouterSHA256: cfg.RouterSHA256,
		PluginDir: cfg.PluginDir, RouterSubprocess: cfg.RouterSubprocess, PD: cfg.PD, LogLevel: cfg.LogLevel,
		Models: cfg.Models, EngineOptions: cfg.EngineOptions, CalibrateTokens: cfg.CalibrateTokens, MaxInstances: cfg.MaxInstances,
		ListenHost: listenHost, APIAddr: apiAddr, APITLS: apiTLS, PeerTLS: peerTLS, StateKey: stateKey(cfg.Server),
		ClusterBind: cfg.ClusterBind, ClusterBindSet: cfg.ClusterBindSet, ClusterAdvertise: cfg.ClusterAdvertise,
		Join: cfg.Join, Hardware: cfg.Hardware,
		HopIdleTimeout: cfg.Server.HopIdleTimeout, LinkProbeEvery: cfg.Server.LinkProbeEvery,
		Version: version, Logger: log,
	}
}

// newMetrics builds the gateway's series, reading this node's state from its parts when scraped.
func newMetrics(cfg config.Config, n *gwnode.Node, srv func() *server.Server) *metrics.Metrics {
	agent := n.Agent()
	return metrics.New(metrics.Sources{
		Node: n.ID(), Version: version,
		KnownModel: func(model string) bool {
			for _, in := range agent.Snapshot().Instances {
				if in.Model == model {
					return true
				}
			}
			return false
		},
		EngineStats: func(ctx context.Context) (engine.Stats, error) {
			e, _, err := n.Engines().Get()
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
			for _, st := range n.Plugins() {
				out = append(out, metrics.Plugin{Name: st.Name, Running: st.State == pluginhost.StateRunning, Restarts: st.Restarts})
			}
			return out
		},
	})
}

// loopbackOnly says a listener takes connections from this machine only.
func loopbackOnly(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

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
