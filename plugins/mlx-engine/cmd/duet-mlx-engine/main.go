// Command duet-mlx-engine serves the MLX engine as a duet plugin. The gateway runs the same engine as its
// built-in "mlx-engine"; this binary is for running it from a path (duet --engine ./duet-mlx-engine).
package main

import (
	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

func main() {
	engine.Serve(mlxengine.New(engine.Logger()))
}
