package scorer

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestLoadScore(t *testing.T) {
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
			NewLoad().Score(nil, cands, out)
			for i := range out {
				if math.Abs(out[i]-tc.want[i]) > 1e-12 {
					t.Errorf("score %v, want %v", out, tc.want)
					break
				}
			}
		})
	}
}

func TestLoadSubsetHolds(t *testing.T) {
	t.Parallel()
	loads := []router.Load{{InFlight: 1}, {InFlight: 4}, {InFlight: 2}, {InFlight: 4}}
	snap := &router.Snapshot{}
	for i, l := range loads {
		snap.Instances = append(snap.Instances, router.Instance{ID: string(rune('a' + i)), Load: l})
	}
	cands := view.New(snap).All()
	all := make([]float64, len(cands))
	NewLoad().Score(nil, cands, all)
	tests := map[string]struct {
		kept []bool
		want bool
	}{
		"all kept":             {kept: []bool{true, true, true, true}, want: true},
		"a light one dropped":  {kept: []bool{false, true, false, true}, want: true},
		"one of the busiest":   {kept: []bool{true, false, true, true}, want: false}, // the other is left, but the scores do not say so
		"both of the busiest":  {kept: []bool{true, false, true, false}, want: false},
		"the lightest dropped": {kept: []bool{false, true, true, true}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := NewLoad().SubsetHolds(all, tc.kept)
			if got != tc.want {
				t.Fatalf("SubsetHolds = %v, want %v", got, tc.want)
			}
			if !got {
				return
			}
			// Where it holds, scoring the subset again gives the same scores.
			var sub []*view.Instance
			var want []float64
			for i, k := range tc.kept {
				if k {
					sub, want = append(sub, cands[i]), append(want, all[i])
				}
			}
			again := make([]float64, len(sub))
			NewLoad().Score(nil, sub, again)
			for i := range again {
				if again[i] != want[i] {
					t.Fatalf("subset scores %v, want %v", again, want)
				}
			}
		})
	}
}
