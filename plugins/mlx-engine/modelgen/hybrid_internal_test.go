package modelgen

import "testing"

// TestHybridPresets: the benchmark presets are valid options (they are too large to generate in a test).
func TestHybridPresets(t *testing.T) {
	for name, o := range map[string]Options{"HybridBench": HybridBench(), "HybridBenchDense": HybridBenchDense()} {
		if err := o.normalize(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	o := HybridBench()
	if err := o.normalize(); err != nil || o.LinearValueHeads*o.LinearValueDim != 2048 || o.NumLayers != 24 {
		t.Errorf("HybridBench: %v, %+v", err, o)
	}
}
