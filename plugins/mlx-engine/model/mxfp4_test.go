package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDequantizeMXFP4 pins the format with a hand-packed group: codes 0..15 twice, low nibble first, under
// scale byte 126 (2^-1).
func TestDequantizeMXFP4(t *testing.T) {
	t.Parallel()
	packed := make([]byte, 16)
	for j := range packed {
		lo, hi := byte(2*j)%16, byte(2*j+1)%16
		packed[j] = lo | hi<<4
	}
	got := make([]float32, 32)
	DequantizeMXFP4(got, packed, []byte{126})
	want := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	for i, v := range got {
		w := want[i%16] / 2
		if v != w || math.Signbit(float64(v)) != (i%16 == 8 || w < 0) {
			t.Errorf("value %d = %v, want %v", i, v, w)
		}
	}
}

func TestE8M0(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    byte
		want float64
	}{{127, 1}, {128, 2}, {0, math.Ldexp(1, -127)}, {1, math.Ldexp(1, -126)}, {254, math.Ldexp(1, 127)}} {
		if got := E8M0(tc.s); float64(got) != tc.want {
			t.Errorf("E8M0(%d) = %g, want %g", tc.s, got, tc.want)
		}
	}
	if !math.IsNaN(float64(E8M0(255))) {
		t.Error("E8M0(255) is not NaN")
	}
	// The product is exact down to the subnormal scale, and overflows as float32 does at the top.
	if got := MXFP4(1, E8M0(0)); float64(got) != math.Ldexp(0.5, -127) {
		t.Errorf("subnormal weight %g", got)
	}
	if got := MXFP4(7, E8M0(254)); !math.IsInf(float64(got), 1) {
		t.Errorf("6·2^127 = %g, want +Inf", got)
	}
}

// TestQuantizeMXFP4RoundTrip: values already on the grid come back exactly; others land within half a step.
func TestQuantizeMXFP4RoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(4, 5))
	src := make([]float32, 128)
	for i := range src {
		src[i] = FP4[r.IntN(16)] * float32(math.Ldexp(1, 3*(i/32)-3)) // one exponent per group
	}
	packed, scales := QuantizeMXFP4(src)
	got := make([]float32, len(src))
	DequantizeMXFP4(got, packed, scales)
	for i := range src {
		if got[i] != src[i] {
			// A group whose largest value is below 6·scale may pick a smaller scale; values stay exact.
			t.Fatalf("value %d: %v, want %v (scales %v)", i, got[i], src[i], scales)
		}
	}
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	packed, scales = QuantizeMXFP4(src)
	DequantizeMXFP4(got, packed, scales)
	for i := range src {
		s := float64(E8M0(scales[i/32]))
		if d := math.Abs(float64(got[i] - src[i])); d > s { // the widest fp4 step is 2 (4 → 6)
			t.Errorf("value %d: %v from %v (scale %g)", i, got[i], src[i], s)
		}
	}
}

// TestQuantizationModes follows MLX's nn.quantize: an object override is passed to to_quantized as it is, so
// without "mode" it is affine whatever the top level says; a bare true inherits the top level.
func TestQuantizationModes(t *testing.T) {
	t.Parallel()
	q, err := parseQuantization([]byte(`{"group_size": 32, "bits": 4, "mode": "mxfp4",
		"model.layers.0.mlp.router": {"group_size": 64, "bits": 8},
		"model.layers.0.self_attn.q_proj": true,
		"model.layers.0.mlp.experts.down_proj": {"mode": "mxfp4"},
		"lm_head": false}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want QuantParams
		ok   bool
	}{
		{"model.layers.0.mlp.router", QuantParams{64, 8, ModeAffine}, true},
		{"model.layers.0.self_attn.q_proj", QuantParams{32, 4, ModeMXFP4}, true},
		{"model.layers.0.mlp.experts.down_proj", QuantParams{32, 4, ModeMXFP4}, true},
		{"model.layers.0.mlp.experts.gate_proj", QuantParams{32, 4, ModeMXFP4}, true},
		{"lm_head", QuantParams{}, false},
	} {
		if p, ok, _ := q.For(tc.path); p != tc.want || ok != tc.ok {
			t.Errorf("For(%s) = %+v %v, want %+v %v", tc.path, p, ok, tc.want, tc.ok)
		}
	}
	q, err = parseQuantization([]byte(`{"mode": "mxfp4"}`))
	if err != nil || q.QuantParams != (QuantParams{32, 4, ModeMXFP4}) {
		t.Errorf("mode defaults: %+v %v", q, err)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"group_size": 32, "bits": 8, "mode": "mxfp4"}`, "mxfp4 quantization has 4 bits in groups of 32, not 8 bits"},
		{`{"group_size": 64, "bits": 4, "x": {"mode": "mxfp4", "group_size": 16}}`, `"x": mxfp4`},
		{`{"group_size": 64, "bits": 4, "x": {"mode": "mxfp8"}}`, `mode "mxfp8" is not supported`},
		{`{"group_size": 64, "bits": 4, "x": {"mode": 4}}`, `"x"`},
	} {
		if _, err := parseQuantization([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.json, err, tc.want)
		}
	}
}
