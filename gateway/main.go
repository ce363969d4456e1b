// Command duet is the duet gateway: an OpenAI-compatible API in front of engine plugins, with a router plugin
// that decides where each request runs. See the README at the repository root.
//
//	duet [flags]                  serve (see duet -h)
//	duet plugin <kind> <name>     serve a built-in plugin; the gateway runs this itself
//	duet version
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/duet-ai/duet/gateway/internal/builtin"
	"github.com/duet-ai/duet/gateway/internal/config"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/gateway/internal/server"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
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
	reg := server.NewRegistry(cfg.NodeID)
	sockets, removeSockets, err := pluginhost.RunDir("")
	if err != nil {
		return err
	}
	defer removeSockets()

	engineCmd, err := pluginCommand("engine", cfg.Engine, builtin.Engines, cfg.EngineSHA256)
	if err != nil {
		return err
	}
	engines, err := pluginhost.Start(ctx, pluginhost.Spec[engine.Engine]{
		Name:         "engine " + cfg.Engine,
		Command:      engineCmd,
		ClientConfig: engine.ClientConfig,
		Connect:      engine.Connect,
		Checksum:     cfg.EngineSHA256,
		SocketDir:    sockets,
		Ready: func(ctx context.Context, e engine.Engine) error {
			desc, err := e.Load(ctx, engine.LoadRequest{InstanceID: cfg.NodeID + "-0", Model: cfg.Model, Options: cfg.EngineOptions})
			if err != nil {
				return fmt.Errorf("load model %q: %w", cfg.Model, err)
			}
			reg.Set([]engine.Description{desc})
			log.Info("model loaded", "model", desc.ModelID, "instance", desc.InstanceID, "backend", desc.Backend, "architecture", desc.Architecture)
			return nil
		},
		Logger:    log,
		PluginLog: os.Stderr,
		LogLevel:  cfg.LogLevel,
	})
	if err != nil {
		return err
	}
	defer engines.Stop()

	routerCmd, err := pluginCommand("router", cfg.Router, builtin.Routers, cfg.RouterSHA256)
	if err != nil {
		return err
	}
	routers, err := pluginhost.Start(ctx, pluginhost.Spec[router.Router]{
		Name:         "router " + cfg.Router,
		Command:      routerCmd,
		ClientConfig: router.ClientConfig,
		Connect:      router.Connect,
		Checksum:     cfg.RouterSHA256,
		SocketDir:    sockets,
		Logger:       log,
		PluginLog:    os.Stderr,
		LogLevel:     cfg.LogLevel,
	})
	if err != nil {
		return err
	}
	defer routers.Stop()

	srv := server.New(cfg.Server, reg, engines, routerProvider{routers}, func() any {
		return []pluginhost.Status{engines.Status(), routers.Status()}
	})
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		tc, err := newTLSConfig(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			return err
		}
		ln, scheme = tls.NewListener(ln, tc), "https"
	}
	log.Info("duet is serving", "url", scheme+"://"+ln.Addr().String()+"/v1", "model", cfg.Model, "engine", cfg.Engine, "auth", len(cfg.Server.APIKeys) > 0)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// routerProvider adapts the router supervisor to server.RouterProvider.
type routerProvider struct {
	s *pluginhost.Supervisor[router.Router]
}

func (p routerProvider) Get() (router.Router, uint64, error) { return p.s.Get() }

// pluginCommand returns how to start a plugin: a built-in one by re-executing this binary, an external one by
// its path.
func pluginCommand[T any](kind, name string, builtins map[string]T, checksum []byte) (func() *exec.Cmd, error) {
	if _, ok := builtins[name]; ok {
		if checksum != nil {
			return nil, fmt.Errorf("--%s-sha256 pins an external plugin binary, but %s %q is built into duet", kind, kind, name)
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the duet binary to start built-in %s %q: %w", kind, name, err)
		}
		return func() *exec.Cmd { return exec.Command(exe, "plugin", kind, name) }, nil
	}
	if !strings.ContainsRune(name, filepath.Separator) {
		return nil, fmt.Errorf("%s %q is neither a built-in %s nor a path to a plugin binary", kind, name, kind)
	}
	path, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%s plugin %s: not an executable file", kind, path)
	}
	return func() *exec.Cmd { return exec.Command(path) }, nil
}
