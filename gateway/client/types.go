package client

import (
	"encoding/json"
	"time"
)

// Health is GET /healthz: "ok" with the number of instances this gateway serves. An engine plugin that is not
// ready answers 503 (an *Error).
type Health struct {
	Status    string `json:"status"`
	Instances int    `json:"instances"`
}

// Model is an entry of GET /v1/models: a model some instance of the cluster serves, or an alias of one.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// Instance is an instance as GET /v1/instances shows it: a model loaded by an engine on one node.
type Instance struct {
	ID               string    `json:"id"`
	Model            string    `json:"model"`
	Node             string    `json:"node"`
	Role             string    `json:"role"`   // prefill, decode or both
	Status           string    `json:"status"` // ready, loading, unavailable or draining
	Engine           string    `json:"engine"`
	Backend          string    `json:"backend,omitempty"`
	Architecture     string    `json:"architecture,omitempty"`
	Quantization     string    `json:"quantization,omitempty"`
	Parameters       int64     `json:"parameters,omitempty"`
	ContextLength    int       `json:"context_length,omitempty"`
	KVEndpoint       string    `json:"kv_endpoint,omitempty"`
	Fingerprint      string    `json:"fingerprint,omitempty"`
	KVCompat         string    `json:"kv_compat,omitempty"`
	KV               *KVLayout `json:"kv,omitempty"`
	MaxBytesPerToken int       `json:"max_bytes_per_token,omitempty"`
	Load             Load      `json:"load"`
	// Speed is what the instance's node measured of it, as JSON (absent until it measured anything).
	Speed json.RawMessage `json:"speed,omitempty"`
}

// KVLayout is an instance's KV cache layout. Of its Layers, LinearLayers (a hybrid model's linear-attention
// layers) hold a fixed-size state per sequence, StateBytes in all, instead of keys and values per token; the
// others hold KVHeads×HeadDim of each per token, BytesPerToken over them all. A prompt of n tokens moves
// n·BytesPerToken + StateBytes on the KV wire.
type KVLayout struct {
	Layers        int    `json:"layers"`
	KVHeads       int    `json:"kv_heads"`
	HeadDim       int    `json:"head_dim"`
	DType         string `json:"dtype"`
	BytesPerToken int64  `json:"bytes_per_token"`
	LinearLayers  int    `json:"linear_layers,omitempty"`
	StateBytes    int64  `json:"state_bytes,omitempty"`
}

