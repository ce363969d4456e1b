package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/duet-ai/duet/gateway/internal/builtin"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/sdk/clustersecret"
)

// catalogs registers the plugins a request may name: the built-ins, the --engine and --router paths (pinned by
// their --*-sha256, or by their SHA-256 now) and the executables of --plugin-dir (pinned by their SHA-256
// now). Nothing else is ever started.
func catalogs(cfg Config) (engines, routers *pluginhost.Catalog, err error) {
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
