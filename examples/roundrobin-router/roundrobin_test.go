package roundrobin_test

import (
	"os"
	"testing"

	roundrobin "github.com/duet-ai/duet/examples/roundrobin-router"
	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

func TestMain(m *testing.M) {
	routertest.ServePluginIfRequested(func() router.Router { return roundrobin.New() })
	os.Exit(m.Run())
}

func TestConformanceInProcess(t *testing.T) { routertest.Run(t, roundrobin.New()) }

func TestConformanceSubprocess(t *testing.T) { routertest.RunPlugin(t, routertest.PluginCommand(t)) }
