package serfcluster

import (
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// Snapshot is an immutable view of the cluster: members with their link state, the replicated tables with
// each instance's effective status and load, and RTT estimates. Getting one is an atomic load. Snapshots are
// shared between all readers, so treat everything reachable from one (slices, label maps) as read-only.
type Snapshot struct {
	// Version increases by one with every snapshot this Cluster publishes (it restarts with the process).
	Version uint64    `json:"version"`
	Built   time.Time `json:"built"`
	// Local is this node's ID.
	Local NodeID `json:"local"`
	// Digest summarises the tables' live keys and revisions; equal digests mean equal tables.
	Digest string `json:"digest"`
	// Nodes are all known members, failed and left ones included until serf reaps them, sorted by ID.
	Nodes []Node `json:"nodes"`
	// Instances are sorted by ID. Instances of failed or unknown nodes are reported unavailable; those of
	// nodes that left are gone.
	Instances []Instance `json:"instances"`
	// Links are sorted by link ID.
	Links []InstanceLink `json:"links"`

	nodeIdx map[NodeID]int
	instIdx map[string]int
	linkIdx map[string]int
	coords  map[NodeID]*coordinate.Coordinate

	// export is what StateHandler serves, prepared by the event loop.
	export *stateExport
}

// stateExport is a node's table state for peers: entries as of built (tombstone TTLs relative to built)
// and loads.
type stateExport struct {
	built   time.Time
	entries []wireEntry
	loads   []wireLoad
}

// Node returns the eligible node with the given ID.
func (s *Snapshot) Node(id NodeID) (Node, bool) {
	i, ok := s.nodeIdx[id]
	if !ok {
		return Node{}, false
	}
	return s.Nodes[i], true
}

// Instance returns the instance with the given ID.
func (s *Snapshot) Instance(id string) (Instance, bool) {
	i, ok := s.instIdx[id]
	if !ok {
		return Instance{}, false
	}
	return s.Instances[i], true
}

// Link returns the instance link with the given ID.
func (s *Snapshot) Link(id string) (InstanceLink, bool) {
	i, ok := s.linkIdx[id]
	if !ok {
		return InstanceLink{}, false
	}
	return s.Links[i], true
}

// RTT estimates the round-trip time between two nodes from their Vivaldi coordinates. It is false until
// both coordinates are known: this node learns a peer's coordinate when it probes that peer.
func (s *Snapshot) RTT(from, to NodeID) (time.Duration, bool) {
	if from == to {
		return 0, true
	}
	a, b := s.coords[from], s.coords[to]
	if a == nil || b == nil || !a.IsCompatibleWith(b) {
		return 0, false
	}
	return a.DistanceTo(b), true
}

// Path answers: from node from, which address of node to should traffic use, and how good is that path.
// It is false when either node is unknown or ineligible, or to advertises no address and has no gossip
// address.
func (s *Snapshot) Path(from, to NodeID) (Path, bool) {
	a, ok := s.Node(from)
	if !ok {
		return Path{}, false
	}
	b, ok := s.Node(to)
	if !ok {
		return Path{}, false
	}
	rtt, rttOK := s.RTT(from, to)
	return choosePath(a, b, rtt, rttOK)
}
