package scorer

import (
	"testing"

	"github.com/duet-ai/duet/plugins/router-disagg/affinity"
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

func TestPrefixScore(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		match affinity.Match
		want  []float64 // for instances a, b, c
	}{
		"no hashes":       {match: affinity.Match{}, want: []float64{0, 0, 0}},
		"nothing known":   {match: affinity.Match{Blocks: 8}, want: []float64{0, 0, 0}},
		"whole prompt":    {match: affinity.Match{Blocks: 8, Hits: []affinity.Hit{{Instance: affinity.IDOf("b"), Blocks: 8}}}, want: []float64{0, 1, 0}},
		"partial and all": {match: affinity.Match{Blocks: 8, Hits: []affinity.Hit{{Instance: affinity.IDOf("c"), Blocks: 8}, {Instance: affinity.IDOf("a"), Blocks: 2}}}, want: []float64{0.25, 0, 1}},
		"unknown holder":  {match: affinity.Match{Blocks: 4, Hits: []affinity.Hit{{Instance: affinity.IDOf("z"), Blocks: 4}}}, want: []float64{0, 0, 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cands := view.New(&router.Snapshot{Instances: []router.Instance{{ID: "a"}, {ID: "b"}, {ID: "c"}}}).All()
			out := make([]float64, len(cands))
			NewPrefix().Score(&sched.Cycle{Prefix: tc.match}, cands, out)
			for i := range out {
				if out[i] != tc.want[i] {
					t.Fatalf("scores %v, want %v", out, tc.want)
				}
			}
		})
	}
}

func TestPrefixUniformAndBound(t *testing.T) {
	t.Parallel()
	hit := func(id string, blocks int) affinity.Hit {
		return affinity.Hit{Instance: affinity.IDOf(id), Blocks: blocks}
	}
	tests := map[string]struct {
		match   affinity.Match
		uniform bool
		bound   float64
	}{
		"no hashes":     {match: affinity.Match{}, uniform: true, bound: 0},
		"nothing known": {match: affinity.Match{Blocks: 8}, uniform: true, bound: 0},
		"deepest hit":   {match: affinity.Match{Blocks: 8, Hits: []affinity.Hit{hit("a", 2), hit("b", 6)}}, bound: 0.75},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &sched.Cycle{Prefix: tc.match}
			if u, ok := NewPrefix().Uniform(c); ok != tc.uniform || ok && u != 0 {
				t.Errorf("Uniform = %v, %v; want 0, %v", u, ok, tc.uniform)
			}
			if b := NewPrefix().Bound(c); b != tc.bound {
				t.Errorf("Bound = %v, want %v", b, tc.bound)
			}
		})
	}
}
