package scorer

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestKVUtilizationScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		util, want float64
	}{
		"empty":        {util: 0, want: 1},
		"quarter":      {util: 0.25, want: 0.75},
		"full":         {util: 1, want: 0},
		"over full":    {util: 1.5, want: 0},
		"negative":     {util: -0.5, want: 1},
		"nan is full":  {util: math.NaN(), want: 0},
		"+inf is full": {util: math.Inf(1), want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := make([]float64, 1)
			NewKVUtilization().Score(nil, view.New(&router.Snapshot{Instances: []router.Instance{{Load: router.Load{KVUtilization: tc.util}}}}).All(), out)
			if out[0] != tc.want {
				t.Errorf("KVUtilization %v scored %v, want %v", tc.util, out[0], tc.want)
			}
		})
	}
}
