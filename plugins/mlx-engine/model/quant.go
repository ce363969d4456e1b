package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Quantization is MLX quantization as mlx-lm records it in config.json ("quantization", mirrored in
// "quantization_config"): a default mode, bits and group size, and per-module entries keyed by module path
// ("model.layers.3.mlp.down_proj", "lm_head") that give their own parameters, are true for the defaults, or are
// false for a module left in floating point.
//
// An entry's mode follows MLX's nn.quantize: a bare true takes the default parameters and mode; an object is
// passed to to_quantized as it is, so one without "mode" is affine whatever the default mode (mlx-lm's
// gpt-oss-20b-MXFP4-Q8 is affine 8-bit with mxfp4 entries for the experts), and absent bits and group_size take
// the mode's defaults (affine 64/4, mxfp4 32/4).
type Quantization struct {
	QuantParams
	Overrides map[string]*QuantParams // nil value: the module is not quantized
}

// The quantization modes.
const (
	// ModeAffine stores each element in Bits bits, dequantized as scale*q + bias per group.
	ModeAffine = "affine"
	// ModeMXFP4 stores fp4 (e2m1) elements, 32 per group, with one e8m0 (uint8 exponent) scale per group and
	// no biases: the OCP microscaling format that gpt-oss ships its experts in.
	ModeMXFP4 = "mxfp4"
)

// QuantParams are the parameters of one quantized module: each row of the weight is split into groups of
// GroupSize consecutive inputs, each element stored in Bits bits, dequantized by Mode's rule.
type QuantParams struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode"` // ModeAffine or ModeMXFP4
}

// SupportedBits lists the bit widths whose MLX packing (whole elements within little-endian uint32 words,
// first element in the lowest bits) the loader reads. 3, 5 and 6 bits pack across words and are rejected.
var SupportedBits = []int{2, 4, 8}

func (p QuantParams) validate() error {
	switch p.Mode {
	case ModeAffine:
	case ModeMXFP4:
		if p.Bits != 4 || p.GroupSize != 32 {
			return fmt.Errorf("mxfp4 quantization has 4 bits in groups of 32, not %d bits in groups of %d", p.Bits, p.GroupSize)
		}
		return nil
	default:
		return fmt.Errorf("quantization mode %q is not supported (supported: %s, %s)", p.Mode, ModeAffine, ModeMXFP4)
	}
	okBits := false
	for _, b := range SupportedBits {
		okBits = okBits || p.Bits == b
	}
	if !okBits {
		return fmt.Errorf("%d-bit quantization is not supported (supported: %v)", p.Bits, SupportedBits)
	}
	switch p.GroupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("quantization group_size %d is not supported (supported: 32, 64, 128)", p.GroupSize)
	}
	return nil
}

// For returns the parameters of the module at path, or ok=false if the configuration says it is not quantized.
// explicit reports whether the module has its own entry (otherwise the presence of its ".scales" tensor decides,
// as in mlx-lm).
func (q *Quantization) For(path string) (p QuantParams, ok, explicit bool) {
	if q == nil {
		return QuantParams{}, false, false
	}
	if o, found := q.Overrides[path]; found {
		if o == nil {
			return QuantParams{}, false, true
		}
		return *o, true, true
	}
	return q.QuantParams, true, false
}

func parseQuantization(raw json.RawMessage) (*Quantization, error) {
	if isNull(raw) {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("quantization: %w", err)
	}
	if m, ok := fields["quant_method"]; ok {
		var method string
		json.Unmarshal(m, &method)
		return nil, fmt.Errorf("quantization method %q is not supported (only MLX quantization: affine, mxfp4)", method)
	}
	q := &Quantization{QuantParams: QuantParams{Mode: ModeAffine}, Overrides: map[string]*QuantParams{}}
	var gotGroup, gotBits bool
	var defaults []string // modules whose entry is a bare true: quantized with the default parameters
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		var err error
		switch k {
		case "group_size":
			gotGroup, err = true, json.Unmarshal(v, &q.GroupSize)
		case "bits":
			gotBits, err = true, json.Unmarshal(v, &q.Bits)
		case "mode":
			err = json.Unmarshal(v, &q.Mode)
		default:
			var o *QuantParams
			if o, err = parseOverride(v); err == nil && o != nil && o.Bits == 0 {
				defaults = append(defaults, k)
			}
			q.Overrides[k] = o
		}
		if err != nil {
			return nil, fmt.Errorf("quantization %q: %w", k, err)
		}
	}
	if q.Mode == ModeMXFP4 {
		// mlx-lm writes both keys; MLX's defaults for the mode fill them when they are absent.
		if !gotGroup {
			q.GroupSize = 32
		}
		if !gotBits {
			q.Bits = 4
		}
	}
	if err := q.validate(); err != nil {
		return nil, err
	}
	for _, k := range defaults {
		p := q.QuantParams
		q.Overrides[k] = &p
	}
	for k, o := range q.Overrides {
		if o != nil {
			if err := o.validate(); err != nil {
				return nil, fmt.Errorf("quantization %q: %w", k, err)
			}
		}
	}
	return q, nil
}

func parseOverride(v json.RawMessage) (*QuantParams, error) {
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "false":
		return nil, nil
	case "true":
		return &QuantParams{}, nil // filled with the defaults by the caller
	}
	var raw struct {
		GroupSize *int    `json:"group_size"`
		Bits      *int    `json:"bits"`
		Mode      *string `json:"mode"`
	}
	if err := json.Unmarshal(v, &raw); err != nil {
		return nil, fmt.Errorf("want false or {group_size, bits, mode}: %w", err)
	}
	p := &QuantParams{Mode: ModeAffine} // to_quantized's default, not the top-level mode
	if raw.Mode != nil {
		p.Mode = *raw.Mode
	}
	if p.Mode != ModeAffine && p.Mode != ModeMXFP4 {
		return nil, fmt.Errorf("quantization mode %q is not supported (supported: %s, %s)", p.Mode, ModeAffine, ModeMXFP4)
	}
	if p.Mode == ModeMXFP4 {
		p.GroupSize, p.Bits = 32, 4
		if raw.GroupSize != nil {
			p.GroupSize = *raw.GroupSize
		}
		if raw.Bits != nil {
			p.Bits = *raw.Bits
		}
		return p, nil
	}
	if raw.GroupSize == nil || raw.Bits == nil {
		return nil, errors.New("override needs group_size and bits")
	}
	p.GroupSize, p.Bits = *raw.GroupSize, *raw.Bits
	return p, nil
}