// Load is an instance's load as its node last reported it.
type Load struct {
	InFlight  int       `json:"in_flight"`
	Queued    int       `json:"queued"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// NewInstance is the body of POST /v1/instances: load Model on Node (this gateway's node when empty).
type NewInstance struct {
	Model   string            `json:"model"`
	Node    string            `json:"node,omitempty"`
	ID      string            `json:"id,omitempty"`
	Role    string            `json:"role,omitempty"`
	Options map[string]string `json:"options,omitempty"`
}

// Link is an instance link: which prefill instances serve which decode instances.
type Link struct {
	LinkID           string   `json:"link_id"`
	PrefillInstances []string `json:"prefill_instances"`
	DecodeInstances  []string `json:"decode_instances"`
	// Exact is whether the pair's prefill hands over KV that decodes bit for bit as a local prefill would.
	Exact bool `json:"exact"`
}

// LinkWrite is the answer to creating or updating a link.
type LinkWrite struct {
	Message   string `json:"message"`
	CommandID string `json:"command_id"`
	LinkID    string `json:"link_id"`
	Exact     bool   `json:"exact"`
}

// LinkCheck is POST /admin/v1/instance-links/check: whether a link would be accepted, and why not.
type LinkCheck struct {
	OK      bool   `json:"ok"`
	Exact   bool   `json:"exact"`
	Message string `json:"message,omitempty"`
}

// Router is GET /admin/v1/router: the router a gateway routes with and the built-in ones it can swap to.
type Router struct {
	Router    string   `json:"router"`
	Available []string `json:"available"`
}

// State is GET /state: the cluster as this gateway's node sees it.
type State struct {
	Version   uint64     `json:"version"`
	Built     time.Time  `json:"built"`
	Local     string     `json:"local"` // this node's id
	Digest    string     `json:"digest"`
	Nodes     []Node     `json:"nodes"`
	Instances []Instance `json:"instances"`
	Links     []Link     `json:"links"`
	// Exposure says what this gateway leaves open to the network.
	Exposure []string `json:"exposure,omitempty"`
}

// Node returns the node with the given id.
func (s State) Node(id string) (Node, bool) {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// Node is a member of the cluster.
type Node struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Status    string    `json:"status"` // alive, suspect, failed or left
	Tags      NodeTags  `json:"tags"`
	Addresses []Address `json:"addresses,omitempty"`
	Gossip    string    `json:"gossip"`
	// Problem says why the node is ineligible; empty when it is fine.
	Problem string `json:"problem,omitempty"`
}

// NodeTags are a node's identity as it gossips it.
type NodeTags struct {
	NodeID        string `json:"node_id"`
	APIAddr       string `json:"api_addr"`
	KVAddr        string `json:"kv_addr,omitempty"`
	Version       string `json:"version,omitempty"`
	HardwareClass string `json:"hardware_class,omitempty"`
	StateURL      string `json:"state_url,omitempty"`
}

// Address is one of a node's advertised addresses.
type Address struct {
	IP        string `json:"ip"`
	PrefixLen int    `json:"prefix_len,omitempty"`
	Interface string `json:"interface,omitempty"`
	Kind      string `json:"kind"`
	SpeedMbps int    `json:"speed_mbps,omitempty"`
}

// Status is GET /admin/v1/status: this gateway's requests, instances, engine figures and plugins.
type Status struct {
	InFlight  int              `json:"in_flight"`
	Queued    int              `json:"queued"`
	Instances []StatusInstance `json:"instances"`
	// EngineStats are the engine plugin's figures (zero when it did not answer).
	EngineStats EngineStats    `json:"engine_stats"`
	Plugins     []PluginStatus `json:"plugins,omitempty"`
}

// StatusInstance is an instance this gateway's engine serves, as the engine describes it.
type StatusInstance struct {
	InstanceID string    `json:"InstanceID"`
	ModelID    string    `json:"ModelID"`
	InFlight   int64     `json:"in_flight"`
	LoadedAt   time.Time `json:"loaded_at"`
}

// EngineStats are an engine plugin's figures.
type EngineStats struct {
	Instances []InstanceStats
	// Metrics are engine-wide figures by name.
	Metrics map[string]float64
}

// InstanceStats are one instance's engine figures.
type InstanceStats struct {
	InstanceID      string
	InFlight        int
	Queued          int
	KVBytes         int64
	KVCapacityBytes int64
	PrefixCache     struct {
		Hits, Misses  int64
		HitTokens     int64
		Entries       int64
		Bytes         int64
		CapacityBytes int64
		Evictions     int64
	}
	Metrics map[string]float64
}

// PluginStatus is a plugin process the gateway supervises.
type PluginStatus struct {
	Name      string    `json:"name"`
	State     string    `json:"state"`
	PID       int       `json:"pid,omitempty"`
	Restarts  int       `json:"restarts"`
	StartedAt time.Time `json:"started_at,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// Requests is GET /admin/v1/requests: a gateway's recent requests, oldest first.
type Requests struct {
	Node     string `json:"node"`
	Capacity int    `json:"capacity"`
	// Last is the seq to ask for later ones with (RequestsSince).
	Last     uint64          `json:"last"`
	Requests []RequestRecord `json:"requests"`
}

// RequestRecord is one recent request.
type RequestRecord struct {
	// Seq numbers the records of a gateway in the order it recorded them; RequestsQuery.Since asks for later ones.
	Seq       uint64 `json:"seq"`
	RequestID string `json:"request_id"`
	Path      string `json:"path"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	Status    int    `json:"status"`
	Error     string `json:"error,omitempty"`
	// Node is the gateway that recorded it; Hop says another gateway forwarded it there.
	Node  string    `json:"node"`
	Hop   bool      `json:"hop"`
	Start time.Time `json:"start"`
	// DurationMS is how long the request took as the recording gateway saw it, to its last byte; FirstByteMS,
	// for a stream, until its first token (or first forwarded chunk) went out.
	DurationMS  float64 `json:"duration_ms"`
	FirstByteMS float64 `json:"first_byte_ms,omitempty"`
	// Route is where it ran as the recording gateway knows it; Timings are the answer's own (as clients got
	// them, route included): for a forwarded request, the owner's. Timings are nil for a request that
	// generated nothing.
	Route   RequestRoute  `json:"route"`
	Timings *Timings      `json:"timings,omitempty"`
	Usage   *RequestUsage `json:"usage,omitempty"`
}

// RequestRoute is where a recent request ran as the gateway that recorded it knows it.
type RequestRoute struct {
	EntryNode       string `json:"entry_node"`
	DecodeNode      string `json:"decode_node,omitempty"`
	DecodeInstance  string `json:"decode_instance,omitempty"`
	PrefillNode     string `json:"prefill_node,omitempty"`
	PrefillInstance string `json:"prefill_instance,omitempty"`
	PrefillAddress  string `json:"prefill_address,omitempty"`
	Forwarded       bool   `json:"forwarded"`
	// RoutingMS is what tokenizing for the router and routing took on the recording gateway (a forwarded
	// answer's own timings carry its owner's, which did not route it).
	RoutingMS float64 `json:"routing_ms"`
	Reason    string  `json:"reason,omitempty"`
}

// RequestUsage is the tokens a recent request used.
type RequestUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
}

// Paths is GET /admin/v1/paths: the path between every ordered pair of nodes, as one node sees them.
type Paths struct {
	From  string `json:"from"`
	Paths []Path `json:"paths"`
}

// Path is how one node reaches another.
type Path struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Address   string  `json:"address"`
	Interface string  `json:"interface,omitempty"`
	Kind      string  `json:"kind"`
	SpeedMbps int     `json:"speed_mbps"`
	RTTMS     float64 `json:"rtt_ms"`
	RTTKnown  bool    `json:"rtt_known"`
	Quality   float64 `json:"quality"`
	Direct    bool    `json:"direct"`
}

// ClusterStats is GET /admin/v1/cluster/stats: every alive node's engine figures.
type ClusterStats struct {
	Nodes []NodeStats `json:"nodes"`
}

// NodeStats are one node's engine figures, or why they are missing.
type NodeStats struct {
	Node      string            `json:"node"`
	Error     string            `json:"error,omitempty"`
	Instances []InstanceFigures `json:"instances"`
}

// InstanceFigures are one instance's engine figures as GET /admin/v1/cluster/stats shows them: its load, its
// KV memory and its prefix cache.
type InstanceFigures struct {
	ID              string `json:"id"`
	InFlight        int    `json:"in_flight"`
	Queued          int    `json:"queued"`
	KVBytes         int64  `json:"kv_bytes"`
	KVCapacityBytes int64  `json:"kv_capacity_bytes"`
	PrefixHits      int64  `json:"prefix_hits"`
	PrefixMisses    int64  `json:"prefix_misses"`
	PrefixHitTokens int64  `json:"prefix_hit_tokens"`
	PrefixBytes     int64  `json:"prefix_bytes"`
}

// Keyring is GET /admin/v1/cluster/keys: the gossip keys across the cluster, by how many nodes hold and use each.
type Keyring struct {
	NumNodes    int
	NumResp     int
	Keys        map[string]int
	PrimaryKeys map[string]int
}

// Timings is the "timings" object duet adds to an answer (the last chunk of a stream) and records with each
// recent request: where the prompt was prefilled, each phase in milliseconds, and where the request ran.
// The gateway writes this object by hand on its hot path (gateway/internal/apicore's AppendTimings), so a field
// it adds there belongs here too.
type Timings struct {
	PrefillSource string         `json:"prefill_source"` // local or remote
	QueueMs       float64        `json:"queue_ms"`
	PrefillMs     float64        `json:"prefill_ms"`
	FirstTokenMs  float64        `json:"first_token_ms"`
	DecodeMs      float64        `json:"decode_ms"`
	TotalMs       float64        `json:"total_ms"`
	Remote        *RemotePrefill `json:"remote_prefill,omitempty"`
	Route         *Route         `json:"route,omitempty"`
}

// RemotePrefill is a prefill fetched over the KV wire, or attempted.
type RemotePrefill struct {
	Endpoint       string  `json:"endpoint"`
	InstanceID     string  `json:"instance_id"`
	Tokens         int     `json:"tokens"`
	Bytes          int64   `json:"bytes"`
	WaitMs         float64 `json:"wait_ms"`
	TransferMs     float64 `json:"transfer_ms"`
	IngestMs       float64 `json:"ingest_ms"`
	Attempts       int     `json:"attempts"`
	FallbackReason string  `json:"fallback_reason,omitempty"`
	// Exact is whether the KV came from an instance with the same weights (bit for bit as a local prefill).
	Exact bool `json:"exact"`
}

// Route is where a request ran.
type Route struct {
	EntryNode       string  `json:"entry_node"`
	DecodeNode      string  `json:"decode_node"`
	DecodeInstance  string  `json:"decode_instance"`
	PrefillInstance string  `json:"prefill_instance,omitempty"`
	PrefillNode     string  `json:"prefill_node,omitempty"`
	PrefillAddress  string  `json:"prefill_address,omitempty"`
	Forwarded       bool    `json:"forwarded"`
	Reason          string  `json:"reason,omitempty"`
	RoutingMs       float64 `json:"routing_ms"`
	AdmissionMs     float64 `json:"admission_ms"`
}
