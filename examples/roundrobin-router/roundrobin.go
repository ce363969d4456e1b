// Package roundrobin is the smallest useful router: it cycles through the eligible decode instances of the
// requested model and never asks for remote prefill. It is the reference for writing a router plugin.
package roundrobin

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/duet-ai/duet/sdk/router"
)

// Router cycles per model. The zero value is ready to use.
type Router struct {
	mu   sync.Mutex
	next map[string]uint64
}

var _ router.Router = (*Router)(nil)

// New returns a round-robin router.
func New() *Router { return &Router{} }

// Route picks the next eligible instance of the model that the request does not exclude.
func (r *Router) Route(_ context.Context, req router.Request, snap *router.Snapshot) (router.Decision, error) {
	alive := make(map[string]bool, len(snap.Nodes))
	for _, n := range snap.Nodes {
		alive[n.ID] = n.Status == router.NodeAlive
	}
	var candidates []router.Instance
	for _, in := range snap.Instances {
		if in.Model == req.Model && in.Status == router.InstanceReady && alive[in.Node] && in.Role != router.RolePrefill &&
			!slices.Contains(req.Exclude, in.ID) {
			candidates = append(candidates, in)
		}
	}
	if len(candidates) == 0 {
		return router.Decision{}, fmt.Errorf("%w: model %q", router.ErrNoCandidate, req.Model)
	}
	r.mu.Lock()
	if r.next == nil {
		r.next = map[string]uint64{}
	}
	n := r.next[req.Model]
	r.next[req.Model] = n + 1
	r.mu.Unlock()
	pick := candidates[n%uint64(len(candidates))]
	return router.Decision{
		DecodeInstance: pick.ID,
		DecodeNode:     pick.Node,
		Reason:         fmt.Sprintf("round robin: turn %d of %d candidates", n%uint64(len(candidates))+1, len(candidates)),
	}, nil
}
