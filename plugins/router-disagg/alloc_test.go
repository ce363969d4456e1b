//go:build !race

package routerdisagg_test

import (
	"context"
	"testing"

	"github.com/duet-ai/duet/sdk/router"
)

// TestRouteAllocations guards the allocation count of a decision: the scores map, the endpoint list and its
// addresses, and the reason string, whatever the number of instances.
func TestRouteAllocations(t *testing.T) {
	tests := map[string]struct {
		req  router.Request
		most float64
	}{
		"decode only, with prefix hashes":    {req: router.Request{Model: "m", PromptTokens: 500, PrefixHashes: hashes(1, 81)}, most: 6},
		"decode and two prefill endpoints":   {req: router.Request{Model: "m", PromptTokens: 5200}, most: 12},
		"a retry, with an excluded instance": {req: router.Request{Model: "m", PromptTokens: 5200, Exclude: []string{"i0001"}}, most: 12},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{10, 1000} {
				r := newRouter(t, nil)
				snap := benchSnapshot(n)
				ctx := context.Background()
				route(t, r, tc.req, snap) // warm the view and the scratch pool
				got := testing.AllocsPerRun(50, func() {
					if _, err := r.Route(ctx, tc.req, snap); err != nil {
						t.Fatal(err)
					}
				})
				if got > tc.most {
					t.Errorf("%d instances: %v allocations per route, want at most %v", n, got, tc.most)
				}
			}
		})
	}
}
