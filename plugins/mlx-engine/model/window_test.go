package model_test

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// TestFingerprintWindows: layers' kinds and windows join Fingerprint and KVCompat only for a model that has
// windows, so a dense model keeps its strings, and two window patterns over the same weights never match.
func TestFingerprintWindows(t *testing.T) {
	t.Parallel()
	m, err := model.Load(gen(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const tok = "tokenizer-id"
	denseFP, denseKV := m.Fingerprint(), m.KVCompat(tok)
	setWindows := func(w ...int) {
		for i := range m.Config.Arch.Layers {
			m.Config.Arch.Layers[i].Attn.Window = w[i%len(w)]
		}
	}
	seen := map[string]string{denseFP: "dense", denseKV: "dense"}
	for _, tc := range []struct {
		name    string
		windows []int
	}{
		{"alternate 8", []int{8, 0}},
		{"alternate 16", []int{16, 0}},
		{"other layers", []int{0, 8}},
		{"all 8", []int{8}},
	} {
		setWindows(tc.windows...)
		fp, kv := m.Fingerprint(), m.KVCompat(tok)
		if len(fp) != len(denseFP) || fp[:4] != "fp1:" || kv[:len("kv1:llama-")] != "kv1:llama-" {
			t.Errorf("%s: fingerprint %q, KVCompat %q", tc.name, fp, kv)
		}
		for _, s := range []string{fp, kv} {
			if other, dup := seen[s]; dup {
				t.Errorf("%s: %q also names %s", tc.name, s, other)
			}
			seen[s] = tc.name
		}
		if m.Fingerprint() != fp || m.KVCompat(tok) != kv {
			t.Errorf("%s: strings are not stable", tc.name)
		}
	}
	setWindows(0)
	if m.Fingerprint() != denseFP || m.KVCompat(tok) != denseKV {
		t.Error("without windows the strings are not the dense ones")
	}
}
