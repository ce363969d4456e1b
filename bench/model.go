package bench

import (
	"fmt"
	"path/filepath"

	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// Generated models the local clusters can serve by name, besides what duet's --model takes (embedded, a
// directory, a Hugging Face id).
var generatedModels = map[string]struct {
	about string
	opts  func() modelgen.Options
}{
	// pd-bench is plugins/mlx-engine's P/D benchmark model (modelgen.PDBench).
	"pd-bench": {"a generated Llama-family model, 4 layers of width 256, 2 KV heads, bf16, 16k context (plugins/mlx-engine's P/D benchmark model)", modelgen.PDBench},
	// tiny is modelgen's test model with room for long streams: for quick checks of the benchmark itself.
	"tiny": {"modelgen's tiny test model (2 layers of width 64, float32) with an 8k context", func() modelgen.Options {
		o := modelgen.Tiny()
		o.MaxPositionEmbeddings = 8192
		return o
	}},
	"bench100m": {"modelgen's ~100M-parameter float32 benchmark model", modelgen.Bench100M},
}

// localModel resolves --model for a local cluster: a generated model by name is written under dir; anything
// else goes to duet as it is.
func localModel(name, dir string) (string, string, error) {
	g, ok := generatedModels[name]
	if !ok {
		return name, name, nil
	}
	path := filepath.Join(dir, "model-"+name)
	if err := modelgen.Generate(path, g.opts()); err != nil {
		return "", "", fmt.Errorf("generating the %s model: %w", name, err)
	}
	return path, name + ": " + g.about, nil
}
