//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// MemoryStats are MLX's allocator figures, in bytes.
type MemoryStats struct {
	// Active is the memory held by live arrays (weights, KV caches, in-flight activations).
	Active uint64
	// Peak is the highest Active since the process started or ResetPeakMemory.
	Peak uint64
	// Cache is memory MLX keeps for reuse after arrays are freed.
	Cache uint64
	// Limit is MLX's memory limit (see SetMemoryLimit).
	Limit uint64
}

// Memory returns MLX's current memory figures.
func Memory() (MemoryStats, error) {
	var st MemoryStats
	err := do(func() error {
		var active, peak, cache, limit C.size_t
		for _, q := range []struct {
			name string
			rc   C.int
		}{
			{"get_active_memory", C.mlx_get_active_memory(&active)},
			{"get_peak_memory", C.mlx_get_peak_memory(&peak)},
			{"get_cache_memory", C.mlx_get_cache_memory(&cache)},
			{"get_memory_limit", C.mlx_get_memory_limit(&limit)},
		} {
			if err := check(q.name, q.rc); err != nil {
				return err
			}
		}
		st = MemoryStats{Active: uint64(active), Peak: uint64(peak), Cache: uint64(cache), Limit: uint64(limit)}
		return nil
	})
	return st, err
}

// ResetPeakMemory starts a new measurement of MemoryStats.Peak.
func ResetPeakMemory() error {
	return do(func() error { return check("reset_peak_memory", C.mlx_reset_peak_memory()) })
}

// ClearCache returns the memory MLX keeps for reuse to the system.
func ClearCache() error {
	return do(func() error { return check("clear_cache", C.mlx_clear_cache()) })
}

// userLimit is the memory limit set through SetMemoryLimit or DUET_MLX_MEMORY_LIMIT; 0: none.
var userLimit atomic.Uint64

// SetMemoryLimit sets MLX's memory limit in bytes (0 restores MLX's default) and makes the backend refuse, with
// an error, to allocate KV cache memory that would take the active memory past it. MLX itself treats the limit
// as a hint for scheduling (it waits for running work to finish before allocating past it), so the backend's
// check is what turns "too many long sequences" into a failed request instead of swapping. The environment
// variable DUET_MLX_MEMORY_LIMIT (bytes, or with a KiB/MiB/GiB suffix) sets it at start.
func SetMemoryLimit(bytes uint64) error {
	return do(func() error { return setMemoryLimit(bytes) })
}

func setMemoryLimit(bytes uint64) error {
	limit := bytes
	if limit == 0 {
		limit = defaultLimit
	}
	var prev C.size_t
	if err := check("set_memory_limit", C.mlx_set_memory_limit(&prev, C.size_t(limit))); err != nil {
		return err
	}
	userLimit.Store(bytes)
	return nil
}

// defaultLimit is MLX's own memory limit, read when the MLX thread starts.
var defaultLimit uint64

// errMemoryLimit is returned when a KV cache would grow past the memory limit.
var errMemoryLimit = errors.New("mlx: memory limit reached")

// checkMemory fails when allocating more bytes would pass the user's memory limit. It runs on the MLX thread.
func checkMemory(more int64) error {
	limit := userLimit.Load()
	if limit == 0 || more <= 0 {
		return nil
	}
	var active C.size_t
	if err := check("get_active_memory", C.mlx_get_active_memory(&active)); err != nil {
		return err
	}
	if uint64(active)+uint64(more) > limit {
		return fmt.Errorf("%w: %d bytes active + %d more for KV cache > limit %d", errMemoryLimit, uint64(active), more, limit)
	}
	return nil
}

// parseBytes reads "1073741824", "1024MiB", "8GiB", "512MB" (MB and GB are read as MiB and GiB).
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	if n > (1<<63)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// Metrics reports MLX's memory figures under the names the engine's stats use ("mlx_active_memory_bytes",
// "mlx_peak_memory_bytes", "mlx_cache_memory_bytes", "mlx_memory_limit_bytes"). The figures are process-wide:
// every model in the process shares MLX's allocator.
func (m *mlxModel) Metrics() map[string]float64 {
	st, err := Memory()
	if err != nil {
		return nil
	}
	return map[string]float64{
		"mlx_active_memory_bytes": float64(st.Active),
		"mlx_peak_memory_bytes":   float64(st.Peak),
		"mlx_cache_memory_bytes":  float64(st.Cache),
		"mlx_memory_limit_bytes":  float64(st.Limit),
	}
}
