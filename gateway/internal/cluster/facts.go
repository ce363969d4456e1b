package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/serfcluster"
)

// Facts are what a gateway publishes of an instance beyond serfcluster's own fields: what another gateway needs
// to route a request to it (context length, bytes per token for refusing prompts that cannot fit) and to tell
// which instances can share KV (layout, KVCompat). They travel as serfcluster instance labels, 8 at most,
// each value at most 64 bytes; FactsFromLabels is the one strict decoder.
type Facts struct {
	Backend          string
	Architecture     string
	Quantization     string
	KVCompat         string
	KV               engine.KVLayout
	ContextLength    int
	MaxBytesPerToken int
	Parameters       int64
}

// Label keys.
const (
	labelBackend = "backend"
	labelArch    = "arch"
	labelQuant   = "quant"
	labelKVC     = "kvc"
	labelKV      = "kv"  // layers/kv_heads/head_dim/dtype, then /linear_layers/state_bytes for a hybrid
	labelCtx     = "ctx" // context length
	labelMBPT    = "mbpt"
	labelParams  = "params"
)

// FactsOf takes an instance's facts from its engine description.
func FactsOf(d engine.Description) Facts {
	return Facts{
		Backend: d.Backend, Architecture: d.Architecture, Quantization: d.Quantization, KVCompat: d.KVCompat,
		KV: d.KV, ContextLength: d.ContextLength, MaxBytesPerToken: d.MaxBytesPerToken, Parameters: d.Parameters,
	}
}

// Labels encodes the facts; values that would not fit a label are left out (and read back as unknown).
func (f Facts) Labels() map[string]string {
	out := map[string]string{}
	put := func(k, v string) {
		if v != "" && len(v) <= serfcluster.MaxLabelValueLen && !strings.ContainsAny(v, " \t\n") {
			out[k] = v
		}
	}
	put(labelBackend, f.Backend)
	put(labelArch, f.Architecture)
	put(labelQuant, f.Quantization)
	put(labelKVC, f.KVCompat)
	if kv := f.KV; kv.NumLayers > 0 {
		// A model without linear layers keeps the four fields gateways before them read.
		v := fmt.Sprintf("%d/%d/%d/%s", kv.NumLayers, kv.NumKVHeads, kv.HeadDim, kv.DType)
		if kv.LinearLayers > 0 || kv.StateBytes > 0 {
			v += fmt.Sprintf("/%d/%d", kv.LinearLayers, kv.StateBytes)
		}
		put(labelKV, v)
	}
	if f.ContextLength > 0 {
		put(labelCtx, strconv.Itoa(f.ContextLength))
	}
	if f.MaxBytesPerToken > 0 {
		put(labelMBPT, strconv.Itoa(f.MaxBytesPerToken))
	}
	if f.Parameters > 0 {
		put(labelParams, strconv.FormatInt(f.Parameters, 10))
	}
	return out
}

// FactsFromLabels decodes an instance's labels. A label that does not decode is an error naming it; callers
// treat such an instance as one they know nothing about (unknown facts), never crash on it.
func FactsFromLabels(l map[string]string) (Facts, error) {
	f := Facts{Backend: l[labelBackend], Architecture: l[labelArch], Quantization: l[labelQuant], KVCompat: l[labelKVC]}
	num := func(key string, max int64) (int64, error) {
		v, ok := l[key]
		if !ok {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > max {
			return 0, fmt.Errorf("label %s=%q is not a count", key, v)
		}
		return n, nil
	}
	var err error
	var n int64
	if n, err = num(labelCtx, 1<<31-1); err != nil {
		return f, err
	}
	f.ContextLength = int(n)
	if n, err = num(labelMBPT, 1<<20); err != nil {
		return f, err
	}
	f.MaxBytesPerToken = int(n)
	if f.Parameters, err = num(labelParams, 1<<50); err != nil {
		return f, err
	}
	if v, ok := l[labelKV]; ok {
		kv, err := parseKVLabel(v)
		if err != nil {
			return f, fmt.Errorf("label %s=%q: %w", labelKV, v, err)
		}
		f.KV = kv
	}
	return f, nil
}

// parseKVLabel reads layers/kv_heads/head_dim/dtype[/linear_layers/state_bytes]; without the last two (a
// model without linear layers, or a gateway from before they were published) they are 0.
func parseKVLabel(v string) (engine.KVLayout, error) {
	parts := strings.Split(v, "/")
	if len(parts) != 4 && len(parts) != 6 {
		return engine.KVLayout{}, errors.New("want layers/kv_heads/head_dim/dtype[/linear_layers/state_bytes]")
	}
	var n [6]int64
	for i, p := range parts {
		if i == 3 {
			continue
		}
		limit := int64(1 << 20)
		if i == 5 {
			limit = 1 << 40 // state bytes
		}
		d, err := strconv.ParseInt(p, 10, 64)
		if err != nil || d < 0 || d > limit {
			return engine.KVLayout{}, fmt.Errorf("%q is not a size", p)
		}
		n[i] = d
	}
	kv := engine.KVLayout{NumLayers: int(n[0]), NumKVHeads: int(n[1]), HeadDim: int(n[2]), DType: parts[3],
		LinearLayers: int(n[4]), StateBytes: n[5]}
	switch {
	case kv.NumLayers == 0:
		return kv, errors.New("no layers")
	case kv.LinearLayers > kv.NumLayers:
		return kv, fmt.Errorf("%d linear layers of %d", kv.LinearLayers, kv.NumLayers)
	case kv.LinearLayers < kv.NumLayers && (kv.NumKVHeads == 0 || kv.HeadDim == 0):
		return kv, errors.New("attention layers without a shape")
	}
	return kv, nil
}
