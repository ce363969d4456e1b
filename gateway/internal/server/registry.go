package server

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// Instance is a model instance this gateway serves, with its live load.
type Instance struct {
	Desc     engine.Description
	LoadedAt time.Time
	inFlight atomic.Int64
}

// Registry holds the gateway's instances and the routing snapshot built from them. Snapshots are immutable and
// rebuilt when instances change or, at a bounded rate, when their load does.
type Registry struct {
	nodeID string

	mu        sync.RWMutex
	instances map[string]*Instance
	version   uint64
	lastLoad  map[string]int64

	snap atomic.Pointer[router.Snapshot]
}

// NewRegistry returns an empty registry for the local node.
func NewRegistry(nodeID string) *Registry {
	r := &Registry{nodeID: nodeID, instances: map[string]*Instance{}}
	r.rebuildLocked()
	return r
}

// Set replaces the instances with descs (after an engine start or restart). Load counters of instances that
// stay are kept.
func (r *Registry) Set(descs []engine.Description) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*Instance, len(descs))
	for _, d := range descs {
		in, ok := r.instances[d.InstanceID]
		if !ok || in.Desc.Fingerprint != d.Fingerprint {
			in = &Instance{LoadedAt: time.Now()}
		}
		in.Desc = d
		next[d.InstanceID] = in
	}
	r.instances = next
	r.rebuildLocked()
}

// Get returns an instance by id.
func (r *Registry) Get(id string) (*Instance, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	in, ok := r.instances[id]
	return in, ok
}

// ByModel returns the instances serving a model.
func (r *Registry) ByModel(model string) []*Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Instance
	for _, in := range r.instances {
		if in.Desc.ModelID == model {
			out = append(out, in)
		}
	}
	return out
}

// All returns every instance, sorted by id.
func (r *Registry) All() []*Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Instance, 0, len(r.instances))
	for _, in := range r.instances {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Desc.InstanceID < out[j].Desc.InstanceID })
	return out
}

// Snapshot returns the current routing snapshot.
func (r *Registry) Snapshot() *router.Snapshot { return r.snap.Load() }

// RefreshLoad rebuilds the snapshot when any instance's load changed since the last build. The server calls it
// on a ticker, which bounds the rate.
func (r *Registry) RefreshLoad() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, in := range r.instances {
		if r.lastLoad[id] != in.inFlight.Load() {
			r.rebuildLocked()
			return
		}
	}
}

func (r *Registry) rebuildLocked() {
	r.version++
	s := &router.Snapshot{
		Version: r.version,
		Self:    r.nodeID,
		Nodes:   []router.Node{{ID: r.nodeID, Name: r.nodeID, Status: router.NodeAlive}},
	}
	r.lastLoad = make(map[string]int64, len(r.instances))
	for id, in := range r.instances {
		n := in.inFlight.Load()
		r.lastLoad[id] = n
		s.Instances = append(s.Instances, router.Instance{
			ID: id, Model: in.Desc.ModelID, Node: r.nodeID, Engine: in.Desc.Backend, Role: router.RoleBoth,
			Status: router.InstanceReady, KVEndpoint: in.Desc.PrefillEndpoint, Fingerprint: in.Desc.Fingerprint,
			ContextLength: in.Desc.ContextLength,
			Load:          router.Load{InFlight: int(n), UpdatedAt: time.Now()},
		})
	}
	sort.Slice(s.Instances, func(i, j int) bool { return s.Instances[i].ID < s.Instances[j].ID })
	r.snap.Store(s)
}
