// Package builtin names the plugins compiled into the duet binary. The gateway starts them by re-executing
// itself as `duet plugin <kind> <name>`, so they run as real go-plugin subprocesses, exactly like external
// plugins, while `go run ./gateway` needs no separate build.
package builtin

import (
	"fmt"
	"os"
	"sort"

	roundrobin "github.com/duet-ai/duet/examples/roundrobin-router"
	echo "github.com/duet-ai/duet/plugins/echo-engine"
	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// Engines are the built-in engine plugins by name.
var Engines = map[string]func() engine.Engine{
	"mlx-engine": func() engine.Engine { return mlxengine.New(engine.Logger()) },
	"echo":       func() engine.Engine { return echo.New() },
}

// Routers are the built-in router plugins by name.
var Routers = map[string]func() router.Router{
	"router-disagg": func() router.Router {
		r, err := routerdisagg.Plugin()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return r
	},
	"roundrobin": func() router.Router { return roundrobin.New() },
	// router-disagg-auto is router-disagg with PD auto whatever DUET_DISAGG_PD says: swapping to it (PUT
	// /admin/v1/router) turns the cost model on at run time, as `duet bench pd`'s phase auto does.
	"router-disagg-auto": func() router.Router {
		r, err := disaggAuto()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return r
	},
}

func disaggAuto() (router.Router, error) {
	cfg, err := routerdisagg.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	cfg.PD = routerdisagg.PDAuto
	return routerdisagg.New(cfg)
}

// InProcessRouters build the built-in routers inside the gateway's process, which is how the gateway runs them
// unless told otherwise (--router-subprocess): a router is a pure function of a request and a snapshot,
// called for every request, and a subprocess adds a gRPC round trip (a few hundred microseconds here) to
// each. External routers always run as plugins.
var InProcessRouters = map[string]func() (router.Router, error){
	"router-disagg":      func() (router.Router, error) { return routerdisagg.FromEnv() },
	"router-disagg-auto": disaggAuto,
	"roundrobin":         func() (router.Router, error) { return roundrobin.New(), nil },
}

// Serve serves the built-in plugin of the given kind ("engine" or "router") and name. It does not return
// unless the plugin is unknown.
func Serve(kind, name string) error {
	switch kind {
	case "engine":
		if f, ok := Engines[name]; ok {
			engine.Serve(f())
			return nil
		}
		return fmt.Errorf("no built-in engine %q (have %v)", name, names(Engines))
	case "router":
		if f, ok := Routers[name]; ok {
			router.Serve(f())
			return nil
		}
		return fmt.Errorf("no built-in router %q (have %v)", name, names(Routers))
	}
	return fmt.Errorf("unknown plugin kind %q: want engine or router", kind)
}

func names[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
