package model

import (
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

func tensor(name string, dt safetensors.DType, shape ...int) *safetensors.Tensor {
	n := dt.Size()
	for _, d := range shape {
		n *= d
	}
	return &safetensors.Tensor{Name: name, DType: dt, Shape: shape, Data: make([]byte, n)}
}

func testBinder(q *Quantization, ts ...*safetensors.Tensor) *binder {
	b := &binder{tensors: map[string]*safetensors.Tensor{}, used: map[string]bool{}, quant: q}
	for _, t := range ts {
		b.tensors[t.Name] = t
	}
	return b
}

// TestBindMXFP4 checks what the loader accepts as an mxfp4 module, and that everything else is refused with
// the module's name.
func TestBindMXFP4(t *testing.T) {
	t.Parallel()
	mx := &Quantization{QuantParams: QuantParams{32, 4, ModeMXFP4}, Overrides: map[string]*QuantParams{}}
	good := []*safetensors.Tensor{tensor("m.weight", safetensors.U32, 8, 8), tensor("m.scales", safetensors.U8, 8, 2)}
	l, err := testBinder(mx, good...).linear("m", 8, 64, false)
	if err != nil || l.Quant == nil || l.Quant.Mode != ModeMXFP4 || l.Quant.Biases != nil {
		t.Fatalf("good module: %+v, %v", l, err)
	}
	for _, tc := range []struct {
		name string
		ts   []*safetensors.Tensor
		in   int
		want string
	}{
		{"scales dtype", []*safetensors.Tensor{good[0], tensor("m.scales", safetensors.BF16, 8, 2)}, 64, `"m.scales" is BF16 [8 2], want U8 [8 2]`},
		{"scales shape", []*safetensors.Tensor{good[0], tensor("m.scales", safetensors.U8, 8, 4)}, 64, `want U8 [8 2]`},
		{"weight shape", []*safetensors.Tensor{tensor("m.weight", safetensors.U32, 8, 4), good[1]}, 64, `"m.weight" has shape [8 4], want [8 8] (mxfp4 packed)`},
		{"affine biases", append(append([]*safetensors.Tensor(nil), good...), tensor("m.biases", safetensors.BF16, 8, 2)), 64, `module "m" is mxfp4, which has no biases`},
		{"no scales", good[:1], 64, `missing tensor "m.scales"`},
		{"input", []*safetensors.Tensor{tensor("m.weight", safetensors.U32, 8, 6), tensor("m.scales", safetensors.U8, 8, 1)}, 48, "not a multiple of 32"},
	} {
		if _, err := testBinder(mx, tc.ts...).linear("m", 8, tc.in, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestBindGptOSSExperts checks the three expert layouts' shape checks, and the zero-copy views of openai's
// blocks: expert e's rows are the e-th slice of the stacked bytes.
func TestBindGptOSSExperts(t *testing.T) {
	t.Parallel()
	const E, out, in = 3, 4, 64
	blocks := tensor("x.gate_up_proj_blocks", safetensors.U8, E, out, in/32, 16)
	for i := range blocks.Data {
		blocks.Data[i] = byte(i)
	}
	scales := tensor("x.gate_up_proj_scales", safetensors.U8, E, out, in/32)
	bias := tensor("x.gate_up_proj_bias", safetensors.BF16, E, out)
	x, err := testBinder(nil, blocks, scales, bias).gptossBlocks("x.gate_up_proj", E, out, in)
	if err != nil {
		t.Fatal(err)
	}
	if x.Stacked.Out != E*out || len(x.Each) != E || &x.Each[2].Weight.Data[0] != &blocks.Data[2*out*in/2] ||
		len(x.Each[2].Quant.Scales.Data) != out*in/32 || x.Each[1].Weight.DType != safetensors.U32 {
		t.Errorf("views: %+v", x.Each[2])
	}
	for _, tc := range []struct {
		name string
		bind func() error
		want string
	}{
		{"blocks shape", func() error {
			_, err := testBinder(nil, tensor("x.gate_up_proj_blocks", safetensors.U8, E, out, in/16, 8), scales, bias).gptossBlocks("x.gate_up_proj", E, out, in)
			return err
		}, "want U8 [3 4 2 16] (mxfp4 blocks)"},
		{"bias shape", func() error {
			_, err := testBinder(nil, blocks, scales, tensor("x.gate_up_proj_bias", safetensors.BF16, E)).gptossBlocks("x.gate_up_proj", E, out, in)
			return err
		}, `"x.gate_up_proj_bias" has shape [3], want [3 4]`},
		{"float shape", func() error {
			_, err := testBinder(nil, tensor("x.down_proj", safetensors.BF16, E, 5, 7), tensor("x.down_proj_bias", safetensors.BF16, E, out)).gptossFloat("x.down_proj", E, out, in)
			return err
		}, "want [3 64 4] (or [3 4 64])"},
		{"mlx packed without scales", func() error {
			_, err := testBinder(&Quantization{QuantParams: QuantParams{64, 8, ModeAffine}, Overrides: map[string]*QuantParams{}},
				tensor("x.gate_proj.weight", safetensors.U32, E, out, in/8), tensor("x.gate_proj.bias", safetensors.BF16, E, out)).gptossStacked("x.gate_proj", E, out, in)
			return err
		}, `missing tensor "x.gate_proj.scales"`},
	} {
		if err := tc.bind(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	// transformers' float save is transposed into [E, out, in] rows.
	f := tensor("y", safetensors.F32, E, in, out)
	for i := range f.Data {
		f.Data[i] = byte(i % 251)
	}
	y, err := testBinder(nil, f, tensor("y_bias", safetensors.F32, E, out)).gptossFloat("y", E, out, in)
	if err != nil {
		t.Fatal(err)
	}
	row, col := make([]float32, in), make([]float32, E*in*out)
	if err := ToFloat32(f, col); err != nil {
		t.Fatal(err)
	}
	y.Each[1].Row(2, row)
	for i := range row {
		if row[i] != col[(1*in+i)*out+2] {
			t.Fatalf("transposed row 2 of expert 1, element %d: %v, want %v", i, row[i], col[(1*in+i)*out+2])
		}
	}
}
