//go:build mlx

package mlx

/*
#cgo LDFLAGS: -lmlxc
#cgo darwin,arm64 CFLAGS: -I/opt/homebrew/include
#cgo darwin,arm64 LDFLAGS: -L/opt/homebrew/lib -Wl,-rpath,/opt/homebrew/lib

// The operations write their result through a pointer to a Go stack variable and keep no pointer; none calls
// back into Go (the error handler is C).
#cgo noescape mlx_add
#cgo nocallback mlx_add
#cgo noescape mlx_multiply
#cgo nocallback mlx_multiply
#cgo noescape mlx_sigmoid
#cgo nocallback mlx_sigmoid
#cgo noescape mlx_matmul
#cgo nocallback mlx_matmul
#cgo noescape mlx_addmm
#cgo nocallback mlx_addmm
#cgo noescape mlx_quantized_matmul
#cgo nocallback mlx_quantized_matmul
#cgo noescape mlx_right_shift
#cgo nocallback mlx_right_shift
#cgo noescape mlx_bitwise_and
#cgo nocallback mlx_bitwise_and
#cgo noescape mlx_take_axis
#cgo nocallback mlx_take_axis
#cgo noescape mlx_astype
#cgo nocallback mlx_astype
#cgo noescape mlx_contiguous
#cgo nocallback mlx_contiguous
#cgo noescape mlx_concatenate_axis
#cgo nocallback mlx_concatenate_axis
#cgo noescape mlx_fast_rms_norm
#cgo nocallback mlx_fast_rms_norm
#cgo noescape mlx_fast_rope
#cgo nocallback mlx_fast_rope
#cgo noescape mlx_fast_scaled_dot_product_attention
#cgo nocallback mlx_fast_scaled_dot_product_attention
#cgo noescape mlx_array_new_data
#cgo nocallback mlx_array_new_data
#cgo noescape mlx_reshape
#cgo nocallback mlx_reshape
#cgo noescape mlx_transpose_axes
#cgo nocallback mlx_transpose_axes
#cgo noescape mlx_slice
#cgo nocallback mlx_slice
#cgo noescape mlx_slice_update
#cgo nocallback mlx_slice_update
#cgo noescape mlx_zeros
#cgo nocallback mlx_zeros
#cgo noescape mlx_vector_array_new_data
#cgo nocallback mlx_vector_array_new_data
#cgo noescape mlx_get_active_memory
#cgo nocallback mlx_get_active_memory
#cgo noescape mlx_get_peak_memory
#cgo nocallback mlx_get_peak_memory
#cgo noescape mlx_get_cache_memory
#cgo nocallback mlx_get_cache_memory
#cgo noescape mlx_get_memory_limit
#cgo nocallback mlx_get_memory_limit
#cgo noescape mlx_set_memory_limit
#cgo nocallback mlx_set_memory_limit
#cgo noescape mlx_metal_is_available
#cgo nocallback mlx_metal_is_available
#cgo noescape mlx_cuda_is_available
#cgo nocallback mlx_cuda_is_available

#include <stdlib.h>
#include <string.h>
#include "mlx/c/mlx.h"

// Every MLX call runs on one OS thread (see thread.go), so the last error can live in thread-local storage:
// the handler records it and the Go side reads it right after the call that failed.
static _Thread_local char duet_mlx_err[4096];
static _Thread_local int duet_mlx_err_set;

static void duet_mlx_on_error(const char* msg, void* data) {
	(void)data;
	strncpy(duet_mlx_err, msg, sizeof(duet_mlx_err) - 1);
	duet_mlx_err[sizeof(duet_mlx_err) - 1] = 0;
	duet_mlx_err_set = 1;
}

static void duet_mlx_install_error_handler(void) {
	mlx_set_error_handler(duet_mlx_on_error, NULL, NULL);
}

// duet_mlx_take_error copies the pending error message into buf (at most n bytes with the NUL) and clears it;
// it returns 0 when no error is pending.
static int duet_mlx_take_error(char* buf, size_t n) {
	if (!duet_mlx_err_set) {
		return 0;
	}
	strncpy(buf, duet_mlx_err, n - 1);
	buf[n - 1] = 0;
	duet_mlx_err_set = 0;
	return 1;
}

*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// errMLX wraps every error that MLX reported, so callers can tell them from validation errors.
var errMLX = errors.New("mlx")

// lastError turns the error the handler recorded into a Go error naming the operation. It is the one place
// where C errors become Go errors; it must run on the MLX thread, right after the failing call.
func lastError(op string) error {
	var buf [4096]C.char
	if C.duet_mlx_take_error(&buf[0], C.size_t(len(buf))) == 0 {
		return fmt.Errorf("%w: %s failed (no message)", errMLX, op)
	}
	msg := C.GoString(&buf[0])
	// mlx-c appends " at <source file>:<line>" of its own wrapper, which says nothing to a user.
	if i := strings.LastIndex(msg, " at /"); i > 0 {
		msg = msg[:i]
	}
	return fmt.Errorf("%w: %s: %s", errMLX, op, msg)
}

// installErrorHandler replaces MLX's default error handler, which prints and calls exit, with one that records
// the message for lastError.
func installErrorHandler() { C.duet_mlx_install_error_handler() }

// check converts the status of an mlx-c call.
func check(op string, rc C.int) error {
	if rc != 0 {
		return lastError(op)
	}
	return nil
}

// mlxDType maps the wire dtypes onto MLX's.
func mlxDType(d string) (C.mlx_dtype, error) {
	switch d {
	case "float32":
		return C.MLX_FLOAT32, nil
	case "float16":
		return C.MLX_FLOAT16, nil
	case "bfloat16":
		return C.MLX_BFLOAT16, nil
	}
	return 0, fmt.Errorf("mlx: unsupported dtype %q", d)
}

func dtypeSize(d C.mlx_dtype) int { return int(C.mlx_dtype_size(d)) }

// newArray copies raw little-endian element bytes into a new MLX array of the given shape and dtype. The
// caller owns the result.
func newArray(data []byte, shape []int, d C.mlx_dtype) (C.mlx_array, error) {
	n := dtypeSize(d)
	for _, s := range shape {
		n *= s
	}
	if n != len(data) {
		return C.mlx_array{}, fmt.Errorf("mlx: %d bytes for shape %v of %d-byte elements", len(data), shape, dtypeSize(d))
	}
	if len(shape) > 8 {
		return C.mlx_array{}, fmt.Errorf("mlx: %d dimensions", len(shape))
	}
	var cs [8]C.int
	for i, s := range shape {
		cs[i] = C.int(s)
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	a := C.mlx_array_new_data(p, &cs[0], C.int(len(shape)), d)
	if a.ctx == nil {
		return a, lastError("array_new_data")
	}
	return a, nil
}

// free releases an array handle; the zero handle is ignored.
func free(a *C.mlx_array) {
	if a.ctx != nil {
		C.mlx_array_free(*a)
		a.ctx = nil
	}
}

// evalArrays evaluates arrays and waits for them.
func evalArrays(as ...C.mlx_array) error {
	v := C.mlx_vector_array_new_data(&as[0], C.size_t(len(as)))
	defer C.mlx_vector_array_free(v)
	return check("eval", C.mlx_eval(v))
}

// asyncEvalArrays schedules arrays for evaluation and returns at once.
func asyncEvalArrays(as ...C.mlx_array) error {
	v := C.mlx_vector_array_new_data(&as[0], C.size_t(len(as)))
	defer C.mlx_vector_array_free(v)
	return check("async_eval", C.mlx_async_eval(v))
}

// copyOut copies the bytes of an evaluated, row-contiguous array into dst, which must hold exactly nbytes.
func copyOut(a C.mlx_array, dst []byte) error {
	n := int(C.mlx_array_nbytes(a))
	if n != len(dst) {
		return fmt.Errorf("mlx: array of %d bytes into a buffer of %d", n, len(dst))
	}
	if n == 0 {
		return nil
	}
	p := C.mlx_array_data_uint8(a)
	if p == nil {
		return lastError("array_data")
	}
	copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(p)), n))
	return nil
}

// float32Data returns the elements of an evaluated, row-contiguous float32 array of n elements, in MLX's
// memory: valid until the array is freed.
func float32Data(a C.mlx_array, n int) ([]float32, error) {
	if C.mlx_array_dtype(a) != C.MLX_FLOAT32 || int(C.mlx_array_size(a)) != n {
		return nil, fmt.Errorf("mlx: want %d float32 values, have %d of dtype %d", n, int(C.mlx_array_size(a)), int(C.mlx_array_dtype(a)))
	}
	if n == 0 {
		return nil, nil
	}
	p := C.mlx_array_data_float32(a)
	if p == nil {
		return nil, lastError("array_data")
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), n), nil
}

// version is the MLX version mlx-c was built against.
func version() string {
	s := C.mlx_string_new()
	defer C.mlx_string_free(s)
	if C.mlx_version(&s) != 0 {
		return "unknown"
	}
	return C.GoString(C.mlx_string_data(s))
}

// dtFloat32 is MLX's float32, for code (and tests, which cannot use cgo) that needs it by name.
const dtFloat32 = C.MLX_FLOAT32

// dataAddress is where an evaluated array's elements start (0 for an empty handle): two handles with the same
// address share a buffer.
func dataAddress(a C.mlx_array) uintptr {
	if a.ctx == nil || C.mlx_array_eval(a) != 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(C.mlx_array_data_uint8(a)))
}
