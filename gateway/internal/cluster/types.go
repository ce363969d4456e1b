package cluster

import "github.com/duet-ai/duet/serfcluster"

// The gateway reaches the cluster's tables only through this package: these are serfcluster's names for what
// it reads and writes there, so that no other package of the gateway imports serfcluster.
type (
	// Cluster is the serf agent's replicated tables (members, instances, links, speeds).
	Cluster = serfcluster.Cluster
	// Snapshot is one consistent view of the cluster's tables.
	Snapshot = serfcluster.Snapshot
	// Record is an instance as the cluster's tables hold it (any node's; Instance is this node's to publish).
	Record = serfcluster.Instance
	// InstanceLink is one of exo's instance links: prefill instances that serve decode instances.
	InstanceLink = serfcluster.InstanceLink
	// NodeID names a member.
	NodeID = serfcluster.NodeID
	// Role is what an instance does: prefill, decode or both.
	Role = serfcluster.Role
	// InstanceStatus is an instance's lifecycle state.
	InstanceStatus = serfcluster.InstanceStatus
	// Speed is an instance's measured speeds, as published.
	Speed = serfcluster.Speed
	// Timings are the gossip's intervals and timeouts.
	Timings = serfcluster.Timings
)

// Roles and statuses, as serfcluster defines them.
const (
	RolePrefill = serfcluster.RolePrefill
	RoleDecode  = serfcluster.RoleDecode
	RoleBoth    = serfcluster.RoleBoth

	InstanceLoading     = serfcluster.InstanceLoading
	InstanceReady       = serfcluster.InstanceReady
	InstanceDraining    = serfcluster.InstanceDraining
	InstanceUnavailable = serfcluster.InstanceUnavailable

	StatusAlive   = serfcluster.StatusAlive
	StatusSuspect = serfcluster.StatusSuspect

	// StatePath is where a node serves its table state to peers (Agent.StateHandler).
	StatePath = serfcluster.StatePath
	// MaxSpeedIngress bounds the ingress links a speed record carries.
	MaxSpeedIngress = serfcluster.MaxSpeedIngress
)

// ErrNotFound is returned for a link or instance the tables do not hold.
var ErrNotFound = serfcluster.ErrNotFound

// LANTimings are gossip timings for a LAN; LocalTimings detect failures a few times faster, for a cluster on
// one machine.
func LANTimings() Timings { return serfcluster.LANTimings() }

// LocalTimings: see LANTimings.
func LocalTimings() Timings { return serfcluster.LocalTimings() }
