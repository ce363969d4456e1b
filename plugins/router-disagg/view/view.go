// Package view indexes a router.Snapshot for routing: nodes and instances by id, instances by model, links by
// (from, to), and what the instance links say (which instances are prefill-only, which prefill instances serve
// which decode instance). The snapshot's own lookups are linear scans, and a cluster of n nodes has n·(n-1)
// links, so a router that looks up a link per prefill candidate needs the index to stay in microseconds.
//
// A snapshot is immutable and the gateway hands the same *Snapshot to every request until the cluster
// changes, so Cache builds the view once per snapshot and keeps the last few.
package view

import (
	"sync"
	"sync/atomic"

	"github.com/duet-ai/duet/sdk/router"
)

// View is an indexed, read-only snapshot. Its pointers point into the snapshot, which must not change.
type View struct {
	Snapshot *router.Snapshot

	nodes       map[string]*router.Node
	links       map[pair]*router.Link
	instances   map[string]*router.Instance
	byModel     map[string][]*router.Instance
	onDecode    map[string]bool // instance ids on the decode side of some instance link
	onPrefill   map[string]bool // instance ids on the prefill side of some instance link
	linked      map[pair]bool   // (decode id, prefill id) pairs of the instance links
	prefillFrom map[string]bool // decode ids that have at least one linked prefill instance
}

type pair struct{ a, b string }

// New indexes s. When ids repeat, the first wins, as in the snapshot's own lookups.
func New(s *router.Snapshot) *View {
	v := &View{
		Snapshot:  s,
		nodes:     make(map[string]*router.Node, len(s.Nodes)),
		links:     make(map[pair]*router.Link, len(s.Links)),
		instances: make(map[string]*router.Instance, len(s.Instances)),
		byModel:   map[string][]*router.Instance{},
	}
	for i := range s.Nodes {
		if _, dup := v.nodes[s.Nodes[i].ID]; !dup {
			v.nodes[s.Nodes[i].ID] = &s.Nodes[i]
		}
	}
	for i := range s.Links {
		k := pair{s.Links[i].From, s.Links[i].To}
		if _, dup := v.links[k]; !dup {
			v.links[k] = &s.Links[i]
		}
	}
	for i := range s.Instances {
		in := &s.Instances[i]
		if _, dup := v.instances[in.ID]; dup {
			continue
		}
		v.instances[in.ID] = in
		v.byModel[in.Model] = append(v.byModel[in.Model], in)
	}
	if len(s.InstanceLinks) > 0 {
		v.onDecode, v.onPrefill = map[string]bool{}, map[string]bool{}
		v.linked, v.prefillFrom = map[pair]bool{}, map[string]bool{}
		for _, l := range s.InstanceLinks {
			for _, d := range l.DecodeInstances {
				v.onDecode[d] = true
			}
			for _, p := range l.PrefillInstances {
				v.onPrefill[p] = true
			}
			for _, d := range l.DecodeInstances {
				for _, p := range l.PrefillInstances {
					v.linked[pair{d, p}] = true
					v.prefillFrom[d] = true
				}
			}
		}
	}
	return v
}

// Node returns the node with the given id.
func (v *View) Node(id string) (*router.Node, bool) {
	n, ok := v.nodes[id]
	return n, ok
}

// NodeAlive reports whether the node is in the snapshot and alive.
func (v *View) NodeAlive(id string) bool {
	n, ok := v.nodes[id]
	return ok && n.Status == router.NodeAlive
}

// Link returns the link from one node to another.
func (v *View) Link(from, to string) (*router.Link, bool) {
	l, ok := v.links[pair{from, to}]
	return l, ok
}

// Instance returns the instance with the given id.
func (v *View) Instance(id string) (*router.Instance, bool) {
	in, ok := v.instances[id]
	return in, ok
}

// Instances returns the instances of a model, in snapshot order. The slice belongs to the view: do not modify it.
func (v *View) Instances(model string) []*router.Instance { return v.byModel[model] }

// PrefillOnly reports whether the instance links name the instance only on their prefill side, which makes it
// a prefill-only instance whatever its role says.
func (v *View) PrefillOnly(id string) bool { return v.onPrefill[id] && !v.onDecode[id] }

// HasLinkedPrefill reports whether the instance links give the decode instance at least one prefill instance.
func (v *View) HasLinkedPrefill(decode string) bool { return v.prefillFrom[decode] }

// Linked reports whether an instance link pairs the decode instance with the prefill instance.
func (v *View) Linked(decode, prefill string) bool { return v.linked[pair{decode, prefill}] }

// Cache keeps the views of the last few snapshots it was asked about. It is safe for concurrent use.
type Cache struct {
	last atomic.Pointer[View]

	mu   sync.Mutex
	ring [cacheSize]*View
	next int
}

// cacheSize covers requests that still route against the previous snapshots while a new one comes in.
const cacheSize = 4

// Get returns the view of s, building it if none of the cached views is of s. Views are matched by pointer:
// a snapshot is immutable, and a cached view keeps its snapshot alive, so the pointer cannot be reused.
func (c *Cache) Get(s *router.Snapshot) *View {
	if v := c.last.Load(); v != nil && v.Snapshot == s {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.ring {
		if v != nil && v.Snapshot == s {
			c.last.Store(v)
			return v
		}
	}
	v := New(s)
	c.ring[c.next] = v
	c.next = (c.next + 1) % cacheSize
	c.last.Store(v)
	return v
}
