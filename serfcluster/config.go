package serfcluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// Timings are the gossip and failure-detection knobs of serf and memberlist that this package exposes.
type Timings struct {
	// GossipInterval and GossipNodes: every interval, queued broadcasts (deltas, loads, membership) go to
	// this many random nodes. Propagation to n nodes takes about log(n) intervals.
	GossipInterval time.Duration
	GossipNodes    int
	// ProbeInterval and ProbeTimeout: every interval one random node is pinged directly and, without an
	// ack within the timeout, indirectly through others.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// A node that fails its probe is suspected for SuspicionMult*max(1,log10(n))*ProbeInterval, up to
	// SuspicionMaxTimeoutMult times that when nobody confirms, and then declared failed.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// RetransmitMult: each broadcast is sent RetransmitMult*log10(n+1) times.
	RetransmitMult int
	// PushPullInterval is memberlist's full membership sync with a random node.
	PushPullInterval time.Duration
	// TCPTimeout bounds memberlist's stream connections (joins, push-pull).
	TCPTimeout time.Duration
	// GossipToTheDeadTime is how long gossip keeps going to a failed node, to let it refute.
	GossipToTheDeadTime time.Duration
	// ReapInterval: how often serf forgets failed members older than ReconnectTimeout and left members
	// older than TombstoneTimeout. ReconnectInterval: how often it tries to reach failed members again.
	ReapInterval      time.Duration
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration
	TombstoneTimeout  time.Duration
	// LeavePropagateDelay is how long a graceful leave waits for its broadcast to spread.
	LeavePropagateDelay time.Duration
	// BroadcastTimeout bounds waiting for a leave or tag update to be sent.
	BroadcastTimeout time.Duration
}

// LANTimings are tuned so that a hard-killed node is declared failed well within 3 s on a LAN of up to ten
// nodes (memberlist's LAN defaults take about 5.5 s): probes every 300 ms with a 200 ms timeout, and a
// suspicion timeout of 3*300 ms = 0.9 s that stretches to at most 2.7 s when no other node confirms.
// Gossip runs every 100 ms, so an update reaches ten nodes in well under a second.
func LANTimings() Timings {
	return Timings{
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             4,
		ProbeInterval:           300 * time.Millisecond,
		ProbeTimeout:            200 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		RetransmitMult:          4,
		PushPullInterval:        15 * time.Second,
		TCPTimeout:              5 * time.Second,
		GossipToTheDeadTime:     15 * time.Second,
		ReapInterval:            15 * time.Second,
		ReconnectInterval:       10 * time.Second,
		ReconnectTimeout:        6 * time.Hour,
		TombstoneTimeout:        6 * time.Hour,
		LeavePropagateDelay:     time.Second,
		BroadcastTimeout:        5 * time.Second,
	}
}

// LocalTimings suit clusters on one machine's loopback, as in tests: everything is a few times faster than
// LANTimings, with probe timeouts still loose enough for a loaded CI machine.
func LocalTimings() Timings {
	return Timings{
		GossipInterval:          25 * time.Millisecond,
		GossipNodes:             4,
		ProbeInterval:           150 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 3,
		RetransmitMult:          4,
		PushPullInterval:        2 * time.Second,
		TCPTimeout:              2 * time.Second,
		GossipToTheDeadTime:     2 * time.Second,
		ReapInterval:            200 * time.Millisecond,
		ReconnectInterval:       300 * time.Millisecond,
		ReconnectTimeout:        time.Minute,
		TombstoneTimeout:        time.Minute,
		LeavePropagateDelay:     100 * time.Millisecond,
		BroadcastTimeout:        2 * time.Second,
	}
}

