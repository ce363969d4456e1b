package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// TestStoredMXFP4IsExact: an mxfp4 matrix kept as stored gives, on every kernel path, the bits of the float32
// kernels over its expanded rows, through the path's decode kernels: four rows at a time with a repeated-row
// tail, odd ranges of rows, and batches of input rows. A subnormal scale (e8m0 0) and a large one are in.
func TestStoredMXFP4IsExact(t *testing.T) { forPaths(t, testStoredMXFP4IsExact) }

func testStoredMXFP4IsExact(t *testing.T, k kernelPath) {
	r := rand.New(rand.NewPCG(7, 8))
	const in, out, rows = 256, 11, 11 // 11 input rows: a full batch tile of 8 and a tail
	packed := make([]byte, out*in/2)
	for i := range packed {
		packed[i] = byte(r.Uint32())
	}
	scales := make([]byte, out*in/32)
	for i := range scales {
		scales[i] = byte(120 + r.IntN(12))
	}
	scales[0], scales[1] = 0, 250 // a subnormal scale and a large one
	l := &model.Linear{Name: "w", Out: out, In: in,
		Weight: &safetensors.Tensor{Name: "w.weight", DType: safetensors.U32, Shape: []int{out, in / 8}, Data: packed},
		Quant: &model.Quant{QuantParams: model.QuantParams{GroupSize: 32, Bits: 4, Mode: model.ModeMXFP4},
			Scales: &safetensors.Tensor{Name: "w.scales", DType: safetensors.U8, Shape: []int{out, in / 32}, Data: scales}}}
	s, err := newStoredMatrix(l)
	if err != nil {
		t.Fatal(err)
	}
	expanded := make([]float32, out*in)
	l.Float32(expanded)
	x := randVec(r, rows*in)
	want := make([]float32, rows*out)
	matmulRows(k, want, x, expanded, rows, in, out, 0, out)
	if !s.vecOK(k, in) {
		t.Fatal("no decode kernel for mxfp4")
	}
	same := func(what string, got []float32) {
		t.Helper()
		for o := range got {
			if math.Float32bits(got[o]) != math.Float32bits(want[o]) {
				t.Fatalf("%s: out %d: stored %v, expanded %v", what, o, got[o], want[o])
			}
		}
	}
	one := make([]float32, out)
	s.vecRows(k, one, x[:in], in, 0, out)
	same("one row", one)
	part := make([]float32, out)
	for o0 := 0; o0 < out; o0 += 3 {
		s.vecRows(k, part, x[:in], in, o0, min(o0+3, out))
	}
	same("odd ranges", part)
	batch := make([]float32, rows*out)
	s.vecRowsBatch(k, batch, x, rows, in, out, 0, out)
	same("batch", batch)
}
