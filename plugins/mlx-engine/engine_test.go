package mlxengine_test

import (
	"context"
	"os"
	"runtime"
	"strings"
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

// TestOverlongPromptsAreCheap: a prompt far over the context is refused with context_length_exceeded at a cost
// bounded by the context, not the prompt's length, both when the tokenizer bounds the bytes per token (the
// length alone decides) and when only tokenizing can tell (a prompt just under that bound). Before, the engine
// tokenized all of it: one 10 MB prompt took it from 101 MB to 864 MB.
func TestOverlongPromptsAreCheap(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	desc, err := e.Load(context.Background(), engine.LoadRequest{InstanceID: "i", Model: mlxengine.EmbeddedModel})
	if err != nil {
		t.Fatal(err)
	}
	if desc.MaxBytesPerToken <= 0 {
		t.Fatalf("the embedded model's tokenizer bounds its bytes per token, but MaxBytesPerToken is %d", desc.MaxBytesPerToken)
	}
	words := "the sea is wide and the night is long "
	for _, c := range []struct {
		name  string
		bytes int
	}{
		{"10 MB", 10 << 20},
		{"just under the byte bound", desc.ContextLength*desc.MaxBytesPerToken - 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			prompt := strings.Repeat(words, c.bytes/len(words))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := e.Generate(context.Background(), engine.GenerateRequest{InstanceID: "i",
				Messages: []engine.Message{{Role: "user", Content: prompt}}}, func(engine.Event) error { return nil })
			runtime.ReadMemStats(&after)
			if engine.CodeOf(err) != engine.CodeContextLength {
				t.Fatalf("got %v, want context_length_exceeded", err)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte prompt: %v; %d KB allocated", len(prompt), err, allocated>>10)
			// Rendering the template copies the prompt once; tokenizing may cost what the context holds.
			if limit := uint64(2*len(prompt)) + 16<<20; allocated > limit {
				t.Errorf("refusing it allocated %d MB, want at most %d MB", allocated>>20, limit>>20)
			}
			_, err = e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: "i", Prompt: prompt})
			if engine.CodeOf(err) != engine.CodeContextLength {
				t.Errorf("Tokenize: got %v, want context_length_exceeded", err)
			}
		})
	}
}
