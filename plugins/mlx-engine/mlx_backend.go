//go:build mlx

package mlxengine

// Builds with the mlx tag include the MLX backend; backend=auto then picks it.
import _ "github.com/duet-ai/duet/plugins/mlx-engine/backend/mlx" // registers "mlx"
