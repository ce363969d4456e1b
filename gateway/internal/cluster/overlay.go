package cluster

import (
	"slices"
	"sync"
	"time"

	"github.com/duet-ai/duet/sdk/router"
)

// LocalLoads is where this node's exact in-flight counts come from (the node's instance registry).
type LocalLoads interface {
	// LoadGen changes whenever a local in-flight count does.
	LoadGen() uint64
	// LocalLoads is the in-flight count of each local instance, by id.
	LocalLoads() map[string]int
}

// LocalView builds the router's snapshots: the cluster's (converted once per cluster snapshot by the agent)
// with this node's own in-flight counts laid over its instances, since gossip carries them late. A new one is
// made when either changed, at most every loadRefresh for load changes alone.
type LocalView struct {
	agent *Agent
	loads LocalLoads

	mu       sync.Mutex
	base     *router.Snapshot
	loadGen  uint64
	builtAt  time.Time
	version  uint64
	snapshot *router.Snapshot
}

// NewLocalView lays loads over the agent's router snapshots.
func NewLocalView(a *Agent, loads LocalLoads) *LocalView { return &LocalView{agent: a, loads: loads} }

// loadRefresh bounds how often local load changes alone rebuild the snapshot.
const loadRefresh = 100 * time.Millisecond

// Current is the router's snapshot now.
func (v *LocalView) Current() *router.Snapshot {
	base := v.agent.RouterSnapshot()
	gen := v.loads.LoadGen()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.snapshot != nil && base == v.base && (gen == v.loadGen || time.Since(v.builtAt) < loadRefresh) {
		return v.snapshot
	}
	loads := v.loads.LocalLoads()
	snap := *base
	snap.Instances = slices.Clone(base.Instances)
	for i := range snap.Instances {
		in := &snap.Instances[i]
		if n, ok := loads[in.ID]; ok && in.Node == snap.Self {
			in.Load.InFlight, in.Load.UpdatedAt = n, time.Now()
		}
	}
	v.version++
	snap.Version = v.version
	v.base, v.loadGen, v.builtAt, v.snapshot = base, gen, time.Now(), &snap
	return v.snapshot
}
