package mlxengine_test

import (
	"os"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
)

func TestMain(m *testing.M) {
	enginetest.ServePluginIfRequested(func() engine.Engine { return mlxengine.New(engine.Logger()) })
	os.Exit(m.Run())
}

func TestConformanceInProcess(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	enginetest.Run(t, e, enginetest.Config{Model: mlxengine.EmbeddedModel, MaxTokens: 24})
}

func TestConformanceSubprocess(t *testing.T) {
	enginetest.RunPlugin(t, enginetest.PluginCommand(t), enginetest.Config{Model: mlxengine.EmbeddedModel, MaxTokens: 24})
}
