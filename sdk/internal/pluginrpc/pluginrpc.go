// Package pluginrpc holds what every duet plugin kind shares on the go-plugin side: the handshake, gRPC message
// limits, and the serve and connect options. sdk/engine and sdk/router build their Serve and client plumbing on it.
package pluginrpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// ProtocolVersion is the version of the duet plugin protocol. A gateway and a plugin negotiate the highest
// version both speak; bump it when a change is not wire compatible (field numbers make most changes compatible).
const ProtocolVersion = 1

// Handshake is shared by the gateway and every plugin. The cookie only keeps people from running a plugin by
// hand by mistake; it is not security (go-plugin's SecureConfig checksums are).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "DUET_PLUGIN",
	MagicCookieValue: "9f3c1b6e-duet-plugin-protocol",
}

// MaxMessageBytes bounds one gRPC message in either direction. gRPC's default receive limit is 4 MiB on both the
// client and the server, which a long prompt's token list or a large vocabulary's logprobs can exceed.
const MaxMessageBytes = 256 << 20

// Flow-control windows of a plugin connection, both ways. A plugin runs on the gateway's host, so the
// bandwidth-delay product is tiny and the windows only need to cover a burst of events. Fixing them turns off
// gRPC's BDP estimation, which otherwise sends a ping (and a window update) on the first data of every call,
// each answered by the other side: two extra writes, reads and wake-ups per call in each process, a large part
// of a short generation's cost on loopback.
const (
	StreamWindowBytes = 1 << 20
	ConnWindowBytes   = 16 << 20 // BDP estimation's own ceiling
)

// ServerOptions are the gRPC server options every plugin serves with.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.InitialWindowSize(StreamWindowBytes),
		grpc.InitialConnWindowSize(ConnWindowBytes),
	}
}

// DialOptions are the gRPC dial options the gateway connects to plugins with.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageBytes),
			grpc.MaxCallSendMsgSize(MaxMessageBytes),
		),
		grpc.WithInitialWindowSize(StreamWindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
	}
}

// Serve runs a plugin process serving the given plugin under name. It does not return.
//
// The host stops its plugins itself, after draining the requests they serve, so the process leaves its life
// to the host: it ignores SIGTERM (go-plugin already ignores SIGINT), which systemd or a shell sends to the
// whole process group, and it exits when the host is gone, so a host killed with SIGKILL leaves no orphans.
// The host is the pid in HostPIDEnv when the host sets it (then a host that died before the plugin started is
// noticed too), else the parent process. On Windows, where a process keeps its parent's pid after the parent
// exits, this watch sees nothing.
// (A plugin that starts programs of its own should restore SIGTERM for them: an ignored signal is inherited.)
func Serve(name string, p plugin.Plugin, logger hclog.Logger) {
	signal.Ignore(syscall.SIGTERM)
	host := os.Getppid()
	if v, err := strconv.Atoi(os.Getenv(HostPIDEnv)); err == nil && v > 0 {
		host = v
	}
	go exitWithParent(host, time.Second)
	plugin.Serve(serveConfig(name, p, logger))
}

// HostPIDEnv is the environment variable in which a host tells its plugin processes its pid.
const HostPIDEnv = "DUET_PLUGIN_HOST_PID"

// exitWithParent ends the process once its parent is no longer host (it was re-parented after the host died).
func exitWithParent(host int, every time.Duration) {
	for {
		if os.Getppid() != host {
			fmt.Fprintf(os.Stderr, "the plugin host (pid %d) is gone; exiting\n", host)
			os.Exit(1)
		}
		time.Sleep(every)
	}
}

func serveConfig(name string, p plugin.Plugin, logger hclog.Logger) *plugin.ServeConfig {
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{
			Name:       name,
			Level:      hclog.LevelFromString(envOr("DUET_PLUGIN_LOG_LEVEL", "info")),
			Output:     os.Stderr,
			JSONFormat: true,
		})
	}
	return &plugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			ProtocolVersion: {name: p},
		},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, ServerOptions()...)...)
		},
		Logger: logger,
	}
}

// ServeInProcess serves a plugin inside the calling process, as go-plugin's test mode does, and returns the
// reattach config a client connects with. The server stops when ctx ends; the returned channel closes then. This
// is how the conformance harnesses drive an implementation through the real gRPC adapter without a subprocess.
func ServeInProcess(ctx context.Context, name string, p plugin.Plugin) (*plugin.ReattachConfig, <-chan struct{}, error) {
	cfg := serveConfig(name, p, hclog.NewNullLogger())
	reattach := make(chan *plugin.ReattachConfig, 1)
	closed := make(chan struct{})
	cfg.Test = &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed}
	go plugin.Serve(cfg)
	select {
	case rc := <-reattach:
		return rc, closed, nil
	case <-closed:
		return nil, closed, fmt.Errorf("in-process plugin %q stopped before it was ready", name)
	case <-ctx.Done():
		return nil, closed, ctx.Err()
	}
}

// ClientConfig returns the go-plugin client configuration for a plugin of the given name, with duet's
// handshake and message limits. The caller sets Cmd (or Reattach), Stderr, Logger and AutoMTLS as it needs.
func ClientConfig(name string, p plugin.Plugin) *plugin.ClientConfig {
	return &plugin.ClientConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			ProtocolVersion: {name: p},
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  DialOptions(),
	}
}

// Connect starts (or attaches to) the plugin described by cfg and dispenses the named plugin.
func Connect(cfg *plugin.ClientConfig, name string) (*plugin.Client, any, error) {
	if cfg.Reattach != nil && cfg.Plugins == nil {
		// Reattaching skips version negotiation, and with it VersionedPlugins.
		cfg.Plugins = cfg.VersionedPlugins[cfg.Reattach.ProtocolVersion]
	}
	client := plugin.NewClient(cfg)
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, nil, err
	}
	raw, err := rpc.Dispense(name)
	if err != nil {
		client.Kill()
		return nil, nil, err
	}
	return client, raw, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Logger returns a slog logger for plugin code. It writes JSON lines to stderr in the shape go-plugin's host
// parses ("@level", "@message", "@timestamp"), so the gateway logs a plugin's records at their own level, with
// their attributes, under the plugin's name.
func Logger(level slog.Level) *slog.Logger { return newLogger(os.Stderr, level) }

// hostTimeLayout is the only "@timestamp" layout go-plugin's host accepts (log_entry.go); a line it cannot
// parse is passed on raw at debug level, which hides a plugin's info and warnings.
const hostTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch a.Value.Kind() {
			case slog.KindDuration:
				return slog.String(a.Key, a.Value.Duration().String()) // "1.5s", not 1500000000
			case slog.KindInt64, slog.KindUint64:
				// The host decodes JSON numbers as float64 and would print 13373952 as 1.3373952e+07.
				return slog.String(a.Key, a.Value.String())
			}
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				a.Key = "@timestamp"
				a.Value = slog.StringValue(a.Value.Time().UTC().Format(hostTimeLayout))
			case slog.LevelKey:
				a.Key = "@level"
				a.Value = slog.StringValue(strings.ToLower(a.Value.String()))
			case slog.MessageKey:
				a.Key = "@message"
			}
			return a
		},
	}))
}

// LogLevel is the level plugins log at: DUET_PLUGIN_LOG_LEVEL, info by default.
func LogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(envOr("DUET_PLUGIN_LOG_LEVEL", "info"))); err != nil {
		return slog.LevelInfo
	}
	return l
}
