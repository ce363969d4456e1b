package model

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseConfig: no config.json, however malformed, panics the parser, and every accepted one satisfies the
// invariants backends rely on.
func FuzzParseConfig(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"quantization":{"bits":4,"group_size":32,"x":false}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0 || c.HeadDim <= 0 || c.HeadDim%2 != 0 ||
			c.HiddenSize > maxDim || c.VocabSize > maxDim || c.NumLayers > maxDim || !(c.RMSNormEps > 0) || !(c.RopeTheta > 1) {
			t.Fatalf("accepted an inconsistent config: %+v", c)
		}
		if q := c.Quantization; q != nil {
			if q.validate() != nil {
				t.Fatalf("accepted bad quantization %+v", q)
			}
		}
	})
}
