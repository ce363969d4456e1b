package router

import (
	"context"
	"errors"
	"time"
)

// Router picks where a request runs. Route may be called concurrently and must not modify the snapshot.
type Router interface {
	Route(ctx context.Context, req Request, snap *Snapshot) (Decision, error)
}

// ErrNoCandidate is returned (possibly wrapped) when no instance can serve the request's model.
var ErrNoCandidate = errors.New("no instance can serve this model")

// Request is what the router knows of a request.
type Request struct {
	RequestID string
	Model     string
	// PromptTokens is the prompt's length in tokens, or an estimate; 0 when unknown.
	PromptTokens int
	// PrefixHashes are hashes of the prompt's leading blocks, for prefix-affinity scoring (block i's hash covers
	// blocks 0..i).
	PrefixHashes []uint64
	// SourceNode is the node whose gateway received the request.
	SourceNode string
	MaxTokens  int
}

// Snapshot is an immutable view of the cluster.
type Snapshot struct {
	Version uint64
	// Self is the node id of the gateway asking.
	Self          string
	Nodes         []Node
	Links         []Link
	Instances     []Instance
	InstanceLinks []InstanceLink
}

// Node statuses.
const (
	NodeAlive   = "alive"
	NodeSuspect = "suspect"
	NodeFailed  = "failed"
	NodeLeft    = "left"
)

// Node is one duet gateway.
type Node struct {
	ID         string
	Name       string
	Status     string
	APIAddress string
	KVAddress  string
	Version    string
	Hardware   string // hardware class, e.g. "apple-m3-ultra", "cpu"
}

// Link is the best path from one node to another.
type Link struct {
	From, To  string
	Address   string // the address of To that From should use
	Kind      string // "thunderbolt", "ethernet", "wifi", "loopback", "other"
	SpeedMbps int64
	RTT       time.Duration
	// Quality is in [0, 1]: 1 is the best path the cluster has.
	Quality float64
}

// Instance roles.
const (
	RoleBoth    = "both"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Instance statuses.
const (
	InstanceReady       = "ready"
	InstanceLoading     = "loading"
	InstanceDraining    = "draining"
	InstanceUnavailable = "unavailable"
)

// Instance is one loaded model on one node.
type Instance struct {
	ID            string
	Model         string
	Node          string
	Engine        string
	Role          string
	Status        string
	KVEndpoint    string
	Fingerprint   string
	ContextLength int
	Load          Load
}

// Load is an instance's coarse load, refreshed at a bounded rate.
type Load struct {
	InFlight      int
	Queued        int
	KVUtilization float64 // [0, 1]
	UpdatedAt     time.Time
}

// InstanceLink says which prefill instances serve which decode instances.
type InstanceLink struct {
	ID               string
	PrefillInstances []string
	DecodeInstances  []string
}

// Instance returns the instance with the given id.
func (s *Snapshot) Instance(id string) (Instance, bool) {
	for _, in := range s.Instances {
		if in.ID == id {
			return in, true
		}
	}
	return Instance{}, false
}

// Node returns the node with the given id.
func (s *Snapshot) Node(id string) (Node, bool) {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// Link returns the link from one node to another.
func (s *Snapshot) Link(from, to string) (Link, bool) {
	for _, l := range s.Links {
		if l.From == from && l.To == to {
			return l, true
		}
	}
	return Link{}, false
}

// Decision is where a request runs.
type Decision struct {
	DecodeInstance string
	DecodeNode     string
	// PrefillEndpoints are tried in order by the decode engine; empty means prefill locally.
	PrefillEndpoints []PrefillEndpoint
	// Reason explains the decision in a sentence, for logs and the dashboard.
	Reason string
	// Scores are the scorers' figures behind the decision, by name.
	Scores map[string]float64
}

// PrefillEndpoint is a prefill instance's KV wire server.
type PrefillEndpoint struct {
	InstanceID string
	Node       string
	Address    string
}
