package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/duet-ai/duet/serfcluster"
	"github.com/duet-ai/duet/serfcluster/netif"
)

// DefaultGossipPort is serf's usual port, used when --cluster-bind names none.
const DefaultGossipPort = 7946

// Config configures an Agent.
type Config struct {
	NodeID  string
	DataDir string
	// Bind is the gossip address, host:port. BindExplicit says the operator chose it; a default bind whose port
	// is taken (another gateway on this host) falls back to a free port instead of failing.
	Bind         string
	BindExplicit bool
	Advertise    string
	// APIAddr is how peers reach this gateway's API (host:port); APITLS says it serves TLS.
	APIAddr string
	APITLS  bool
	// TLS is the client configuration for pulling state from peers that serve TLS.
	TLS *tls.Config
	// StateKey, when set, is sent as a bearer token on pulls of peers' state: in a cluster without a secret,
	// whose state is plain JSON, a gateway with API keys serves it only to a key (the cluster's nodes share
	// their keys, as hops without a secret already need).
	StateKey string
	// Join lists peers' gossip addresses (host or host:port), retried in the background.
	Join []string
	// Secrets encrypt the gossip; nil: an unencrypted cluster.
	Secrets *Secrets
	// Addresses are advertised as given; nil: detected (netif).
	Addresses []netif.Address
	Hardware  string
	Version   string
	// Timings of the gossip (zero: serfcluster.LANTimings).
	Timings serfcluster.Timings
	Logger  *slog.Logger
}

// Agent is this gateway's membership in the cluster.
type Agent struct {
	c   *serfcluster.Cluster
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	published map[string]serfcluster.Instance // this node's instances as last written

	conv converter

	speedsOnce sync.Once
	speeds     *Speeds
}

// Start joins (or founds) the cluster. The agent is ready to publish at once; joining goes on in the
// background until a peer answers.
func Start(cfg Config) (*Agent, error) {
	if err := CheckNodeID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sc := serfcluster.DefaultConfig()
	sc.NodeID = serfcluster.NodeID(cfg.NodeID)
	sc.BindAddr = cfg.Bind
	sc.AdvertiseAddr = cfg.Advertise
	sc.JoinAddrs = withPort(cfg.Join, DefaultGossipPort)
	sc.APIAddr = cfg.APIAddr
	sc.Version = cfg.Version
	sc.HardwareClass = cfg.Hardware
	if cfg.APITLS {
		sc.StateURL = "https://" + cfg.APIAddr + serfcluster.StatePath
	}
	if cfg.TLS != nil || cfg.StateKey != "" {
		var tr http.RoundTripper = http.DefaultTransport
		if cfg.TLS != nil {
			tr = &http.Transport{TLSClientConfig: cfg.TLS}
		}
		if cfg.StateKey != "" && cfg.Secrets == nil {
			tr = bearerTransport{next: tr, token: cfg.StateKey}
		}
		sc.HTTPClient = &http.Client{Transport: tr}
	}
	if cfg.Addresses != nil {
		sc.Addresses = cfg.Addresses
	}
	if cfg.Timings != (serfcluster.Timings{}) {
		sc.Timings = cfg.Timings
	}
	sc.SnapshotPath = filepath.Join(cfg.DataDir, "serf.snapshot")
	sc.RejoinAfterLeave = true
	sc.Logger = cfg.Logger
	if cfg.Secrets != nil {
		path, err := cfg.Secrets.writeKeyring(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("cluster keyring: %w", err)
		}
		sc.KeyringFile = path
	}
	c, err := serfcluster.New(sc)
	if err != nil && !cfg.BindExplicit && addrInUse(err) {
		host, _, _ := net.SplitHostPort(cfg.Bind)
		cfg.Logger.Warn("the default gossip port is taken; using a free one (set --cluster-bind to choose)", "bind", cfg.Bind)
		sc.BindAddr = net.JoinHostPort(host, "0")
		c, err = serfcluster.New(sc)
	}
	if err != nil {
		return nil, err
	}
	return &Agent{c: c, cfg: cfg, log: cfg.Logger, published: map[string]serfcluster.Instance{}}, nil
}

// bearerTransport adds an API key to the requests it sends.
type bearerTransport struct {
	next  http.RoundTripper
	token string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// addrInUse tells a port taken by another process (memberlist wraps the error as text, so the errno can be
// lost on the way).
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// withPort adds the default port to addresses that have none.
func withPort(addrs []string, port int) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			a = net.JoinHostPort(a, strconv.Itoa(port))
		}
		out = append(out, a)
	}
	return out
}

// NodeID is this node's id.
func (a *Agent) NodeID() string { return a.cfg.NodeID }

