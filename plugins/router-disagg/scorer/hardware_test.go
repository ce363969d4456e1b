package scorer

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestHardwareScore(t *testing.T) {
	t.Parallel()
	pref := []string{"dgx-spark", "apple-m3-ultra", "", "dgx-spark", "cpu"}
	tests := map[string]struct {
		pref     []string
		hardware string
		node     string
		want     float64
	}{
		"first choice":      {pref: pref, hardware: "dgx-spark", want: 1},
		"second choice":     {pref: pref, hardware: "apple-m3-ultra", want: 1 - 1.0/3},
		"last choice":       {pref: pref, hardware: "cpu", want: 1 - 2.0/3},
		"not listed":        {pref: pref, hardware: "apple-m1", want: 0},
		"empty class":       {pref: pref, hardware: "", want: 0},
		"unknown node":      {pref: pref, hardware: "dgx-spark", node: "n9", want: 0},
		"no preference set": {hardware: "dgx-spark", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			node := tc.node
			if node == "" {
				node = "n1"
			}
			v := view.New(&router.Snapshot{Nodes: []router.Node{{ID: "n1", Hardware: tc.hardware}}, Instances: []router.Instance{{ID: "p", Node: node}}})
			out := []float64{-1}
			NewHardware(tc.pref).Score(&sched.Cycle{View: v}, v.All(), out)
			if math.Abs(out[0]-tc.want) > 1e-12 {
				t.Errorf("hardware %q scored %v, want %v", tc.hardware, out[0], tc.want)
			}
		})
	}
}