// Config configures a Cluster. Start from DefaultConfig; New fills any zero field from it.
type Config struct {
	// NodeID is required and must be stable across restarts.
	NodeID NodeID
	// NodeName is the serf member name; it defaults to NodeID.
	NodeName string
	// BindAddr is the gossip address (UDP and TCP), host:port.
	BindAddr string
	// AdvertiseAddr is the host:port peers reach this node at, if not BindAddr's (NAT, 0.0.0.0 binds).
	AdvertiseAddr string
	// JoinAddrs are tried in the background, with backoff, until one answers.
	JoinAddrs         []string
	JoinRetryInterval time.Duration

	// Identity advertised in tags: see Tags.
	APIAddr       string
	KVAddr        string
	Version       string
	HardwareClass string
	StateURL      string

	// Addresses, if set, are advertised as given. Otherwise DetectAddresses is called at start and every
	// AddressRefreshInterval, and its answer is filtered (loopback only when nothing else) to MaxAddresses.
	Addresses              []netif.Address
	DetectAddresses        func() ([]netif.Address, error)
	MaxAddresses           int
	AddressRefreshInterval time.Duration

	// EncryptKey is an AES key of 16, 24 or 32 bytes for the gossip (AES-GCM).
	EncryptKey []byte
	// KeyringFile is a JSON array of base64 keys, the first one primary. If it exists it wins over
	// EncryptKey; if not and EncryptKey is set, it is created with that key. Serf rewrites it on every key
	// rotation, so a restarted node comes back with the current keys.
	KeyringFile string

	// SnapshotPath is serf's membership snapshot: a restarted node rejoins the members it lists.
	SnapshotPath string
	// RejoinAfterLeave lets a node that left gracefully rejoin from its snapshot.
	RejoinAfterLeave bool

	Timings Timings

	// AntiEntropyInterval is how often (±25% jitter) this node compares table digests with the cluster
	// and pulls state from the nodes that differ.
	AntiEntropyInterval time.Duration
	// PullTimeout bounds one full-state pull, connection to last byte.
	PullTimeout time.Duration
	// MaxConcurrentPulls bounds parallel pulls.
	MaxConcurrentPulls int
	// MaxStateBytes bounds a served or pulled state document.
	MaxStateBytes int64
	// MaxTableEntries bounds each table (instances, links, loads), tombstones included.
	MaxTableEntries int
	// TombstoneTTL is how long a deleted key is remembered. It must exceed the longest time a node can be
	// cut off and come back with its old tables (see Timings.ReconnectTimeout).
	TombstoneTTL time.Duration
	// LoadInterval is the minimum time between two load broadcasts from this node.
	LoadInterval time.Duration
	// SpeedInterval is the minimum time between two broadcasts of this node's measured speeds (SetSpeed);
	// they ride on load broadcasts, so it is at least LoadInterval in effect.
	SpeedInterval time.Duration
	// CoordinateInterval is how often RTT estimates are re-read from serf into the snapshot.
	CoordinateInterval time.Duration
	// OrphanGrace is how long after start the gateway has to publish its instances again. Instances under
	// this node's ID that peers still hold from a previous run, and that were not published again by then,
	// are deleted.
	OrphanGrace time.Duration
	// MaxEventBytes bounds one user event, name and payload. Events ride in memberlist's 1400-byte UDP
	// packets, so at most 1200 is accepted; a delta too large for it is sent as a hint to pull instead.
	MaxEventBytes int

	// HTTPClient pulls peers' state; its Timeout is ignored in favour of PullTimeout.
	HTTPClient *http.Client
	// Logger receives this package's and serf's logs.
	Logger *slog.Logger

	// dropUserEvent, set only by tests, makes the event loop ignore matching user events.
	dropUserEvent func(name string) bool
}

// DefaultConfig returns LAN settings with every field but the identity filled.
func DefaultConfig() Config {
	return Config{
		BindAddr:               "0.0.0.0:7946",
		JoinRetryInterval:      2 * time.Second,
		DetectAddresses:        netif.Detect,
		MaxAddresses:           6,
		AddressRefreshInterval: time.Minute,
		Timings:                LANTimings(),
		AntiEntropyInterval:    10 * time.Second,
		PullTimeout:            5 * time.Second,
		MaxConcurrentPulls:     2,
		MaxStateBytes:          8 << 20,
		MaxTableEntries:        8192,
		TombstoneTTL:           12 * time.Hour,
		LoadInterval:           500 * time.Millisecond,
		SpeedInterval:          5 * time.Second,
		CoordinateInterval:     2 * time.Second,
		OrphanGrace:            30 * time.Second,
		MaxEventBytes:          1024,
	}
}

