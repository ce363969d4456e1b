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

// ErrNoCandidate is returned (possibly wrapped) when no instance can serve the request's model, including
// when every instance that could is in Request.Exclude.
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
	// Exclude lists instances that must not decode this request, by id: when the first choice fails before
	// its first token, the gateway asks again once with that instance excluded and runs the router's next
	// choice. It constrains the decode instance only.
	Exclude []string
}

// Snapshot is an immutable view of the cluster.
type Snapshot struct {
	Version uint64
	// Self is the node id of the gateway asking.
	Self  string
	Nodes []Node
	// Paths are the best paths between pairs of nodes, each way. They are not InstanceLinks: a path is the
	// network between two nodes, an instance link says which instances serve which.
	Paths         []Path
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

// Path is the best path from one node to another: the address to dial and what is known of the network in
// between (serfcluster's Path).
type Path struct {
	From, To  string
	Address   string // the address of To that From should use
	Kind      string // "thunderbolt", "ethernet", "wifi", "loopback", "other"
	SpeedMbps int64
	RTT       time.Duration
	// Quality scores the path in [0, 1], 1 being the best; 0 means unknown. The cluster computes it
	// (serfcluster's Path.Quality), so routers need not weigh kind, speed and RTT themselves.
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
	ID         string
	Model      string
	Node       string
	Engine     string
	Role       string
	Status     string
	KVEndpoint string
	// Fingerprint identifies the weights, dtype and KV layout: instances with equal non-empty fingerprints
	// exchange KV cache bit for bit.
	Fingerprint   string
	ContextLength int
	Load          Load
	// Backend is what the engine computes on, e.g. "cpu", "mlx".
	Backend string
	// KVCompat names a family of instances that can exchange KV cache: instances with equal non-empty KVCompat
	// can, exactly when their fingerprints are equal too and approximately otherwise (the same base model at
	// another quantization, e.g. prefill on bf16 and decode on 4-bit). Empty: only equal fingerprints count.
	// Approximate pairs need an instance link too (see PrefillEndpoint).
	KVCompat string
	// Speed is what the instance's node measured of it; its zero value means nothing is measured yet.
	Speed Speed
}

// Prompt-length bands of Speed.PrefillTPS: attention makes each prompt token cost more the longer the
// prompt, so prefill speed is kept per band of the prompt's length.
const PrefillBands = 4

// prefillBandLimits are the bands' upper bounds (exclusive), in prompt tokens; the last band is unbounded.
var prefillBandLimits = [PrefillBands - 1]int{512, 2048, 8192}

// PrefillBand is the band of Speed.PrefillTPS that a prompt of the given length falls in:
// [0, 512), [512, 2048), [2048, 8192), [8192, ∞).
func PrefillBand(tokens int) int {
	for i, lim := range prefillBandLimits {
		if tokens < lim {
			return i
		}
	}
	return PrefillBands - 1
}

// Speed is an instance's measured speed, learned by its node from the timings of its recent requests (and a
// short calibration when the model loads) and spread through the cluster at a bounded rate. Every rate is
// per second and 0 when unknown.
type Speed struct {
	// PrefillTPS are prompt tokens computed per second, by PrefillBand of the prompt's length.
	PrefillTPS [PrefillBands]float64
	// DecodeTPS are tokens generated per second per sequence, at the batch sizes the instance ran lately.
	DecodeTPS float64
	// QueueWait is how long a request lately waited for the engine to start it.
	QueueWait time.Duration
	// KVBytesPerToken is the KV cache one prompt token takes on the wire (keys and values of every layer that
	// holds them per token).
	KVBytesPerToken int64
	// KVStateBytes is the KV a transfer carries once whatever the prompt's length: the fixed-size states of a
	// hybrid model's linear-attention layers (0 for other models). A prompt of n tokens moves
	// n·KVBytesPerToken + KVStateBytes.
	KVStateBytes int64
	// IngestBPS are KV bytes per second the instance writes into its cache after a remote prefill.
	IngestBPS float64
	// Ingress is the KV goodput measured into this instance from each node that prefilled for it.
	Ingress []LinkSpeed
	// Samples is how many requests the figures rest on (calibration included).
	Samples int64
}

// LinkSpeed is what remote prefills measured of the network from one node into an instance's node.
type LinkSpeed struct {
	From string
	// BytesPerSecond is KV goodput: bytes over the time the stream took once its first bytes arrived. The KV
	// streams while the prompt is prefilled, so a fast link paired with a slow prefill reads low: a lower bound.
	BytesPerSecond float64
	// RTT is the round trip of the KV request (until its header arrived, less the prefill's own start).
	RTT     time.Duration
	Samples int64
	// PrefillTPS are prompt tokens per second of whole remote prefills from that node, by PrefillBand of the
	// tokens prefilled: the tokens over the time from the KV request to its last byte (the prefill node's queue
	// and prefill and the transfer that outlasted it). It is what a remote prefill from there took, end to
	// end, lately.
	PrefillTPS [PrefillBands]float64
}

// IngressFrom returns the measured link from a node into the instance, if any.
func (s *Speed) IngressFrom(node string) (LinkSpeed, bool) {
	for _, l := range s.Ingress {
		if l.From == node {
			return l, true
		}
	}
	return LinkSpeed{}, false
}

// Load is an instance's coarse load, refreshed at a bounded rate.
type Load struct {
	InFlight      int
	Queued        int
	KVUtilization float64 // [0, 1]
	UpdatedAt     time.Time
}

// InstanceLink says which prefill instances serve which decode instances. In this package a link is always an
// instance link; the network between two nodes is a Path.
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

// Path returns the path from one node to another.
func (s *Snapshot) Path(from, to string) (Path, bool) {
	for _, p := range s.Paths {
		if p.From == from && p.To == to {
			return p, true
		}
	}
	return Path{}, false
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
//
// An endpoint is exact when the prefill instance's Fingerprint equals the decode instance's (non-empty), and
// approximate when only their KVCompat is equal (non-empty): the KV crosses quantizations. A router offers
// an approximate endpoint only when an instance link names the prefill instance for the decode instance: the
// operator accepted the approximation.
type PrefillEndpoint struct {
	InstanceID string
	Node       string
	Address    string
	// Approximate is true when the KV crosses quantizations. The zero value is the safe one: a router that
	// does not know about approximation offers exact KV only.
	Approximate bool
}
