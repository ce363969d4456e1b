//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
)

// The MLX thread. MLX keeps per-thread state (default streams, the Metal command encoders, the error handler's
// last message here), so every call into MLX runs on one goroutine locked to one OS thread for the life of the
// process; other goroutines hand it closures with do. Closures run one at a time, in the order they arrive.

type call struct {
	fn   func() error
	done chan error
}

var (
	startOnce sync.Once
	calls     chan call
	device    deviceInfo // written on the MLX thread before the first call runs; read-only afterwards
	startErr  error
)

// deviceInfo is what the MLX thread chose at start.
type deviceInfo struct {
	gpu     bool   // a Metal or CUDA GPU
	kind    string // "cpu", "metal" or "cuda"
	stream  C.mlx_stream
	version string
}

// do runs fn on the MLX thread and returns its error. fn must not call do (it would wait for itself).
func do(fn func() error) error {
	startOnce.Do(start)
	if startErr != nil {
		return startErr
	}
	c := call{fn: fn, done: make(chan error, 1)}
	calls <- c
	return <-c.done
}

func start() {
	ready := make(chan error)
	calls = make(chan call)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread belongs to MLX
		err := setup()
		ready <- err
		if err != nil {
			return
		}
		for c := range calls {
			c.done <- run(c.fn)
		}
	}()
	startErr = <-ready
}

// run calls fn, turning a panic into an error so that the MLX thread survives a bug in one request.
func run(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mlx: internal error: %v", r)
		}
	}()
	return fn()
}

// setup installs the error handler (MLX's default one calls exit) and picks the device: a GPU when MLX was
// built with Metal or CUDA and one is present, the CPU otherwise. DUET_MLX_DEVICE=cpu or gpu overrides the
// choice; DUET_MLX_MEMORY_LIMIT sets the memory limit (see SetMemoryLimit).
func setup() error {
	installErrorHandler()
	device.version = version()
	var metal, cuda C.bool
	if C.mlx_metal_is_available(&metal) != 0 {
		metal = false
	}
	if C.mlx_cuda_is_available(&cuda) != 0 {
		cuda = false
	}
	gpu := bool(metal) || bool(cuda)
	switch want := strings.ToLower(os.Getenv("DUET_MLX_DEVICE")); want {
	case "", "auto":
	case "cpu":
		gpu = false
	case "gpu":
		if !gpu {
			return fmt.Errorf("mlx: DUET_MLX_DEVICE=gpu, but this MLX build has no usable Metal or CUDA device")
		}
	default:
		return fmt.Errorf("mlx: DUET_MLX_DEVICE=%q: want cpu, gpu or auto", want)
	}
	device.gpu = gpu
	device.kind = "cpu"
	var dev C.mlx_device
	if gpu {
		device.kind = "metal"
		if cuda {
			device.kind = "cuda"
		}
		dev = C.mlx_device_new_type(C.MLX_GPU, 0)
		device.stream = C.mlx_default_gpu_stream_new()
	} else {
		dev = C.mlx_device_new_type(C.MLX_CPU, 0)
		device.stream = C.mlx_default_cpu_stream_new()
	}
	defer C.mlx_device_free(dev)
	if err := check("set_default_device", C.mlx_set_default_device(dev)); err != nil {
		return err
	}
	var limit C.size_t
	if err := check("get_memory_limit", C.mlx_get_memory_limit(&limit)); err != nil {
		return err
	}
	defaultLimit = uint64(limit)
	if v := os.Getenv("DUET_MLX_MEMORY_LIMIT"); v != "" {
		n, err := parseBytes(v)
		if err != nil {
			return fmt.Errorf("mlx: DUET_MLX_MEMORY_LIMIT: %w", err)
		}
		if err := setMemoryLimit(n); err != nil {
			return err
		}
	}
	return nil
}