// GossipAddr is the address this node gossips on.
func (a *Agent) GossipAddr() string { return a.c.GossipAddr() }

// Snapshot is the current cluster snapshot.
func (a *Agent) Snapshot() *serfcluster.Snapshot { return a.c.Snapshot() }

// Cluster is the serfcluster agent, for what this package does not wrap (keys, links, stats).
func (a *Agent) Cluster() *serfcluster.Cluster { return a.c }

// StateHandler serves this node's table state to peers (mounted at serfcluster.StatePath).
func (a *Agent) StateHandler() http.Handler { return a.c.StateHandler() }

// Instance is one of this node's instances as the gateway publishes it.
type Instance struct {
	ID          string
	Model       string
	Engine      string // the engine plugin
	Role        serfcluster.Role
	Status      serfcluster.InstanceStatus
	KVEndpoint  string
	Fingerprint string
	Facts       Facts
}

// Publish writes one of this node's instances (a new one, or a new status or description).
func (a *Agent) Publish(in Instance) error {
	rec := serfcluster.Instance{
		ID: in.ID, Model: in.Model, Node: serfcluster.NodeID(a.cfg.NodeID), Engine: in.Engine, Role: in.Role,
		Status: in.Status, KVEndpoint: in.KVEndpoint, Fingerprint: in.Fingerprint, Labels: in.Facts.Labels(),
	}
	if len(rec.Fingerprint) > serfcluster.MaxFingerprintLen {
		rec.Fingerprint = rec.Fingerprint[:serfcluster.MaxFingerprintLen]
	}
	if err := a.c.PutInstance(rec); err != nil {
		return err
	}
	a.mu.Lock()
	a.published[in.ID] = rec
	a.mu.Unlock()
	return nil
}

// SetStatus changes the status of a published instance; it does nothing for an unknown one.
func (a *Agent) SetStatus(id string, status serfcluster.InstanceStatus) error {
	a.mu.Lock()
	rec, ok := a.published[id]
	if ok {
		rec.Status = status
		a.published[id] = rec
	}
	a.mu.Unlock()
	if !ok {
		return nil
	}
	return a.c.PutInstance(rec)
}

// SetAllStatus changes the status of every published instance (the engine plugin died or came back).
func (a *Agent) SetAllStatus(status serfcluster.InstanceStatus) {
	a.mu.Lock()
	ids := make([]string, 0, len(a.published))
	for id := range a.published {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	for _, id := range ids {
		if err := a.SetStatus(id, status); err != nil {
			a.log.Warn("cluster: publish instance status", "instance", id, "status", status, "error", err)
		}
	}
}

// Remove deletes one of this node's instances.
func (a *Agent) Remove(id string) error {
	a.mu.Lock()
	delete(a.published, id)
	a.mu.Unlock()
	err := a.c.DeleteInstance(id)
	if errors.Is(err, serfcluster.ErrNotFound) {
		return nil
	}
	return err
}

// SetLoad records an instance's load; serfcluster spreads it at a bounded rate.
func (a *Agent) SetLoad(id string, inFlight, queued int) {
	_ = a.c.SetLoad(id, serfcluster.Load{InFlight: min(inFlight, serfcluster.MaxLoad), Queued: min(queued, serfcluster.MaxLoad)})
}

// Leave leaves the cluster gracefully: peers drop this node's instances at once.
func (a *Agent) Leave() error { return a.c.Leave() }

// Shutdown stops without leaving, as a crash would look to peers.
func (a *Agent) Shutdown() error { return a.c.Shutdown() }

// APIEndpoint is where this node reaches a peer's API: the peer's advertised API port at the address the path
// from this node picks (Thunderbolt before Ethernet before Wi-Fi), and whether it serves TLS.
func APIEndpoint(s *serfcluster.Snapshot, from, to string) (hostPort string, tls bool, ok bool) {
	n, found := s.Node(serfcluster.NodeID(to))
	if !found || n.Tags.APIAddr == "" {
		return "", false, false
	}
	tls = len(n.Tags.StateURL) > 8 && n.Tags.StateURL[:8] == "https://"
	host, port, err := net.SplitHostPort(n.Tags.APIAddr)
	if err != nil {
		return "", false, false
	}
	if p, ok := s.Path(serfcluster.NodeID(from), serfcluster.NodeID(to)); ok && p.Address.IP.IsValid() {
		host = p.Address.IP.String()
	} else if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		if !n.Gossip.IsValid() {
			return "", false, false
		}
		host = n.Gossip.Addr().String()
	}
	return net.JoinHostPort(host, port), tls, true
}

// pathCacheTTL bounds how stale the converted paths may be: RTT estimates drift slowly, and membership changes
// rebuild them at once.
const pathCacheTTL = 2 * time.Second
