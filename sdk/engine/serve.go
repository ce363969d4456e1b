package engine

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-plugin"

	"github.com/duet-ai/duet/sdk/internal/pluginrpc"
)

// Serve serves impl as an engine plugin over gRPC, with duet's handshake and message limits. It is the whole
// main of a plugin and does not return. Run outside a duet gateway, the plugin prints a short note and exits.
func Serve(impl Engine) {
	pluginrpc.Serve(PluginName, &Plugin{Impl: impl}, nil)
}

// ServeInProcess serves impl inside this process, as a plugin would, and returns the config that Connect uses
// to reach it through the real gRPC adapter. It stops when ctx ends. Tests and the conformance suite use it.
func ServeInProcess(ctx context.Context, impl Engine) (*plugin.ReattachConfig, error) {
	rc, _, err := pluginrpc.ServeInProcess(ctx, PluginName, &Plugin{Impl: impl})
	return rc, err
}

// ClientConfig is the go-plugin client configuration for an engine plugin: handshake, protocol versions and
// gRPC message limits. Set Cmd (or Reattach) and anything else the host needs, then call Connect.
func ClientConfig() *plugin.ClientConfig {
	return pluginrpc.ClientConfig(PluginName, &Plugin{})
}

// Connect starts the plugin (or attaches to it) and returns an Engine that talks to it, and the go-plugin
// client that owns the process (Kill stops it).
func Connect(cfg *plugin.ClientConfig) (Engine, *plugin.Client, error) {
	client, raw, err := pluginrpc.Connect(cfg, PluginName)
	if err != nil {
		return nil, nil, err
	}
	return raw.(Engine), client, nil
}

// Logger returns a logger for engine code running as a plugin: records reach the gateway's log at their own
// level, with their attributes. The level comes from DUET_PLUGIN_LOG_LEVEL (info by default).
func Logger() *slog.Logger { return pluginrpc.Logger(pluginrpc.LogLevel()) }
