package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// The tiny hybrid checkpoints below are written by hand in both layouts from one set of logical values, so the
// tests can check what Load makes of each stored form: the regrouped projections, the +1 of the (1+w) norms,
// the conv transposition, the expert layouts and the tensors left unbound on purpose.

const (
	hH, hNk, hNv, hDk, hDv, hK = 64, 2, 4, 16, 8, 4
	hHeads, hKV, hHD           = 4, 2, 16
	hE, hI, hIs, hDenseI       = 8, 32, 48, 96
	hVocab, hLayers            = 300, 6
	hQK, hV, hC, hR            = hNk * hDk, hNv * hDv, 2*hNk*hDk + hNv*hDv, hNv / hNk
)

// hval is the logical value of element (i, j) of logical tensor name: distinct, exact in bfloat16, small.
func hval(name string, i, j int) float32 {
	var h uint32 = 2166136261
	for _, c := range []byte(name) {
		h = (h ^ uint32(c)) * 16777619
	}
	h = (h ^ uint32(i)*2654435761) * 16777619
	h = (h ^ uint32(j)*40503) * 16777619
	return float32(int(h%255)-127) / 128
}

// hybridCheckpoint writes the tiny model of family fam in layout mlx or not (Hugging Face), weights in dt.
func hybridCheckpoint(t *testing.T, fam Family, mlx bool, dt safetensors.DType) string {
	t.Helper()
	nested := fam != Qwen3Next
	w := safetensors.NewWriter(nil)
	add := func(name string, shape []int, v []float32) {
		t.Helper()
		d := dt
		if strings.HasSuffix(name, "A_log") && mlx {
			d = safetensors.F32 // mlx-lm's cast_predicate keeps A_log in float32
		}
		var data []byte
		switch d {
		case safetensors.F32:
			data = make([]byte, 4*len(v))
			for i, x := range v {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
			}
		case safetensors.BF16:
			data = make([]byte, 2*len(v))
			if err := dtype.Encode(dtype.BFloat16, data, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Add(name, d, shape, data); err != nil {
			t.Fatal(err)
		}
	}
	// rows builds a matrix whose row r is logical row rows[r] of logical tensor name.
	mat := func(name string, rows []int, in int) []float32 {
		v := make([]float32, 0, len(rows)*in)
		for _, r := range rows {
			for j := 0; j < in; j++ {
				v = append(v, hval(name, r, j))
			}
		}
		return v
	}
	seq := func(lo, n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = lo + i
		}
		return s
	}
	lin := func(stored, logical string, out, in int) {
		add(stored+".weight", []int{out, in}, mat(logical, seq(0, out), in))
	}
	norm := func(stored, logical string, n int) {
		v := mat(logical, []int{0}, n)
		if mlx {
			for i := range v {
				v[i]++ // sanitize folds the +1 (in the stored dtype)
			}
		}
		add(stored, []int{n}, v)
	}
	pre, head := "model.", "lm_head"
	switch {
	case nested && mlx:
		pre, head = "language_model.model.", "language_model.lm_head"
	case nested:
		pre = "model.language_model."
	}
	lin(pre+"embed_tokens", "embed", hVocab, hH)
	norm(pre+"norm.weight", "final_norm", hH)
	lin(head, "lm_head", hVocab, hH)
	for i := 0; i < hLayers; i++ {
		p, lg := fmt.Sprintf("%slayers.%d.", pre, i), fmt.Sprintf("L%d.", i)
		norm(p+"input_layernorm.weight", lg+"in_norm", hH)
		norm(p+"post_attention_layernorm.weight", lg+"post_norm", hH)
		if (i+1)%3 == 0 {
			lin(p+"self_attn.q_proj", lg+"q", 2*hHeads*hHD, hH)
			lin(p+"self_attn.k_proj", lg+"k", hKV*hHD, hH)
			lin(p+"self_attn.v_proj", lg+"v", hKV*hHD, hH)
			lin(p+"self_attn.o_proj", lg+"o", hH, hHeads*hHD)
			norm(p+"self_attn.q_norm.weight", lg+"q_norm", hHD)
			norm(p+"self_attn.k_norm.weight", lg+"k_norm", hHD)
		} else {
			la := p + "linear_attn."
			if fam == Qwen3Next {
				var qkvz, ba []float32
				for j := 0; j < hNk; j++ {
					qkvz = append(qkvz, mat(lg+"qkv", seq(j*hDk, hDk), hH)...)
					qkvz = append(qkvz, mat(lg+"qkv", seq(hQK+j*hDk, hDk), hH)...)
					qkvz = append(qkvz, mat(lg+"qkv", seq(2*hQK+j*hR*hDv, hR*hDv), hH)...)
					qkvz = append(qkvz, mat(lg+"z", seq(j*hR*hDv, hR*hDv), hH)...)
					ba = append(ba, mat(lg+"b", seq(j*hR, hR), hH)...)
					ba = append(ba, mat(lg+"a", seq(j*hR, hR), hH)...)
				}
				add(la+"in_proj_qkvz.weight", []int{2*hQK + 2*hV, hH}, qkvz)
				add(la+"in_proj_ba.weight", []int{2 * hNv, hH}, ba)
			} else {
				lin(la+"in_proj_qkv", lg+"qkv", hC, hH)
				lin(la+"in_proj_z", lg+"z", hV, hH)
				lin(la+"in_proj_b", lg+"b", hNv, hH)
				lin(la+"in_proj_a", lg+"a", hNv, hH)
			}
			conv := make([]float32, 0, hC*hK) // element (c, τ) at c·K+τ in both stored shapes
			for c := 0; c < hC; c++ {
				for tau := 0; tau < hK; tau++ {
					conv = append(conv, hval(lg+"conv", c, tau))
				}
			}
			shape := []int{hC, 1, hK}
			if mlx {
				shape = []int{hC, hK, 1}
			}
			add(la+"conv1d.weight", shape, conv)
			add(la+"dt_bias", []int{hNv}, mat(lg+"dt_bias", []int{0}, hNv))
			add(la+"A_log", []int{hNv}, mat(lg+"A_log", []int{0}, hNv))
			add(la+"norm.weight", []int{hDv}, mat(lg+"gated_norm", []int{0}, hDv)) // plain in both layouts
			lin(la+"out_proj", lg+"out", hH, hV)
		}
		if fam == Qwen3Next && i == 1 { // mlp_only_layers [1]
			lin(p+"mlp.gate_proj", lg+"mlp_gate", hDenseI, hH)
			lin(p+"mlp.up_proj", lg+"mlp_up", hDenseI, hH)
			lin(p+"mlp.down_proj", lg+"mlp_down", hH, hDenseI)
			continue
		}
		lin(p+"mlp.gate", lg+"router", hE, hH)
		lin(p+"mlp.shared_expert.gate_proj", lg+"sh_gate", hIs, hH)
		lin(p+"mlp.shared_expert.up_proj", lg+"sh_up", hIs, hH)
		lin(p+"mlp.shared_expert.down_proj", lg+"sh_down", hH, hIs)
		lin(p+"mlp.shared_expert_gate", lg+"sh_expert_gate", 1, hH)
		ex := func(e int, which string, out, in int) []float32 {
			return mat(fmt.Sprintf("%sexpert%d.%s", lg, e, which), seq(0, out), in)
		}
		switch {
		case mlx:
			for _, s := range []struct {
				name    string
				out, in int
			}{{"gate_proj", hI, hH}, {"up_proj", hI, hH}, {"down_proj", hH, hI}} {
				var v []float32
				for e := 0; e < hE; e++ {
					v = append(v, ex(e, s.name, s.out, s.in)...)
				}
				add(p+"mlp.switch_mlp."+s.name+".weight", []int{hE, s.out, s.in}, v)
			}
		case nested: // transformers' fused experts
			var gu, down []float32
			for e := 0; e < hE; e++ {
				gu = append(append(gu, ex(e, "gate_proj", hI, hH)...), ex(e, "up_proj", hI, hH)...)
				down = append(down, ex(e, "down_proj", hH, hI)...)
			}
			add(p+"mlp.experts.gate_up_proj", []int{hE, 2 * hI, hH}, gu)
			add(p+"mlp.experts.down_proj", []int{hE, hH, hI}, down)
		default:
			for e := 0; e < hE; e++ {
				for _, s := range []struct {
					name    string
					out, in int
				}{{"gate_proj", hI, hH}, {"up_proj", hI, hH}, {"down_proj", hH, hI}} {
					add(fmt.Sprintf("%smlp.experts.%d.%s.weight", p, e, s.name), []int{s.out, s.in}, ex(e, s.name, s.out, s.in))
				}
			}
		}
	}
	if !mlx { // dropped by mlx-lm's sanitize; left unbound by Load
		add("mtp.fc.weight", []int{hH, 2 * hH}, mat("mtp", seq(0, hH), 2*hH))
		if nested {
			add("model.visual.blocks.0.attn.qkv.weight", []int{12, 4}, mat("visual", seq(0, 12), 4))
		}
	}
	dir := t.TempDir()
	if err := w.WriteFile(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	cfg := `"intermediate_size": 96, "mlp_only_layers": [1], ` + tinyHybrid
	if fam == Qwen3Next {
		cfg = `{"model_type": "qwen3_next", ` + cfg + `}`
	} else {
		cfg = `{"model_type": "qwen3_5_moe", "text_config": {` + tinyHybrid + `}}`
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// projRows and linRows dequantize a whole projection or matrix.
func projRows(p *Projection) []float32 {
	v := make([]float32, p.Out*p.In)
	p.Float32(v)
	return v
}

func linRows(l *Linear) []float32 {
	v := make([]float32, l.Out*l.In)
	l.Float32(v)
	return v
}

func vec(t *testing.T, v *safetensors.Tensor) []float32 {
	t.Helper()
	f, err := Vector(v)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// logicalRows is logical tensor name's rows [lo, lo+n) of width in, rounded to what dt stores.
func logicalRows(name string, lo, n, in int, dt safetensors.DType, plusOne bool) []float32 {
	v := make([]float32, 0, n*in)
	for r := lo; r < lo+n; r++ {
		for j := 0; j < in; j++ {
			x := hval(name, r, j)
			if dt == safetensors.BF16 {
				x = dtype.BFloat16.Round(x)
			}
			if plusOne {
				x++
			}
			v = append(v, x)
		}
	}
	return v
}

// TestLoadHybridLayouts loads the tiny qwen3_next and qwen3_5_moe checkpoints in both layouts and checks every
// weight of the block slots against the logical values.
func TestLoadHybridLayouts(t *testing.T) {
	t.Parallel()
	for _, fam := range []Family{Qwen3Next, Qwen35MoE} {
		for _, mlx := range []bool{false, true} {
			for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
				name := fmt.Sprintf("%s/mlx=%v/%s", fam, mlx, dt)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					m, err := Load(hybridCheckpoint(t, fam, mlx, dt))
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					checkHybrid(t, m, fam, dt, mlx)
				})
			}
		}
	}
}

func checkHybrid(t *testing.T, m *Model, fam Family, dt safetensors.DType, mlx bool) {
	t.Helper()
	same := func(what string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	f32 := func(what string, v *safetensors.Tensor, shape ...int) {
		t.Helper()
		if v.DType != safetensors.F32 || !sameShape(v.Shape, shape) {
			t.Errorf("%s: %s %v, want F32 %v", what, v.DType, v.Shape, shape)
		}
	}
	folded := func(what string, v *safetensors.Tensor, logical string, n int) {
		t.Helper()
		want := logicalRows(logical, 0, 1, n, dt, true)
		if mlx && dt == safetensors.BF16 {
			for i := range want { // mlx-lm added the 1 in the stored dtype
				want[i] = dtype.BFloat16.Round(want[i])
			}
		}
		same(what, vec(t, v), want)
		if !mlx {
			f32(what, v, n) // folded at load, in float32
		}
	}
	folded("final norm", m.Norm, "final_norm", hH)
	same("lm_head", linRows(m.LMHead), logicalRows("lm_head", 0, hVocab, hH, dt, false))
	for i := range m.Layers {
		l, lg := &m.Layers[i], fmt.Sprintf("L%d.", i)
		folded(lg+"input_layernorm", l.AttnIn, lg+"in_norm", hH)
		folded(lg+"post_attention_layernorm", l.FFNIn, lg+"post_norm", hH)
		if (i+1)%3 == 0 {
			if l.Attn == nil || l.DeltaNet != nil || l.Spec.Kind != LayerAttention {
				t.Fatalf("layer %d: want attention", i)
			}
			a := l.Attn
			same(lg+"q_proj", linRows(a.Q), logicalRows(lg+"q", 0, 2*hHeads*hHD, hH, dt, false))
			for h := 0; h < hHeads; h++ {
				q, g := make([]float32, hH), make([]float32, hH)
				for d := 0; d < hHD; d++ {
					a.Query.Row(h*hHD+d, q)
					a.Gate.Row(h*hHD+d, g)
					same(lg+"query row", q, logicalRows(lg+"q", 2*h*hHD+d, 1, hH, dt, false))
					same(lg+"gate row", g, logicalRows(lg+"q", (2*h+1)*hHD+d, 1, hH, dt, false))
				}
			}
			folded(lg+"q_norm", a.QNorm, lg+"q_norm", hHD)
			folded(lg+"k_norm", a.KNorm, lg+"k_norm", hHD)
		} else {
			d := l.DeltaNet
			if d == nil || l.Attn != nil || l.Spec.Kind != LayerLinear {
				t.Fatalf("layer %d: want linear attention", i)
			}
			if d.QKV.Out != hC || d.Z.Out != hV || d.B.Out != hNv || d.A.Out != hNv || d.QKV.In != hH {
				t.Fatalf("layer %d: projection sizes %d %d %d %d", i, d.QKV.Out, d.Z.Out, d.B.Out, d.A.Out)
			}
			wantParts := 1
			if fam == Qwen3Next {
				wantParts = 3 * hNk // q_j, k_j, v_j ranges (z, b, a: one per key head)
			}
			if len(d.QKV.Parts) != wantParts || len(d.Stored) != map[bool]int{true: 2, false: 4}[fam == Qwen3Next] {
				t.Errorf("layer %d: %d QKV parts over %d stored modules", i, len(d.QKV.Parts), len(d.Stored))
			}
			same(lg+"qkv", projRows(d.QKV), logicalRows(lg+"qkv", 0, hC, hH, dt, false))
			same(lg+"z", projRows(d.Z), logicalRows(lg+"z", 0, hV, hH, dt, false))
			same(lg+"b", projRows(d.B), logicalRows(lg+"b", 0, hNv, hH, dt, false))
			same(lg+"a", projRows(d.A), logicalRows(lg+"a", 0, hNv, hH, dt, false))
			f32(lg+"conv", d.Conv, hK, hC)
			conv := vec(t, d.Conv)
			for c := 0; c < hC; c++ {
				for tau := 0; tau < hK; tau++ {
					want := logicalRows(lg+"conv", c, 1, tau+1, dt, false)[tau]
					if conv[tau*hC+c] != want {
						t.Fatalf("%sconv[%d][%d] = %g, want %g", lg, tau, c, conv[tau*hC+c], want)
					}
				}
			}
			f32(lg+"dt_bias", d.DtBias, hNv)
			f32(lg+"A_log", d.ALog, hNv)
			same(lg+"dt_bias", vec(t, d.DtBias), logicalRows(lg+"dt_bias", 0, 1, hNv, dt, false))
			same(lg+"A_log", vec(t, d.ALog), logicalRows(lg+"A_log", 0, 1, hNv, dt, false))
			same(lg+"gated norm", vec(t, d.Norm), logicalRows(lg+"gated_norm", 0, 1, hDv, dt, false))
			same(lg+"out_proj", linRows(d.Out), logicalRows(lg+"out", 0, hH, hV, dt, false))
		}
		if fam == Qwen3Next && i == 1 {
			if l.MLP == nil || l.MoE != nil {
				t.Fatalf("layer 1: want the dense MLP of mlp_only_layers")
			}
			same(lg+"mlp down", linRows(l.MLP.Down), logicalRows(lg+"mlp_down", 0, hH, hDenseI, dt, false))
			continue
		}
		e := l.MoE
		if e == nil || e.Shared == nil || e.SharedGate == nil || e.GateUp != nil {
			t.Fatalf("layer %d: MoE %+v", i, e)
		}
		same(lg+"router", linRows(e.Router), logicalRows(lg+"router", 0, hE, hH, dt, false))
		same(lg+"shared gate", linRows(e.SharedGate), logicalRows(lg+"sh_expert_gate", 0, 1, hH, dt, false))
		same(lg+"shared down", linRows(e.Shared.Down), logicalRows(lg+"sh_down", 0, hH, hIs, dt, false))
		for x := 0; x < hE; x++ {
			for _, s := range []struct {
				ex      *Experts
				name    string
				out, in int
			}{{e.Gate, "gate_proj", hI, hH}, {e.Up, "up_proj", hI, hH}, {e.Down, "down_proj", hH, hI}} {
				same(fmt.Sprintf("%sexpert %d %s", lg, x, s.name), linRows(&s.ex.Each[x]),
					logicalRows(fmt.Sprintf("%sexpert%d.%s", lg, x, s.name), 0, s.out, s.in, dt, false))
			}
		}
	}
	if m.NumParams() <= 0 || m.ActiveParams() <= 0 || m.ActiveParams() >= m.NumParams() || m.WeightBytes() <= 0 {
		t.Errorf("params %d, active %d, bytes %d", m.NumParams(), m.ActiveParams(), m.WeightBytes())
	}
}

// TestHybridLayoutsAgree: in float32 the two layouts of a model load to bit-identical block weights (names
// aside), so their Fingerprints differ only through names and the folded norms' dtype, never through values.
func TestHybridLayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, fam := range []Family{Qwen3Next, Qwen35MoE} {
		hf, err := Load(hybridCheckpoint(t, fam, false, safetensors.F32))
		if err != nil {
			t.Fatal(err)
		}
		mx, err := Load(hybridCheckpoint(t, fam, true, safetensors.F32))
		if err != nil {
			t.Fatal(err)
		}
		var a, b []float32
		collect := func(m *Model, dst *[]float32) {
			m.eachTensorUse(func(l *Linear, v *safetensors.Tensor) {
				if l != nil {
					*dst = append(*dst, linRows(l)...)
				} else {
					*dst = append(*dst, vec(t, v)...)
				}
			})
		}
		collect(hf, &a)
		collect(mx, &b)
		if len(a) != len(b) {
			t.Fatalf("%s: %d values against %d", fam, len(a), len(b))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: value %d: %g (hf) vs %g (mlx)", fam, i, a[i], b[i])
			}
		}
		if hf.Config.Family != fam || hf.KVCompat("t") != mx.KVCompat("t") {
			t.Errorf("%s: KVCompat differs between layouts", fam)
		}
		hf.Close()
		mx.Close()
	}
}

// hybridEdit rewrites dir/model.safetensors through fn (keep=false drops a tensor) and may add tensors.
func hybridEdit(t *testing.T, dir string, fn func(name string, shape []int, data []byte) ([]int, []byte, bool), add map[string][]int) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w := safetensors.NewWriter(nil)
	for _, n := range f.Names() {
		tn, _ := f.Tensor(n)
		shape, data, keep := fn(n, append([]int(nil), tn.Shape...), append([]byte(nil), tn.Data...))
		if keep {
			if err := w.Add(n, tn.DType, shape, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()
	for n, shape := range add {
		size := 4
		for _, d := range shape {
			size *= d
		}
		if err := w.Add(n, safetensors.F32, shape, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

// TestHybridLoadErrors: checkpoints Load refuses, each with an error naming the tensors at fault.
func TestHybridLoadErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fam  Family
		mlx  bool
		fn   func(name string, shape []int, data []byte) ([]int, []byte, bool)
		add  map[string][]int
		want string
	}{
		{"missing in_proj_ba", Qwen3Next, false, func(n string, s []int, d []byte) ([]int, []byte, bool) {
			return s, d, n != "model.layers.3.linear_attn.in_proj_ba.weight"
		}, nil, `missing tensor "model.layers.3.linear_attn.in_proj_ba.weight"`},
		{"missing A_log", Qwen35MoE, true, func(n string, s []int, d []byte) ([]int, []byte, bool) {
			return s, d, n != "language_model.model.layers.0.linear_attn.A_log"
		}, nil, `missing tensor "language_model.model.layers.0.linear_attn.A_log"`},
		{"mixed conv layouts", Qwen3Next, false, func(n string, s []int, d []byte) ([]int, []byte, bool) {
			if n == "model.layers.4.linear_attn.conv1d.weight" {
				s = []int{s[0], s[2], s[1]}
			}
			return s, d, true
		}, nil, `mixed layouts: "model.layers.0.linear_attn.conv1d.weight" is in the Hugging Face layout`},
		{"mlx conv with per-expert tensors", Qwen3Next, true, nil, map[string][]int{"model.layers.0.mlp.experts.0.up_proj.weight": {hI, hH}},
			`but "model.layers.0.mlp.experts.0.up_proj.weight" is a Hugging Face expert tensor`},
		{"conv of another shape", Qwen35MoE, false, func(n string, s []int, d []byte) ([]int, []byte, bool) {
			if strings.HasSuffix(n, "layers.1.linear_attn.conv1d.weight") {
				s = []int{s[0] * s[2]}
			}
			return s, d, true
		}, nil, `conv1d.weight" has shape [384], want [96 1 4] (Hugging Face) or [96 4 1] (mlx-lm)`},
		{"mixed expert layouts", Qwen35MoE, false, nil, map[string][]int{"model.language_model.layers.0.mlp.experts.0.gate_proj.weight": {hI, hH}},
			"mixed expert layouts"},
		{"projection of the wrong size", Qwen35MoE, false, func(n string, s []int, d []byte) ([]int, []byte, bool) {
			if n == "model.language_model.layers.0.linear_attn.in_proj_z.weight" {
				return []int{s[0] / 2, s[1]}, d[:len(d)/2], true
			}
			return s, d, true
		}, nil, `in_proj_z.weight" has shape [16 64], want [32 64]`},
		{"stray tensor", Qwen3Next, true, nil, map[string][]int{"model.layers.0.linear_attn.extra.weight": {2}}, "unexpected tensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := hybridCheckpoint(t, tc.fam, tc.mlx, safetensors.F32)
			fn := tc.fn
			if fn == nil {
				fn = func(_ string, s []int, d []byte) ([]int, []byte, bool) { return s, d, true }
			}
			hybridEdit(t, dir, fn, tc.add)
			m, err := Load(dir)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// HybridCheckpoint lets the external tests write the tiny hybrid checkpoints.
var HybridCheckpoint = hybridCheckpoint
