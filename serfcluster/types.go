package serfcluster

import (
	"net/netip"
	"time"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// NodeID identifies a gateway. It must stay the same across restarts: instances name their node by it, and a
// restarted node reclaims its instances by it.
type NodeID string

// Status is a member's health as the gossip layer sees it.
type Status string

// Member states.
const (
	StatusAlive Status = "alive"
	// StatusSuspect is reserved: memberlist v0.7.0 keeps its suspicion state private (it does not reach
	// serf's members or events), so no node is reported suspect today. Routers should still treat it like
	// alive-but-degraded so that exposing it later needs no change on their side.
	StatusSuspect Status = "suspect"
	StatusFailed  Status = "failed"
	// StatusLeft covers both a graceful leave in progress and a completed one.
	StatusLeft Status = "left"
)

// Tags is the typed identity a node gossips with its membership: slow-changing facts only, because every
// change is a membership update for the whole cluster and the encoded form must fit serf's 512 bytes.
type Tags struct {
	NodeID NodeID `json:"node_id"`
	// APIAddr is the gateway's API address (host:port), where peers forward requests.
	APIAddr string `json:"api_addr"`
	// KVAddr is the node's KV wire address (host:port), if it serves one.
	KVAddr string `json:"kv_addr,omitempty"`
	// Version is the gateway's software version.
	Version string `json:"version,omitempty"`
	// HardwareClass is a short label such as "m3-ultra" or "dgx-spark".
	HardwareClass string `json:"hardware_class,omitempty"`
	// StateURL is where peers pull this node's full table state. When empty in Config it defaults to
	// "http://" + APIAddr + StatePath, and it is then not sent at all, to save tag bytes.
	StateURL string `json:"state_url,omitempty"`
}

// Node is one member of the cluster as this node sees it.
type Node struct {
	ID     NodeID `json:"id"`
	Name   string `json:"name"`
	Status Status `json:"status"`
	Tags   Tags   `json:"tags"`
	// Addresses are the node's advertised addresses, best first.
	Addresses []netif.Address `json:"addresses,omitempty"`
	// Gossip is the serf address the node is reached at.
	Gossip netip.AddrPort `json:"gossip"`
	// Problem says why the node is ineligible (its tags do not decode, or its ID is taken); empty when fine.
	// An ineligible node is listed but has no ID, no instances and no paths.
	Problem string `json:"problem,omitempty"`
}

// Eligible reports whether the node's identity decoded cleanly.
func (n Node) Eligible() bool { return n.Problem == "" }

// Role is which half of disaggregated inference an instance serves.
type Role string

// Instance roles.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
	RoleBoth    Role = "both"
)

// InstanceStatus is an instance's readiness.
type InstanceStatus string

// Instance states. A snapshot reports InstanceUnavailable for every instance of a failed node, whatever the
// node last said.
const (
	InstanceReady       InstanceStatus = "ready"
	InstanceLoading     InstanceStatus = "loading"
	InstanceUnavailable InstanceStatus = "unavailable"
	InstanceDraining    InstanceStatus = "draining"
)

// Instance is one loaded model served by an engine on one node. Only the node an instance belongs to writes
// it; that is what lets a failed node's instances be marked unavailable, and a departed node's be removed,
// without anyone else's say.
type Instance struct {
	ID     string         `json:"id"`
	Model  string         `json:"model"`
	Node   NodeID         `json:"node"`
	Engine string         `json:"engine"`
	Role   Role           `json:"role"`
	Status InstanceStatus `json:"status"`
	// KVEndpoint is the host:port of the instance's KV wire server (prefill side); empty if it has none.
	KVEndpoint string `json:"kv_endpoint,omitempty"`
	// Fingerprint identifies the KV layout (model revision, dtype, layers, heads): prefill and decode
	// instances can exchange KV only when their fingerprints are equal.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Labels are small free-form facts for routers (for example "backend": "metal").
	Labels map[string]string `json:"labels,omitempty"`

	// Load and Revision are filled in by snapshots and ignored by PutInstance.
	Load     Load     `json:"load"`
	Revision Revision `json:"revision"`
}

// InstanceLink says which prefill instances serve which decode instances. Any node may write any link;
// concurrent writes resolve to the one with the highest revision everywhere.
type InstanceLink struct {
	LinkID           string   `json:"link_id"`
	PrefillInstances []string `json:"prefill_instances"`
	DecodeInstances  []string `json:"decode_instances"`

	// Revision is filled in by snapshots and ignored by PutInstanceLink.
	Revision Revision `json:"revision"`
}

// Load is an instance's coarse load, measured by its own node and spread at a bounded rate.
type Load struct {
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	// UpdatedAt is when the owning node measured it, by that node's clock; zero when never reported.
	UpdatedAt time.Time `json:"updated_at"`
	// Speed is the instance's measured speed (SetSpeed), nil until its node published one. It rides with
	// the load but changes far less often: a load update without a speed keeps the last one.
	Speed *Speed `json:"speed,omitempty"`
}

// Speed is what a node measured of one of its instances (sdk/router's Speed is its twin, for routers):
// learned from the timings of real requests, spread at most once per Config.SpeedInterval, since gossip is
// not a metrics bus. Rates are per second; 0 is unknown.
type Speed struct {
	// PrefillTPS are prompt tokens computed per second by prompt-length band (sdk/router.PrefillBand).
	PrefillTPS []float64 `json:"prefill_tps,omitempty"`
	// DecodeTPS are tokens per second per sequence at the batch sizes the instance ran lately.
	DecodeTPS float64 `json:"decode_tps,omitempty"`
	// QueueWait is how long requests lately waited for the engine to start them.
	QueueWait time.Duration `json:"queue_wait,omitempty"`
	// KVBytesPerToken is the KV cache one prompt token takes on the wire.
	KVBytesPerToken int64 `json:"kv_bytes_per_token,omitempty"`
	// KVStateBytes is the KV a transfer carries once whatever the prompt's length (a hybrid model's
	// linear-attention states; 0 for other models).
	KVStateBytes int64 `json:"kv_state_bytes,omitempty"`
	// IngestBPS is how fast the instance writes received KV into its cache, in bytes per second.
	IngestBPS float64 `json:"ingest_bps,omitempty"`
	// Ingress is the KV goodput measured into the instance from each node that prefilled for it.
	Ingress []LinkSpeed `json:"ingress,omitempty"`
	// Samples is how many requests the figures rest on.
	Samples int64 `json:"samples,omitempty"`
}

// LinkSpeed is what remote prefills measured of the network from one node into an instance's node.
type LinkSpeed struct {
	From           NodeID        `json:"from"`
	BytesPerSecond float64       `json:"bytes_per_second"`
	RTT            time.Duration `json:"rtt,omitempty"`
	Samples        int64         `json:"samples,omitempty"`
	// PrefillTPS are prompt tokens per second of whole remote prefills from that node (request to last byte),
	// by prompt-length band of the tokens prefilled.
	PrefillTPS []float64 `json:"prefill_tps,omitempty"`
}

// Revision orders the writes of one table key: the Lamport time of the write and the node that made it.
type Revision struct {
	LTime  uint64 `json:"ltime"`
	Origin NodeID `json:"origin"`
}
