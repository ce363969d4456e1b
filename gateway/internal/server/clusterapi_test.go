package server

import (
	"testing"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestKVView: /v1/instances shows a hybrid's layout with the bytes per token of its attention layers alone and
// its linear layers' state bytes; a dense model's as before.
func TestKVView(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		kv   engine.KVLayout
		want client.KVLayout
	}{
		{"dense", engine.KVLayout{NumLayers: 32, NumKVHeads: 8, HeadDim: 128, DType: "bfloat16"},
			client.KVLayout{Layers: 32, KVHeads: 8, HeadDim: 128, DType: "bfloat16", BytesPerToken: 128 << 10}},
		{"hybrid", engine.KVLayout{NumLayers: 48, NumKVHeads: 2, HeadDim: 256, DType: "bfloat16", LinearLayers: 36, StateBytes: 77266944},
			client.KVLayout{Layers: 48, KVHeads: 2, HeadDim: 256, DType: "bfloat16", BytesPerToken: 24 << 10, LinearLayers: 36, StateBytes: 77266944}},
	} {
		v := viewOf(cluster.Record{ID: "i", Labels: cluster.Facts{KV: c.kv}.Labels()})
		if v.KV == nil || *v.KV != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, v.KV, c.want)
		}
	}
}
