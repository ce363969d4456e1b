package scorer

import (
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestLocalityScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		source, node string
		want         float64
	}{
		"on the source node":   {source: "n1", node: "n1", want: 1},
		"elsewhere":            {source: "n1", node: "n2", want: 0},
		"source unknown":       {source: "", node: "n1", want: 0},
		"both unknown":         {source: "", node: "", want: 0},
		"case matters in ids":  {source: "N1", node: "n1", want: 0},
		"instance node absent": {source: "n1", node: "", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := []float64{0.5}
			NewLocality().Score(&sched.Cycle{Request: &router.Request{SourceNode: tc.source}}, view.New(&router.Snapshot{Instances: []router.Instance{{Node: tc.node}}}).All(), out)
			if out[0] != tc.want {
				t.Errorf("source %q, node %q scored %v, want %v", tc.source, tc.node, out[0], tc.want)
			}
		})
	}
}
