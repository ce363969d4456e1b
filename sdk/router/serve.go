package router

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-plugin"

	"github.com/duet-ai/duet/sdk/internal/pluginrpc"
)

// Serve serves impl as a router plugin. It is the whole main of a plugin and does not return.
func Serve(impl Router) {
	pluginrpc.Serve(PluginName, &Plugin{Impl: impl}, nil)
}

// ServeInProcess serves impl inside this process, as a plugin would, and returns the config that Connect uses
// to reach it through the real gRPC adapter. It stops when ctx ends.
func ServeInProcess(ctx context.Context, impl Router) (*plugin.ReattachConfig, error) {
	rc, _, err := pluginrpc.ServeInProcess(ctx, PluginName, &Plugin{Impl: impl})
	return rc, err
}

// ClientConfig is the go-plugin client configuration for a router plugin.
func ClientConfig() *plugin.ClientConfig {
	return pluginrpc.ClientConfig(PluginName, &Plugin{})
}

// Connect starts (or attaches to) a router plugin and returns a Router that talks to it.
func Connect(cfg *plugin.ClientConfig) (Router, *plugin.Client, error) {
	client, raw, err := pluginrpc.Connect(cfg, PluginName)
	if err != nil {
		return nil, nil, err
	}
	return raw.(Router), client, nil
}

// Logger returns a logger for router code running as a plugin: records reach the gateway's log at their own
// level, with their attributes. The level comes from DUET_PLUGIN_LOG_LEVEL (info by default).
func Logger() *slog.Logger { return pluginrpc.Logger(pluginrpc.LogLevel()) }
