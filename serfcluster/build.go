package serfcluster

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// build makes the next snapshot from the loop's state. Called only from the event loop (and once by New
// before the loop starts).
func (c *Cluster) build(now time.Time) *Snapshot {
	c.version++
	s := &Snapshot{
		Version: c.version,
		Built:   now,
		Local:   c.id,
		Digest:  c.digestHex(),
		nodeIdx: make(map[NodeID]int),
		instIdx: make(map[string]int),
		linkIdx: make(map[string]int),
		coords:  make(map[NodeID]*coordinate.Coordinate),
	}

	s.Nodes = make([]Node, 0, len(c.members))
	for name, m := range c.members {
		n := Node{
			ID: m.tags.NodeID, Name: name, Status: m.status(), Tags: m.tags, Addresses: m.addrs,
			Gossip: addrPort(m.m.Addr, m.m.Port), Problem: m.problem,
		}
		s.Nodes = append(s.Nodes, n)
	}
	// One member per ID is eligible: this node itself, else an alive one, else the first by name. Others
	// claiming the same ID (a misconfiguration, or a restart under a new name) are listed with a problem.
	rank := func(n Node) int {
		switch {
		case n.Name == c.cfg.NodeName:
			return 0
		case n.Status == StatusAlive:
			return 1
		}
		return 2
	}
	slices.SortFunc(s.Nodes, func(a, b Node) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Problem != "" {
			continue
		}
		if j, dup := s.nodeIdx[n.ID]; dup {
			n.Problem = fmt.Sprintf("node id %q is also claimed by member %q", n.ID, s.Nodes[j].Name)
			continue
		}
		s.nodeIdx[n.ID] = i
		if coord := c.coords[n.Name]; coord != nil {
			s.coords[n.ID] = coord
		}
	}

	live := c.instances.Live()
	s.Instances = make([]Instance, 0, len(live))
	for _, e := range live {
		in := e.Value
		in.Revision = Revision{LTime: e.Rev.LTime, Origin: NodeID(e.Rev.Origin)}
		n, ok := s.Node(in.Node)
		switch {
		case ok && n.Status == StatusLeft:
			continue // removeNode tombstones these; this covers the moment before
		case !ok || n.Status == StatusFailed:
			in.Status = InstanceUnavailable
		}
		if le, ok := c.loads[in.ID]; ok && le.origin == in.Node {
			in.Load = le.load
		}
		s.instIdx[in.ID] = len(s.Instances)
		s.Instances = append(s.Instances, in)
	}

	links := c.links.Live()
	s.Links = make([]InstanceLink, 0, len(links))
	for _, e := range links {
		l := e.Value
		l.Revision = Revision{LTime: e.Rev.LTime, Origin: NodeID(e.Rev.Origin)}
		s.linkIdx[l.LinkID] = len(s.Links)
		s.Links = append(s.Links, l)
	}

	s.export = c.buildExport(now)
	return s
}

// buildExport prepares what StateHandler serves. The table entries are re-encoded only when the tables
// changed; loads change far more often and are cheap.
func (c *Cluster) buildExport(now time.Time) *stateExport {
	ex := &stateExport{built: now}
	if c.export != nil && c.exportGen == c.tablesGen {
		ex.built, ex.entries = c.export.built, c.export.entries
	} else {
		for _, e := range c.instances.All(now) {
			ex.entries = append(ex.entries, instanceEntryToWire(e))
		}
		for _, e := range c.links.All(now) {
			ex.entries = append(ex.entries, linkEntryToWire(e))
		}
		c.exportGen = c.tablesGen
	}
	ex.loads = make([]wireLoad, 0, len(c.loads))
	for id, le := range c.loads {
		ex.loads = append(ex.loads, loadToWire(id, le, true))
	}
	slices.SortFunc(ex.loads, func(a, b wireLoad) int { return cmp.Compare(a.ID, b.ID) })
	c.export = ex
	return ex
}

// SnapshotOf builds a snapshot from its parts, for tests and tools that need one without a cluster (a router's
// table tests, a benchmark of what consumes snapshots). Nodes are sorted by ID and indexed (the first of a
// repeated ID is the eligible one); instances of nodes that are not alive are reported unavailable, as a real
// snapshot does. It has no RTT estimates and serves no state.
func SnapshotOf(local NodeID, version uint64, nodes []Node, instances []Instance, links []InstanceLink) *Snapshot {
	s := &Snapshot{
		Version: version, Built: time.Now(), Local: local,
		nodeIdx: make(map[NodeID]int), instIdx: make(map[string]int), linkIdx: make(map[string]int),
		coords: make(map[NodeID]*coordinate.Coordinate),
	}
	s.Nodes = slices.Clone(nodes)
	slices.SortStableFunc(s.Nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	for i, n := range s.Nodes {
		if _, dup := s.nodeIdx[n.ID]; dup || n.Problem != "" {
			continue
		}
		s.nodeIdx[n.ID] = i
	}
	s.Instances = slices.Clone(instances)
	slices.SortFunc(s.Instances, func(a, b Instance) int { return cmp.Compare(a.ID, b.ID) })
	for i := range s.Instances {
		in := &s.Instances[i]
		if n, ok := s.Node(in.Node); !ok || n.Status == StatusFailed {
			in.Status = InstanceUnavailable
		}
		s.instIdx[in.ID] = i
	}
	s.Links = slices.Clone(links)
	slices.SortFunc(s.Links, func(a, b InstanceLink) int { return cmp.Compare(a.LinkID, b.LinkID) })
	for i, l := range s.Links {
		s.linkIdx[l.LinkID] = i
	}
	return s
}
