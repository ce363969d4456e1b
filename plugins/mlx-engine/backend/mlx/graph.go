//go:build mlx

package mlx

/*
#include "mlx/c/mlx.h"

static mlx_optional_int duet_some_int(int v) {
	mlx_optional_int o = {v, true};
	return o;
}

static mlx_optional_dtype duet_some_dtype(mlx_dtype d) {
	mlx_optional_dtype o = {d, true};
	return o;
}

static mlx_optional_float duet_no_float(void) {
	mlx_optional_float o = {0, false};
	return o;
}

static mlx_array duet_null_array(void) {
	mlx_array a = {0};
	return a;
}
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// graph builds MLX computations lazily. It owns every array it creates (the temporaries of one step) until
// free, except those handed over with keep; the first failing operation records its error and turns every later
// operation into a no-op, so building code reads straight and checks g.err once.
//
// Ownership rule of the package: an array handle has exactly one owner. Weights belong to the model, the K/V
// buffers to their cache, everything else to the graph of the step that made it.
type graph struct {
	s   C.mlx_stream
	tmp []C.mlx_array
	err error
	// With timed set (benchmarks), inC accumulates the time spent inside mlx-c calls, from clock to track.
	timed bool
	t0    time.Time
	inC   time.Duration
}

func newGraph() *graph { return &graph{s: device.stream} }

// clock marks the start of an mlx-c call when the graph is timed.
func (g *graph) clock() {
	if g.timed {
		g.t0 = time.Now()
	}
}

// track takes ownership of the result of an mlx-c call.
func (g *graph) track(op string, rc C.int, r C.mlx_array) C.mlx_array {
	if g.timed {
		g.inC += time.Since(g.t0)
	}
	if rc != 0 {
		if g.err == nil {
			g.err = lastError(op)
		}
		if r.ctx != nil {
			C.mlx_array_free(r)
		}
		return C.duet_null_array()
	}
	g.tmp = append(g.tmp, r)
	return r
}

// op runs one mlx-c call that writes its result through r, unless an earlier call of the graph failed, and
// takes ownership of the result.
func (g *graph) op(name string, call func(r *C.mlx_array) C.int) C.mlx_array {
	if g.err != nil {
		return C.duet_null_array()
	}
	g.clock()
	var r C.mlx_array
	return g.track(name, call(&r), r)
}

// keep hands a to the caller, who becomes responsible for freeing it.
func (g *graph) keep(a C.mlx_array) C.mlx_array {
	for i := len(g.tmp) - 1; i >= 0; i-- {
		if g.tmp[i].ctx == a.ctx {
			g.tmp[i] = g.tmp[len(g.tmp)-1]
			g.tmp = g.tmp[:len(g.tmp)-1]
			break
		}
	}
	return a
}

// free releases every array the graph still owns. Evaluated results the caller kept stay valid.
func (g *graph) free() {
	g.clock()
	for i := range g.tmp {
		C.mlx_array_free(g.tmp[i])
	}
	g.tmp = g.tmp[:0]
	if g.timed {
		g.inC += time.Since(g.t0)
	}
}

func cints(dst []C.int, v []int) []C.int {
	for i, x := range v {
		dst[i] = C.int(x)
	}
	return dst[:len(v)]
}

// data copies raw bytes into a new array owned by the graph.
func (g *graph) data(b []byte, shape []int, d C.mlx_dtype) C.mlx_array {
	if g.err != nil {
		return C.duet_null_array()
	}
	g.clock()
	a, err := newArray(b, shape, d)
	if g.timed {
		g.inC += time.Since(g.t0)
	}
	if err != nil {
		g.err = err
		return C.duet_null_array()
	}
	g.tmp = append(g.tmp, a)
	return a
}

// int32s is a 1-D int32 array of v.
func (g *graph) int32s(v []int32) C.mlx_array {
	return g.data(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), []int{len(v)}, C.MLX_INT32)
}

func (g *graph) zeros(shape []int, d C.mlx_dtype) C.mlx_array {
	var cs [8]C.int
	sh := cints(cs[:], shape)
	return g.op("zeros", func(r *C.mlx_array) C.int {
		return C.mlx_zeros(r, &sh[0], C.size_t(len(sh)), d, g.s)
	})
}

func (g *graph) add(a, b C.mlx_array) C.mlx_array {
	return g.op("add", func(r *C.mlx_array) C.int {
		return C.mlx_add(r, a, b, g.s)
	})
}

func (g *graph) multiply(a, b C.mlx_array) C.mlx_array {
	return g.op("multiply", func(r *C.mlx_array) C.int {
		return C.mlx_multiply(r, a, b, g.s)
	})
}

func (g *graph) sigmoid(a C.mlx_array) C.mlx_array {
	return g.op("sigmoid", func(r *C.mlx_array) C.int {
		return C.mlx_sigmoid(r, a, g.s)
	})
}

// matmul is a·b.
func (g *graph) matmul(a, b C.mlx_array) C.mlx_array {
	return g.op("matmul", func(r *C.mlx_array) C.int {
		return C.mlx_matmul(r, a, b, g.s)
	})
}

// addmm is c + a·b.
func (g *graph) addmm(c, a, b C.mlx_array) C.mlx_array {
	return g.op("addmm", func(r *C.mlx_array) C.int {
		return C.mlx_addmm(r, c, a, b, 1, 1, g.s)
	})
}

// quantizedMatmul is x·dequantize(w)ᵀ for MLX-quantized w (affine, or mxfp4 with uint8 scales and no biases).
func (g *graph) quantizedMatmul(x, w, scales, biases C.mlx_array, q *model.QuantParams) C.mlx_array {
	return g.op("quantized_matmul", func(r *C.mlx_array) C.int {
		return C.mlx_quantized_matmul(r, x, w, scales, biases, true,
			C.duet_some_int(C.int(q.GroupSize)), C.duet_some_int(C.int(q.Bits)), quantMode(q), g.s)
	})
}

// dequantize expands MLX-quantized w (affine or mxfp4) to dtype d.
func (g *graph) dequantize(w, scales, biases C.mlx_array, q *model.QuantParams, d C.mlx_dtype) C.mlx_array {
	return g.op("dequantize", func(r *C.mlx_array) C.int {
		return C.mlx_dequantize(r, w, scales, biases, C.duet_some_int(C.int(q.GroupSize)),
			C.duet_some_int(C.int(q.Bits)), quantMode(q), C.duet_null_array(), C.duet_some_dtype(d), g.s)
	})
}

// quantMode is q's mode as MLX names it.
func quantMode(q *model.QuantParams) *C.char {
	if q.Mode == model.ModeMXFP4 {
		return cMXFP4
	}
	return cAffine
}

// rightShift is a >> b elementwise (unsigned for uint32).
func (g *graph) rightShift(a, b C.mlx_array) C.mlx_array {
	return g.op("right_shift", func(r *C.mlx_array) C.int {
		return C.mlx_right_shift(r, a, b, g.s)
	})
}

func (g *graph) bitwiseAnd(a, b C.mlx_array) C.mlx_array {
	return g.op("bitwise_and", func(r *C.mlx_array) C.int {
		return C.mlx_bitwise_and(r, a, b, g.s)
	})
}

// take gathers the rows of a (axis 0) named by the int32 indices.
func (g *graph) take(a, indices C.mlx_array) C.mlx_array {
	return g.op("take", func(r *C.mlx_array) C.int {
		return C.mlx_take_axis(r, a, indices, 0, g.s)
	})
}

func (g *graph) reshape(a C.mlx_array, shape ...int) C.mlx_array {
	var cs [8]C.int
	sh := cints(cs[:], shape)
	return g.op("reshape", func(r *C.mlx_array) C.int {
		return C.mlx_reshape(r, a, &sh[0], C.size_t(len(sh)), g.s)
	})
}

func (g *graph) transpose(a C.mlx_array, axes ...int) C.mlx_array {
	var cs [8]C.int
	ax := cints(cs[:], axes)
	return g.op("transpose", func(r *C.mlx_array) C.int {
		return C.mlx_transpose_axes(r, a, &ax[0], C.size_t(len(ax)), g.s)
	})
}

var ones = [8]C.int{1, 1, 1, 1, 1, 1, 1, 1}

// slice is a[start:stop] with unit strides.
func (g *graph) slice(a C.mlx_array, start, stop []int) C.mlx_array {
	var c0, c1 [8]C.int
	s0, s1 := cints(c0[:], start), cints(c1[:], stop)
	return g.op("slice", func(r *C.mlx_array) C.int {
		return C.mlx_slice(r, a, &s0[0], C.size_t(len(s0)), &s1[0], C.size_t(len(s1)),
			&ones[0], C.size_t(len(s0)), g.s)
	})
}

// sliceUpdate is a copy of src with src[start:stop] = update. MLX writes in place when src is referenced by
// nothing but this operation, which is why caches drop their handle to the old buffer before evaluating.
func (g *graph) sliceUpdate(src, update C.mlx_array, start, stop []int) C.mlx_array {
	var c0, c1 [8]C.int
	s0, s1 := cints(c0[:], start), cints(c1[:], stop)
	return g.op("slice_update", func(r *C.mlx_array) C.int {
		return C.mlx_slice_update(r, src, update, &s0[0], C.size_t(len(s0)), &s1[0],
			C.size_t(len(s1)), &ones[0], C.size_t(len(s0)), g.s)
	})
}

func (g *graph) astype(a C.mlx_array, d C.mlx_dtype) C.mlx_array {
	if g.err == nil && C.mlx_array_dtype(a) == d {
		return a
	}
	return g.op("astype", func(r *C.mlx_array) C.int {
		return C.mlx_astype(r, a, d, g.s)
	})
}

func (g *graph) contiguous(a C.mlx_array) C.mlx_array {
	return g.op("contiguous", func(r *C.mlx_array) C.int {
		return C.mlx_contiguous(r, a, false, g.s)
	})
}

// concat joins arrays along axis.
func (g *graph) concat(axis int, as ...C.mlx_array) C.mlx_array {
	return g.op("concatenate", func(r *C.mlx_array) C.int {
		v := C.mlx_vector_array_new_data(&as[0], C.size_t(len(as)))
		defer C.mlx_vector_array_free(v)
		return C.mlx_concatenate_axis(r, v, C.int(axis), g.s)
	})
}

// rmsNorm normalises the last axis of x and scales it by w.
func (g *graph) rmsNorm(x, w C.mlx_array, eps float32) C.mlx_array {
	return g.op("fast_rms_norm", func(r *C.mlx_array) C.int {
		return C.mlx_fast_rms_norm(r, x, w, C.float(eps), g.s)
	})
}

// rope rotates x [B, heads, T, head_dim] for positions offset..offset+T-1 in the Hugging Face layout (element i
// pairs with i+head_dim/2), with the given per-pair periods (1/θ_i).
func (g *graph) rope(x C.mlx_array, dims, offset int, freqs C.mlx_array) C.mlx_array {
	return g.op("fast_rope", func(r *C.mlx_array) C.int {
		return C.mlx_fast_rope(r, x, C.int(dims), false, C.duet_no_float(), 1, C.int(offset), freqs, g.s)
	})
}

// attention is softmax(q·kᵀ·scale)·v with as many KV heads as k and v have (GQA): q holds the last T of the S
// positions of k and v. It is causal when asked; a mask (bool [T, S], true where a key is visible) replaces the
// causal rule when given (sliding windows). sinks ([heads], may be a zero handle) join each head's softmax as
// one more logit whose probability is dropped.
func (g *graph) attention(q, k, v C.mlx_array, scale float32, causal bool, mask, sinks C.mlx_array) C.mlx_array {
	mode := cNoMask
	switch {
	case mask.ctx != nil:
		mode = cArrayMask
	case causal:
		mode = cCausal
	}
	return g.op("fast_scaled_dot_product_attention", func(r *C.mlx_array) C.int {
		return C.mlx_fast_scaled_dot_product_attention(r, q, k, v,
			C.float(scale), mode, mask, sinks, g.s)
	})
}

func (g *graph) tanh(a C.mlx_array) C.mlx_array {
	return g.op("tanh", func(r *C.mlx_array) C.int {
		return C.mlx_tanh(r, a, g.s)
	})
}

func (g *graph) minimum(a, b C.mlx_array) C.mlx_array {
	return g.op("minimum", func(r *C.mlx_array) C.int {
		return C.mlx_minimum(r, a, b, g.s)
	})
}

// clip is a clamped to [lo, hi].
func (g *graph) clip(a, lo, hi C.mlx_array) C.mlx_array {
	return g.op("clip", func(r *C.mlx_array) C.int {
		return C.mlx_clip(r, a, lo, hi, g.s)
	})
}

func (g *graph) negative(a C.mlx_array) C.mlx_array {
	return g.op("negative", func(r *C.mlx_array) C.int {
		return C.mlx_negative(r, a, g.s)
	})
}

// Elementwise binary operations (with broadcasting).

func (g *graph) greater(a, b C.mlx_array) C.mlx_array {
	return g.op("greater", func(r *C.mlx_array) C.int {
		return C.mlx_greater(r, a, b, g.s)
	})
}

func (g *graph) equal(a, b C.mlx_array) C.mlx_array {
	return g.op("equal", func(r *C.mlx_array) C.int {
		return C.mlx_equal(r, a, b, g.s)
	})
}

func (g *graph) subtract(a, b C.mlx_array) C.mlx_array {
	return g.op("subtract", func(r *C.mlx_array) C.int {
		return C.mlx_subtract(r, a, b, g.s)
	})
}

func (g *graph) lessEqual(a, b C.mlx_array) C.mlx_array {
	return g.op("less_equal", func(r *C.mlx_array) C.int {
		return C.mlx_less_equal(r, a, b, g.s)
	})
}

func (g *graph) logicalOr(a, b C.mlx_array) C.mlx_array {
	return g.op("logical_or", func(r *C.mlx_array) C.int {
		return C.mlx_logical_or(r, a, b, g.s)
	})
}

func (g *graph) logicalAnd(a, b C.mlx_array) C.mlx_array {
	return g.op("logical_and", func(r *C.mlx_array) C.int {
		return C.mlx_logical_and(r, a, b, g.s)
	})
}

func (g *graph) divide(a, b C.mlx_array) C.mlx_array {
	return g.op("divide", func(r *C.mlx_array) C.int {
		return C.mlx_divide(r, a, b, g.s)
	})
}

// broadcastTo is a broadcast to shape.
func (g *graph) broadcastTo(a C.mlx_array, shape ...int) C.mlx_array {
	var cs [8]C.int
	sh := cints(cs[:], shape)
	return g.op("broadcast_to", func(r *C.mlx_array) C.int {
		return C.mlx_broadcast_to(r, a, &sh[0], C.size_t(len(sh)), g.s)
	})
}

// where is cond ? a : b elementwise.
func (g *graph) where(cond, a, b C.mlx_array) C.mlx_array {
	return g.op("where", func(r *C.mlx_array) C.int {
		return C.mlx_where(r, cond, a, b, g.s)
	})
}

// softmax is the softmax over the last axis, computed in float32 whatever a's dtype (precise).
func (g *graph) softmax(a C.mlx_array) C.mlx_array {
	return g.op("softmax", func(r *C.mlx_array) C.int {
		return C.mlx_softmax_axis(r, a, -1, true, g.s)
	})
}

// topk is the k largest values along the last axis, in no particular order.
func (g *graph) topk(a C.mlx_array, k int) C.mlx_array {
	return g.op("topk", func(r *C.mlx_array) C.int {
		return C.mlx_topk_axis(r, a, C.int(k), -1, g.s)
	})
}

// minAxis is the minimum along axis, kept as a dimension of 1.
func (g *graph) minAxis(a C.mlx_array, axis int) C.mlx_array {
	return g.op("min", func(r *C.mlx_array) C.int {
		return C.mlx_min_axis(r, a, C.int(axis), true, g.s)
	})
}

// sumAxis is the sum along axis, kept as a dimension of 1.
func (g *graph) sumAxis(a C.mlx_array, axis int) C.mlx_array {
	return g.op("sum", func(r *C.mlx_array) C.int {
		return C.mlx_sum_axis(r, a, C.int(axis), true, g.s)
	})
}

// cumsum is the inclusive running sum along axis.
func (g *graph) cumsum(a C.mlx_array, axis int) C.mlx_array {
	return g.op("cumsum", func(r *C.mlx_array) C.int {
		return C.mlx_cumsum(r, a, C.int(axis), false, true, g.s)
	})
}

// argsort is the indices (uint32) that sort a along axis.
func (g *graph) argsort(a C.mlx_array, axis int) C.mlx_array {
	return g.op("argsort", func(r *C.mlx_array) C.int {
		return C.mlx_argsort_axis(r, a, C.int(axis), g.s)
	})
}

// takeAlong gathers a's elements along axis at indices (of a's rank).
func (g *graph) takeAlong(a, indices C.mlx_array, axis int) C.mlx_array {
	return g.op("take_along_axis", func(r *C.mlx_array) C.int {
		return C.mlx_take_along_axis(r, a, indices, C.int(axis), g.s)
	})
}

// gatherMM is a·b[ids] batched: a [..., M, K] broadcast against ids' shape, b [E, K, N]; sorted says that ids
// are in ascending order.
func (g *graph) gatherMM(a, b, ids C.mlx_array, sorted bool) C.mlx_array {
	return g.op("gather_mm", func(r *C.mlx_array) C.int {
		return C.mlx_gather_mm(r, a, b, C.duet_null_array(), ids, C.bool(sorted), g.s)
	})
}

// gatherQMM is x·dequantize(w[ids])ᵀ for MLX-quantized stacked w [E, N, K*bits/32] (affine or mxfp4).
func (g *graph) gatherQMM(x, w, scales, biases, ids C.mlx_array, q *model.QuantParams, sorted bool) C.mlx_array {
	return g.op("gather_qmm", func(r *C.mlx_array) C.int {
		return C.mlx_gather_qmm(r, x, w, scales, biases, C.duet_null_array(), ids, true,
			C.duet_some_int(C.int(q.GroupSize)), C.duet_some_int(C.int(q.Bits)), quantMode(q), C.bool(sorted), g.s)
	})
}

// Constant C strings, allocated once.
var (
	cAffine    = C.CString("affine")
	cMXFP4     = C.CString("mxfp4")
	cCausal    = C.CString("causal")
	cNoMask    = C.CString("")
	cArrayMask = C.CString("array")
)

// shape returns the dimensions of a.
func shape(a C.mlx_array) []int {
	n := int(C.mlx_array_ndim(a))
	if n == 0 {
		return nil
	}
	p := unsafe.Slice(C.mlx_array_shape(a), n)
	out := make([]int, n)
	for i, d := range p {
		out[i] = int(d)
	}
	return out
}
