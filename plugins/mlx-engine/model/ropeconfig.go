package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// ropeEntry is one rope_scaling object (or one entry of transformers v5's rope_parameters), for the families
// whose mapper builds its RopeSpec itself (gemma3: linear; gpt_oss: yarn).
type ropeEntry struct {
	RopeType       string   `json:"rope_type"`
	Type           string   `json:"type"`
	RopeTheta      *float64 `json:"rope_theta"`
	Factor         *float64 `json:"factor"`
	OrigMaxPos     *int     `json:"original_max_position_embeddings"`
	BetaFast       *float64 `json:"beta_fast"`
	BetaSlow       *float64 `json:"beta_slow"`
	Truncate       *bool    `json:"truncate"`
	AttnFactor     *float64 `json:"attention_factor"`
	MScale         *float64 `json:"mscale"`
	MScaleAllDim   *float64 `json:"mscale_all_dim"`
	LowFreqFactor  *float64 `json:"low_freq_factor"`
	HighFreqFactor *float64 `json:"high_freq_factor"`
}

func (e *ropeEntry) kind() string {
	if e.RopeType != "" {
		return e.RopeType
	}
	if e.Type == "" {
		return "default"
	}
	return e.Type
}

// parseRopeEntry reads one rope scaling object; null is the default rope.
func parseRopeEntry(key string, raw json.RawMessage) (*ropeEntry, error) {
	e := &ropeEntry{}
	if isNull(raw) {
		return e, nil
	}
	if err := json.Unmarshal(raw, e); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return e, nil
}

// spec turns the entry into a RopeSpec over dims rotary dimensions with base theta, accepting only the types
// in allowed; key names the config entry in errors.
func (e *ropeEntry) spec(key string, theta float64, dims int, allowed ...RopeType) (RopeSpec, error) {
	if e.RopeTheta != nil {
		theta = *e.RopeTheta
	}
	if !(theta > 1) || math.IsInf(theta, 0) {
		return RopeSpec{}, fmt.Errorf("%s: rope_theta %g is out of range", key, theta)
	}
	s := RopeSpec{Base: theta, RotaryDims: dims}
	switch e.kind() {
	case "default":
		s.Type = RopeDefault
	case "linear":
		s.Type = RopeLinear
	case "yarn":
		s.Type = RopeYarn
	default:
		return RopeSpec{}, fmt.Errorf("%s: rope type %q is not supported (supported: %v)", key, e.kind(), allowed)
	}
	ok := false
	for _, a := range allowed {
		ok = ok || a == s.Type
	}
	if !ok {
		return RopeSpec{}, fmt.Errorf("%s: rope type %q is not supported for this family (supported: %v)", key, e.kind(), allowed)
	}
	if s.Type == RopeDefault {
		return s, nil
	}
	if e.Factor == nil || !(*e.Factor >= 1) || math.IsInf(*e.Factor, 0) {
		return RopeSpec{}, fmt.Errorf("%s: %s rope needs a factor >= 1", key, e.kind())
	}
	s.Factor = *e.Factor
	if s.Type == RopeLinear {
		return s, nil
	}
	// yarn: modeling_rope_utils._compute_yarn_parameters's defaults.
	if e.OrigMaxPos == nil || *e.OrigMaxPos <= 0 || *e.OrigMaxPos > maxDim {
		return RopeSpec{}, fmt.Errorf("%s: yarn rope needs original_max_position_embeddings", key)
	}
	s.OrigMaxPos = *e.OrigMaxPos
	s.BetaFast, s.BetaSlow, s.Truncate = 32, 1, true
	if e.BetaFast != nil {
		s.BetaFast = *e.BetaFast
	}
	if e.BetaSlow != nil {
		s.BetaSlow = *e.BetaSlow
	}
	if e.Truncate != nil {
		s.Truncate = *e.Truncate
	}
	if !(s.BetaFast > 0) || !(s.BetaSlow > 0) || s.BetaSlow >= s.BetaFast {
		return RopeSpec{}, fmt.Errorf("%s: yarn beta_fast %g and beta_slow %g are out of range", key, s.BetaFast, s.BetaSlow)
	}
	for _, f := range []struct {
		p   *float64
		dst *float64
	}{{e.AttnFactor, &s.AttnFactor}, {e.MScale, &s.MScale}, {e.MScaleAllDim, &s.MScaleAllDim}} {
		if f.p != nil {
			if !(*f.p > 0) || math.IsInf(*f.p, 0) {
				return RopeSpec{}, fmt.Errorf("%s: yarn factor %g is out of range", key, *f.p)
			}
			*f.dst = *f.p
		}
	}
	return s, nil
}
