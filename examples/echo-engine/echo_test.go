package echo_test

import (
	"os"
	"testing"

	echo "github.com/duet-ai/duet/examples/echo-engine"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
)

func TestMain(m *testing.M) {
	enginetest.ServePluginIfRequested(func() engine.Engine { return echo.New() })
	os.Exit(m.Run())
}

func TestConformanceInProcess(t *testing.T) {
	enginetest.Run(t, echo.New(), enginetest.Config{Model: "echo"})
}

func TestConformanceSubprocess(t *testing.T) {
	enginetest.RunPlugin(t, enginetest.PluginCommand(t), enginetest.Config{Model: "echo"})
}
