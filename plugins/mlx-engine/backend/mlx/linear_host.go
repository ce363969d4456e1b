//go:build mlx

package mlx

/*
#include "mlx/c/mlx.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// linearHost is one linear block on MLX built from host float32 weights and run on host slices: what the tests
// and benchmarks drive, since test files cannot use cgo. Its methods run on the MLX thread themselves.
type linearHost struct {
	d      linearDims
	hidden int
	window C.mlx_dtype // the conv window's dtype
	w      linearAttn
}

// linearHostWeights are a block's weights in the row-major layouts of backendtest.LinearWeights.
type linearHostWeights struct {
	Hidden                                      int
	QKV, Z, B, A, Out, Conv, DtBias, ALog, Norm []float32
}

// newLinearHost loads w (dense float32) for d; the conv window is kept in window's dtype.
func newLinearHost(d linearDims, w *linearHostWeights, window dtype.DType) (*linearHost, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	wd, err := mlxDType(string(window))
	if err != nil {
		return nil, err
	}
	h := &linearHost{d: d, hidden: w.Hidden, window: wd}
	err = do(func() error {
		g := newGraph()
		defer g.free()
		dense := func(v []float32, out, in int) linear {
			m := g.float32s(v, out, in)
			return linear{out: out, in: in, w: m, wT: g.transpose(m, 1, 0)}
		}
		cd, vd, H := d.convDim(), d.valueDim(), w.Hidden
		for _, c := range []struct {
			name string
			v    []float32
			n    int
		}{
			{"qkv", w.QKV, cd * H}, {"z", w.Z, vd * H}, {"b", w.B, d.Nv * H}, {"a", w.A, d.Nv * H},
			{"out", w.Out, H * vd}, {"conv", w.Conv, d.K * cd}, {"dt_bias", w.DtBias, d.Nv},
			{"A_log", w.ALog, d.Nv}, {"norm", w.Norm, d.Dv},
		} {
			if len(c.v) != c.n {
				return fmt.Errorf("linear attention weights: %s has %d values, want %d", c.name, len(c.v), c.n)
			}
		}
		a := linearAttn{
			qkv: dense(w.QKV, cd, H), z: dense(w.Z, vd, H), b: dense(w.B, d.Nv, H), a: dense(w.A, d.Nv, H),
			out: dense(w.Out, H, vd), conv: g.float32s(w.Conv, d.K, cd), dtBias: g.float32s(w.DtBias, d.Nv),
			aLog: g.float32s(w.ALog, d.Nv), norm: g.float32s(w.Norm, d.Dv),
		}
		keep := []*C.mlx_array{&a.qkv.w, &a.qkv.wT, &a.z.w, &a.z.wT, &a.b.w, &a.b.wT, &a.a.w, &a.a.wT,
			&a.out.w, &a.out.wT, &a.conv, &a.dtBias, &a.aLog, &a.norm}
		if err := g.evalKeep(keep...); err != nil {
			return err
		}
		h.w = a
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// close frees the weights.
func (h *linearHost) close() {
	_ = do(func() error { h.w.free(); return nil })
}

// forward runs the T rows of each of B sequences (x: [B][T][hidden]) from the states conv ([B][K-1][convDim],
// values of the window's dtype) and s ([B][Nv][Dv][Dk]), with linearAttention's chunk, and returns the output
// ([B][T][hidden]) and the new states.
func (h *linearHost) forward(x []float32, B, T int, conv, s []float32, chunk int) (y, nextConv, nextS []float32, err error) {
	d := h.d
	if len(x) != B*T*h.hidden || len(conv) != B*(d.K-1)*d.convDim() || len(s) != B*d.Nv*d.Dv*d.Dk {
		return nil, nil, nil, fmt.Errorf("linear host: %d inputs, %d window and %d state values for %d×%d rows", len(x), len(conv), len(s), B, T)
	}
	err = do(func() error {
		g := newGraph()
		defer g.free()
		st := linearState{
			conv: g.astype(g.float32s(conv, B, d.K-1, d.convDim()), h.window),
			s:    g.float32s(s, B, d.Nv, d.Dv, d.Dk),
		}
		out, next := linearAttention(g, d, &h.w, g.float32s(x, B, T, h.hidden), st, chunk)
		res, err := g.readFloat32(out, next.conv, next.s)
		if err != nil {
			return err
		}
		y, nextConv, nextS = res[0], res[1], res[2]
		return nil
	})
	return y, nextConv, nextS, err
}

// mixBench prepares the block between its projections for one sequence of T tokens (pre-conv rows, gates and
// a non-zero state drawn from seed) and returns a function that computes it, with the given chunk, and waits
// for the result; release frees the inputs.
func (h *linearHost) mixBench(T, chunk int, seed uint64) (run func() error, release func(), err error) {
	d := h.d
	var in []C.mlx_array
	err = do(func() error {
		g := newGraph()
		defer g.free()
		r := newSplitMix(seed)
		vals := func(n int, scale float32) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = r.symmetric() * scale
			}
			return v
		}
		in = []C.mlx_array{
			g.float32s(vals(T*d.convDim(), 2), 1, T, d.convDim()), g.float32s(vals(T*d.valueDim(), 2), 1, T, d.valueDim()),
			g.float32s(vals(T*d.Nv, 3), 1, T, d.Nv), g.float32s(vals(T*d.Nv, 8), 1, T, d.Nv),
			g.astype(g.float32s(vals((d.K-1)*d.convDim(), 1), 1, d.K-1, d.convDim()), h.window),
			g.float32s(vals(d.Nv*d.Dv*d.Dk, 0.3), 1, d.Nv, d.Dv, d.Dk),
		}
		ptrs := make([]*C.mlx_array, len(in))
		for i := range in {
			ptrs[i] = &in[i]
		}
		return g.evalKeep(ptrs...)
	})
	if err != nil {
		return nil, nil, err
	}
	run = func() error {
		return do(func() error {
			g := newGraph()
			defer g.free()
			o, next := linearMix(g, d, &h.w, in[0], in[1], in[2], in[3], linearState{conv: in[4], s: in[5]}, chunk)
			if g.err != nil {
				return g.err
			}
			return evalArrays(o, next.conv, next.s)
		})
	}
	release = func() {
		_ = do(func() error {
			for i := range in {
				free(&in[i])
			}
			return nil
		})
	}
	return run, release, nil
}

// splitMix is a small deterministic generator for benchmark inputs.
type splitMix struct{ x uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{x: seed} }

// symmetric is uniform in [-1, 1).
func (r *splitMix) symmetric() float32 {
	r.x += 0x9e3779b97f4a7c15
	z := r.x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float32(z>>40)/float32(1<<23) - 1
}

// float32s is a new float32 array of v with the given shape, owned by the graph.
func (g *graph) float32s(v []float32, shape ...int) C.mlx_array {
	return g.data(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), shape, C.MLX_FLOAT32)
}

// evalKeep evaluates the arrays the pointers name and hands them from the graph to the caller.
func (g *graph) evalKeep(as ...*C.mlx_array) error {
	if g.err != nil {
		return g.err
	}
	vs := make([]C.mlx_array, len(as))
	for i, a := range as {
		vs[i] = *a
	}
	if err := evalArrays(vs...); err != nil {
		return err
	}
	for _, a := range as {
		*a = g.keep(*a)
	}
	return nil
}

// readFloat32 evaluates arrays and copies each out as float32 values, row-major.
func (g *graph) readFloat32(as ...C.mlx_array) ([][]float32, error) {
	cs := make([]C.mlx_array, len(as))
	for i, a := range as {
		cs[i] = g.contiguous(g.astype(a, C.MLX_FLOAT32))
	}
	if g.err != nil {
		return nil, g.err
	}
	if err := evalArrays(cs...); err != nil {
		return nil, err
	}
	out := make([][]float32, len(cs))
	for i, c := range cs {
		v, err := float32Data(c, int(C.mlx_array_size(c)))
		if err != nil {
			return nil, err
		}
		out[i] = append([]float32(nil), v...)
	}
	return out, nil
}