// Limits on MaxEventBytes.
const (
	minEventBytes = 512
	maxEventBytes = 1200
)

// withDefaults fills zero fields from DefaultConfig and checks the result.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.NodeName == "" {
		c.NodeName = string(c.NodeID)
	}
	setString(&c.BindAddr, d.BindAddr)
	setDur(&c.JoinRetryInterval, d.JoinRetryInterval)
	if c.DetectAddresses == nil {
		c.DetectAddresses = d.DetectAddresses
	}
	setInt(&c.MaxAddresses, d.MaxAddresses)
	setDur(&c.AddressRefreshInterval, d.AddressRefreshInterval)
	if c.Timings == (Timings{}) {
		c.Timings = d.Timings
	}
	setDur(&c.AntiEntropyInterval, d.AntiEntropyInterval)
	setDur(&c.PullTimeout, d.PullTimeout)
	setInt(&c.MaxConcurrentPulls, d.MaxConcurrentPulls)
	if c.MaxStateBytes == 0 {
		c.MaxStateBytes = d.MaxStateBytes
	}
	setInt(&c.MaxTableEntries, d.MaxTableEntries)
	setDur(&c.TombstoneTTL, d.TombstoneTTL)
	setDur(&c.LoadInterval, d.LoadInterval)
	setDur(&c.SpeedInterval, d.SpeedInterval)
	setDur(&c.CoordinateInterval, d.CoordinateInterval)
	setDur(&c.OrphanGrace, d.OrphanGrace)
	setInt(&c.MaxEventBytes, d.MaxEventBytes)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.StateURL == "" {
		c.StateURL = defaultStateURL(c.APIAddr)
	}
	return c, c.check()
}

func (c *Config) check() error {
	var errs []error
	if err := checkID("node id", string(c.NodeID)); err != nil {
		errs = append(errs, err)
	}
	if err := checkToken("node name", c.NodeName, MaxIDLen, false); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		errs = append(errs, fmt.Errorf("bind address: %w", err))
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			errs = append(errs, fmt.Errorf("advertise address: %w", err))
		}
	}
	if len(c.EncryptKey) != 0 {
		if err := checkKey(c.EncryptKey); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxEventBytes < minEventBytes || c.MaxEventBytes > maxEventBytes {
		errs = append(errs, fmt.Errorf("max event bytes %d outside %d..%d (events must fit one gossip packet)",
			c.MaxEventBytes, minEventBytes, maxEventBytes))
	}
	if c.MaxAddresses > MaxAdvertisedAddresses {
		errs = append(errs, fmt.Errorf("max addresses %d over the limit of %d", c.MaxAddresses, MaxAdvertisedAddresses))
	}
	t := c.Timings
	for name, d := range map[string]time.Duration{
		"gossip interval": t.GossipInterval, "probe interval": t.ProbeInterval, "probe timeout": t.ProbeTimeout,
		"push-pull interval": t.PushPullInterval, "tcp timeout": t.TCPTimeout, "reap interval": t.ReapInterval,
		"reconnect interval": t.ReconnectInterval, "reconnect timeout": t.ReconnectTimeout,
		"tombstone timeout": t.TombstoneTimeout, "broadcast timeout": t.BroadcastTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("timings: %s must be positive", name))
		}
	}
	if t.ProbeTimeout > t.ProbeInterval {
		errs = append(errs, fmt.Errorf("timings: probe timeout %v exceeds probe interval %v", t.ProbeTimeout, t.ProbeInterval))
	}
	if t.GossipNodes < 1 || t.SuspicionMult < 1 || t.SuspicionMaxTimeoutMult < 1 || t.RetransmitMult < 1 {
		errs = append(errs, errors.New("timings: gossip nodes and the multipliers must be at least 1"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("serfcluster: config: %w", err)
	}
	return nil
}

func checkKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("encryption key is %d bytes; AES needs 16, 24 or 32", len(k))
}

func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", s)
	}
	return host, port, nil
}

func setString(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDur(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}
