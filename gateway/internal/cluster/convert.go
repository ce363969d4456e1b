package cluster

import (
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/serfcluster"
)

// converter turns cluster snapshots into router snapshots, once per cluster snapshot (loads change it every
// LoadInterval per node). The node-to-node paths, n² of them, are recomputed only when the membership changed
// or pathCacheTTL passed (their RTT estimates drift slowly).
type converter struct {
	mu       sync.Mutex
	version  uint64
	last     *router.Snapshot
	pathsKey uint64
	pathsAt  time.Time
	paths    []router.Path
	// instances caches each instance's conversion by its revision: labels are decoded once per write, not
	// once per load update.
	instances map[string]cachedInstance
}

type cachedInstance struct {
	rev    serfcluster.Revision
	status serfcluster.InstanceStatus
	ri     router.Instance
}

// RouterSnapshot is the current cluster snapshot as the router sees it. Its Version is the cluster
// snapshot's; callers that lay other facts over it (this node's exact loads) give their copies versions of
// their own.
func (a *Agent) RouterSnapshot() *router.Snapshot {
	s := a.c.Snapshot()
	c := &a.conv
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.version == s.Version {
		return c.last
	}
	if key := membershipKey(s); key != c.pathsKey || time.Since(c.pathsAt) > pathCacheTTL || c.paths == nil {
		c.paths, c.pathsKey, c.pathsAt = ConvertPaths(s), key, time.Now()
	}
	c.last, c.version = c.convert(s), s.Version
	return c.last
}

// convert is Convert with the instance cache.
func (c *converter) convert(s *serfcluster.Snapshot) *router.Snapshot {
	out := Convert(&serfcluster.Snapshot{Version: s.Version, Local: s.Local, Nodes: s.Nodes, Links: s.Links}, c.paths)
	if c.instances == nil {
		c.instances = map[string]cachedInstance{}
	}
	next := make(map[string]cachedInstance, len(s.Instances))
	out.Instances = make([]router.Instance, 0, len(s.Instances))
	for _, in := range s.Instances {
		ci, ok := c.instances[in.ID]
		if !ok || ci.rev != in.Revision || ci.status != in.Status {
			ci = cachedInstance{rev: in.Revision, status: in.Status, ri: RouterInstance(in)}
		}
		next[in.ID] = ci
		ri := ci.ri
		ri.Load = router.Load{InFlight: in.Load.InFlight, Queued: in.Load.Queued, UpdatedAt: in.Load.UpdatedAt}
		ri.Speed = RouterSpeed(in.Load.Speed)
		out.Instances = append(out.Instances, ri)
	}
	c.instances = next
	return out
}

// membershipKey hashes what the paths depend on besides RTT: each eligible node's id, status and addresses.
func membershipKey(s *serfcluster.Snapshot) uint64 {
	h := fnv.New64a()
	for _, n := range s.Nodes {
		h.Write([]byte(n.ID))
		h.Write([]byte(n.Status))
		h.Write([]byte(n.Gossip.String()))
		for _, a := range n.Addresses {
			h.Write(a.IP.AsSlice())
			h.Write([]byte(a.Kind))
		}
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// ConvertPaths is every path between two eligible nodes of s, in both directions.
func ConvertPaths(s *serfcluster.Snapshot) []router.Path {
	var out []router.Path
	for _, a := range s.Nodes {
		if !a.Eligible() {
			continue
		}
		for _, b := range s.Nodes {
			if !b.Eligible() || a.ID == b.ID {
				continue
			}
			p, ok := s.Path(a.ID, b.ID)
			if !ok {
				continue
			}
			rp := router.Path{
				From: string(a.ID), To: string(b.ID), Kind: string(p.Kind), SpeedMbps: int64(p.SpeedMbps),
				Quality: p.Quality,
			}
			if p.Address.IP.IsValid() {
				rp.Address = p.Address.IP.String()
			}
			if p.RTTKnown {
				rp.RTT = p.RTT
			}
			out = append(out, rp)
		}
	}
	return out
}

// Convert builds the router's snapshot of s with the given paths.
func Convert(s *serfcluster.Snapshot, paths []router.Path) *router.Snapshot {
	out := &router.Snapshot{Version: s.Version, Self: string(s.Local), Paths: paths}
	for _, n := range s.Nodes {
		if !n.Eligible() {
			continue
		}
		out.Nodes = append(out.Nodes, router.Node{
			ID: string(n.ID), Name: n.Name, Status: string(n.Status), APIAddress: n.Tags.APIAddr,
			KVAddress: n.Tags.KVAddr, Version: n.Tags.Version, Hardware: n.Tags.HardwareClass,
		})
	}
	out.Instances = make([]router.Instance, 0, len(s.Instances))
	for _, in := range s.Instances {
		out.Instances = append(out.Instances, RouterInstance(in))
	}
	for _, l := range s.Links {
		out.InstanceLinks = append(out.InstanceLinks, router.InstanceLink{
			ID: l.LinkID, PrefillInstances: l.PrefillInstances, DecodeInstances: l.DecodeInstances,
		})
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].ID < out.Nodes[j].ID })
	return out
}

// RouterInstance converts one instance record. Labels that do not decode leave the facts unknown.
func RouterInstance(in serfcluster.Instance) router.Instance {
	f, _ := FactsFromLabels(in.Labels)
	return router.Instance{
		ID: in.ID, Model: in.Model, Node: string(in.Node), Engine: in.Engine, Backend: f.Backend,
		Role: string(in.Role), Status: string(in.Status), KVEndpoint: in.KVEndpoint, Fingerprint: in.Fingerprint,
		KVCompat: f.KVCompat, ContextLength: f.ContextLength,
		Load:  router.Load{InFlight: in.Load.InFlight, Queued: in.Load.Queued, UpdatedAt: in.Load.UpdatedAt},
		Speed: RouterSpeed(in.Load.Speed),
	}
}
