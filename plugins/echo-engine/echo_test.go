package echo_test

import (
	"context"
	"os"
	"testing"

	echo "github.com/duet-ai/duet/plugins/echo-engine"
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

func TestLoadContextLength(t *testing.T) {
	t.Parallel()
	e := echo.New()
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: "m", Options: map[string]string{"context_length": "4096"}})
	if err != nil || d.ContextLength != 4096 {
		t.Fatalf("context_length 4096: %+v, %v", d.ContextLength, err)
	}
	for _, bad := range []string{"0", "-1", "big"} {
		if _, err := e.Load(context.Background(), engine.LoadRequest{Model: "m", Options: map[string]string{"context_length": bad}}); err == nil {
			t.Errorf("context_length %q loaded", bad)
		}
	}
}
