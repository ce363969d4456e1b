package load

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		loads []router.Load
		want  []float64
	}{
		"idle":                {loads: []router.Load{{}, {}}, want: []float64{1, 1}},
		"proportional":        {loads: []router.Load{{InFlight: 0}, {InFlight: 2}, {InFlight: 4}}, want: []float64{1, 0.5, 0}},
		"queued counts":       {loads: []router.Load{{InFlight: 1, Queued: 3}, {InFlight: 2}}, want: []float64{0, 0.5}},
		"close loads":         {loads: []router.Load{{InFlight: 10}, {InFlight: 11}}, want: []float64{1 - 10.0/11, 0}},
		"single busy":         {loads: []router.Load{{InFlight: 7}}, want: []float64{0}},
		"negative is nothing": {loads: []router.Load{{InFlight: -5}, {InFlight: 5}}, want: []float64{1, 0}},
		"equal busy":          {loads: []router.Load{{Queued: 3}, {InFlight: 3}}, want: []float64{0, 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			snap := &router.Snapshot{}
			for i, l := range tc.loads {
				snap.Instances = append(snap.Instances, router.Instance{ID: string(rune('a' + i)), Load: l})
			}
			cands := view.New(snap).All()
			out := make([]float64, len(cands))
			New().Score(nil, cands, out)
			for i := range out {
				if math.Abs(out[i]-tc.want[i]) > 1e-12 {
					t.Errorf("score %v, want %v", out, tc.want)
					break
				}
			}
		})
	}
}
