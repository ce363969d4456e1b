package serfcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
	"github.com/hashicorp/serf/serf"

	"github.com/duet-ai/duet/serfcluster/internal/lww"
	"github.com/duet-ai/duet/serfcluster/netif"
)

// ErrClosed is returned by writes after Leave or Shutdown.
var ErrClosed = errors.New("serfcluster: cluster is shut down")

// ErrNotFound is returned when deleting a key that holds no value.
var ErrNotFound = errors.New("serfcluster: not found")

// Sizes of the channels between serf, the public API and the event loop.
const (
	eventChanSize = 1024
	sendChanSize  = 256
	// maxBatch is how many ready inputs the loop handles before publishing a snapshot.
	maxBatch = 128
	// maxPendingPulls bounds the pull queue; beyond it, anti-entropy repairs later.
	maxPendingPulls = 64
	// aeFanout is how many differing peers one anti-entropy round pulls from.
	aeFanout = 3
)

// Cluster is one node's membership in the gateway cluster and its replica of the cluster tables. All state
// changes go through a single event-loop goroutine; readers get immutable snapshots.
type Cluster struct {
	cfg     Config
	log     *slog.Logger
	id      NodeID
	serf    *serf.Serf
	keyring *memberlist.Keyring
	clock   serf.LamportClock
	started time.Time

	events chan serf.Event
	work   chan func()
	sends  chan outgoing
	stop   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	snap   atomic.Pointer[Snapshot]
	subsMu sync.Mutex
	subs   map[chan *Snapshot]struct{}
	closed bool

	loadMu       sync.Mutex
	pendingLoads map[string]Load
	// pendingSpeeds wait for the next load flush at least SpeedInterval after the last speeds went out.
	pendingSpeeds map[string]Speed
	speedsSentAt  time.Time

	tagsMu sync.Mutex
	tags   Tags
	addrs  []netif.Address

	stats stats

	// Everything below is owned by the event loop.
	instances *lww.Map[Instance]
	links     *lww.Map[InstanceLink]
	tablesGen uint64
	owned     map[string]ownedInstance
	loads     map[string]loadEntry
	members   map[string]*member
	coords    map[string]*coordinate.Coordinate
	pulls     pullQueue
	outbox    []wireEntry
	dirty     bool
	version   uint64
	deferred  []func()
	export    *stateExport
	exportGen uint64
	warned    map[string]time.Time
}

type outgoing struct {
	name    string
	payload []byte
}

// ownedInstance is an instance this node wrote and keeps true: if the table ever holds anything else under
// its key (a tombstone from this node's previous life, a departed-node cleanup), the node writes it again.
type ownedInstance struct {
	inst Instance
	rev  lww.Rev
}

// member is a serf member with its decoded tags.
type member struct {
	m       serf.Member
	tags    Tags
	addrs   []netif.Address
	problem string
}

func newMember(m serf.Member) *member {
	mem := &member{m: m}
	t, addrs, err := decodeTags(m.Tags)
	if err != nil {
		mem.problem = err.Error()
		return mem
	}
	mem.tags, mem.addrs = t, addrs
	return mem
}

func (m *member) status() Status {
	switch m.m.Status {
	case serf.StatusAlive:
		return StatusAlive
	case serf.StatusFailed:
		return StatusFailed
	case serf.StatusLeaving, serf.StatusLeft:
		return StatusLeft
	}
	return StatusFailed
}

// New starts a serf agent and the event loop, and begins joining Config.JoinAddrs in the background.
func New(cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:           cfg,
		log:           cfg.Logger.With("component", "serfcluster", "node", cfg.NodeID),
		id:            cfg.NodeID,
		started:       time.Now(),
		events:        make(chan serf.Event, eventChanSize),
		work:          make(chan func()),
		sends:         make(chan outgoing, sendChanSize),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
		subs:          make(map[chan *Snapshot]struct{}),
		pendingLoads:  make(map[string]Load),
		pendingSpeeds: make(map[string]Speed),
		instances:     lww.New[Instance](cfg.MaxTableEntries, cfg.TombstoneTTL),
		links:         lww.New[InstanceLink](cfg.MaxTableEntries, cfg.TombstoneTTL),
		owned:         make(map[string]ownedInstance),
		loads:         make(map[string]loadEntry),
		members:       make(map[string]*member),
		coords:        make(map[string]*coordinate.Coordinate),
		pulls:         newPullQueue(),
		warned:        make(map[string]time.Time),
	}
	c.tags = Tags{
		NodeID: cfg.NodeID, APIAddr: cfg.APIAddr, KVAddr: cfg.KVAddr, Version: cfg.Version,
		HardwareClass: cfg.HardwareClass, StateURL: cfg.StateURL,
	}
	if c.addrs, err = c.advertisedAddresses(); err != nil {
		return nil, err
	}
	tagMap, err := encodeTags(c.tags, c.addrs)
	if err != nil {
		return nil, err
	}
	if c.keyring, err = loadKeyring(cfg); err != nil {
		return nil, err
	}
	sc, err := c.serfConfig(tagMap)
	if err != nil {
		return nil, err
	}
	if c.serf, err = serf.Create(sc); err != nil {
		return nil, fmt.Errorf("serfcluster: start serf: %w", err)
	}
	for _, m := range c.serf.Members() {
		c.members[m.Name] = newMember(m)
	}
	c.publish(c.build(time.Now()))

	c.wg.Add(2)
	go c.loop()
	go c.sender()
	if len(cfg.JoinAddrs) > 0 {
		c.wg.Add(1)
		go c.joinInBackground(slices.Clone(cfg.JoinAddrs))
	}
	if cfg.Addresses == nil && cfg.AddressRefreshInterval > 0 {
		c.wg.Add(1)
		go c.refreshAddresses()
	}
	c.log.Info("cluster node started", "gossip", c.GossipAddr(), "encrypted", c.keyring != nil)
	return c, nil
}

func (c *Cluster) advertisedAddresses() ([]netif.Address, error) {
	if c.cfg.Addresses != nil {
		if len(c.cfg.Addresses) > MaxAdvertisedAddresses {
			return nil, fmt.Errorf("serfcluster: %d addresses configured, over the limit of %d", len(c.cfg.Addresses), MaxAdvertisedAddresses)
		}
		for _, a := range c.cfg.Addresses {
			if err := a.Validate(); err != nil {
				return nil, fmt.Errorf("serfcluster: configured address: %w", err)
			}
		}
		return slices.Clone(c.cfg.Addresses), nil
	}
	found, err := c.cfg.DetectAddresses()
	if err != nil {
		// Not fatal: peers fall back to the gossip address.
		c.log.Warn("cannot detect local addresses", "err", err)
		return nil, nil
	}
	return selectAddresses(found, c.cfg.MaxAddresses), nil
}

func (c *Cluster) serfConfig(tags map[string]string) (*serf.Config, error) {
	cfg, t := c.cfg, c.cfg.Timings
	logger := newSerfLogger(cfg.Logger)
	sc := serf.DefaultConfig()
	sc.NodeName = cfg.NodeName
	sc.Tags = tags
	sc.EventCh = c.events
	sc.Logger = logger
	sc.SnapshotPath = cfg.SnapshotPath
	sc.RejoinAfterLeave = cfg.RejoinAfterLeave
	sc.UserEventSizeLimit = cfg.MaxEventBytes
	sc.ReapInterval = t.ReapInterval
	sc.ReconnectInterval = t.ReconnectInterval
	sc.ReconnectTimeout = t.ReconnectTimeout
	sc.TombstoneTimeout = t.TombstoneTimeout
	sc.LeavePropagateDelay = t.LeavePropagateDelay
	sc.BroadcastTimeout = t.BroadcastTimeout
	if c.keyring != nil && cfg.KeyringFile != "" {
		sc.KeyringFile = cfg.KeyringFile
	}

	ml := memberlist.DefaultLANConfig()
	ml.Name = cfg.NodeName
	ml.Logger = logger
	host, port, err := splitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("serfcluster: bind address: %w", err)
	}
	ml.BindAddr, ml.BindPort, ml.AdvertisePort = host, port, port
	if cfg.AdvertiseAddr != "" {
		host, port, err := splitHostPort(cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("serfcluster: advertise address: %w", err)
		}
		ml.AdvertiseAddr, ml.AdvertisePort = host, port
	}
	ml.GossipInterval = t.GossipInterval
	ml.GossipNodes = t.GossipNodes
	ml.ProbeInterval = t.ProbeInterval
	ml.ProbeTimeout = t.ProbeTimeout
	ml.SuspicionMult = t.SuspicionMult
	ml.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	ml.RetransmitMult = t.RetransmitMult
	ml.PushPullInterval = t.PushPullInterval
	ml.TCPTimeout = t.TCPTimeout
	ml.GossipToTheDeadTime = t.GossipToTheDeadTime
	ml.Keyring = c.keyring
	sc.MemberlistConfig = ml
	return sc, nil
}

// GossipAddr returns the host:port this node gossips on (useful with a :0 bind address).
func (c *Cluster) GossipAddr() string {
	m := c.serf.LocalMember()
	return net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
}

// Join contacts the given gossip addresses and returns how many answered. An error means none did.
func (c *Cluster) Join(addrs []string) (int, error) {
	n, err := c.serf.Join(addrs, true)
	if err != nil {
		return n, fmt.Errorf("serfcluster: join %v: %w", addrs, err)
	}
	return n, nil
}

func (c *Cluster) joinInBackground(addrs []string) {
	defer c.wg.Done()
	wait := c.cfg.JoinRetryInterval
	for {
		n, err := c.serf.Join(addrs, true)
		if err == nil && n > 0 {
			c.log.Info("joined cluster", "contacted", n)
			return
		}
		c.log.Warn("join failed; retrying", "addrs", addrs, "err", err, "in", wait)
		select {
		case <-c.stop:
			return
		case <-time.After(jitter(wait)):
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// refreshAddresses re-detects local addresses and updates the tags when they change (a laptop moving
// networks). SetTags blocks until the update is broadcast, so it runs here and not in the event loop.
func (c *Cluster) refreshAddresses() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.AddressRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		found, err := c.cfg.DetectAddresses()
		if err != nil {
			c.log.Warn("cannot detect local addresses", "err", err)
			continue
		}
		addrs := selectAddresses(found, c.cfg.MaxAddresses)
		c.tagsMu.Lock()
		same := slices.Equal(addrs, c.addrs)
		tags := c.tags
		c.tagsMu.Unlock()
		if same {
			continue
		}
		m, err := encodeTags(tags, addrs)
		if err != nil {
			c.log.Error("local addresses changed but cannot be advertised", "err", err)
			continue
		}
		if err := c.serf.SetTags(m); err != nil {
			c.log.Warn("cannot update tags", "err", err)
			continue
		}
		c.tagsMu.Lock()
		c.addrs = addrs
		c.tagsMu.Unlock()
		c.log.Info("advertised addresses changed", "count", len(addrs))
	}
}

// Leave leaves the cluster gracefully, so peers remove this node's instances at once, and shuts down.
func (c *Cluster) Leave() error {
	err := c.serf.Leave()
	if err != nil {
		err = fmt.Errorf("serfcluster: leave: %w", err)
	}
	return errors.Join(err, c.Shutdown())
}

// Shutdown stops the node without leaving: to peers it looks like a crash, its instances become
// unavailable, and they come back if it returns before serf reaps it. Snapshot stays readable afterwards.
func (c *Cluster) Shutdown() error {
	var err error
	c.once.Do(func() {
		// Serf first, while the loop still drains its event channel: serf's goroutines send to it
		// without watching for shutdown.
		if e := c.serf.Shutdown(); e != nil {
			err = fmt.Errorf("serfcluster: shutdown: %w", e)
		}
		close(c.stop)
		c.wg.Wait()
		c.subsMu.Lock()
		c.closed = true
		for ch := range c.subs {
			close(ch)
		}
		clear(c.subs)
		c.subsMu.Unlock()
	})
	return err
}

// Snapshot returns the current snapshot.
func (c *Cluster) Snapshot() *Snapshot { return c.snap.Load() }

// LocalNode returns this node as the current snapshot sees it.
func (c *Cluster) LocalNode() Node {
	n, _ := c.Snapshot().Node(c.id)
	return n
}

// Path is Snapshot().Path.
func (c *Cluster) Path(from, to NodeID) (Path, bool) { return c.Snapshot().Path(from, to) }

// Subscribe returns a channel that receives the current snapshot at once and then every newer one. It
// coalesces: a slow reader finds the newest snapshot waiting, never a backlog, and never slows the event
// loop. The channel is closed when ctx ends or the cluster shuts down.
func (c *Cluster) Subscribe(ctx context.Context) <-chan *Snapshot {
	ch := make(chan *Snapshot, 1)
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	ch <- c.snap.Load()
	if c.closed {
		close(ch)
		return ch
	}
	c.subs[ch] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
		case <-c.stop:
			return // Shutdown closes it
		}
		c.subsMu.Lock()
		defer c.subsMu.Unlock()
		if _, ok := c.subs[ch]; ok {
			delete(c.subs, ch)
			close(ch)
		}
	}()
	return ch
}

func (c *Cluster) publish(s *Snapshot) {
	c.snap.Store(s)
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for ch := range c.subs {
		select {
		case ch <- s:
		default:
			// Replace the unread older snapshot. Only this goroutine sends, under subsMu, so after the
			// drain the buffer has room.
			select {
			case <-ch:
			default:
			}
			ch <- s
		}
	}
}

// do runs fn on the event loop and returns its error once the resulting snapshot is published, so a write
// is visible in Snapshot when the call returns.
func (c *Cluster) do(fn func() error) error {
	reply := make(chan error, 1)
	job := func() {
		err := fn()
		c.deferred = append(c.deferred, func() { reply <- err })
	}
	select {
	case c.work <- job:
	case <-c.stop:
		return ErrClosed
	}
	select {
	case err := <-reply:
		return err
	case <-c.done:
		return ErrClosed
	}
}

// post hands fn to the event loop from a helper goroutine; it gives up when the cluster stops.
func (c *Cluster) post(fn func()) {
	select {
	case c.work <- fn:
	case <-c.stop:
	}
}

// PutInstance publishes an instance of this node (Node empty or this node's ID). This node keeps it true
// until DeleteInstance: if a stale or deleting write from elsewhere ever wins, it writes it again.
func (c *Cluster) PutInstance(in Instance) error {
	in.Labels = maps.Clone(in.Labels)
	in.Load, in.Revision = Load{}, Revision{}
	if in.Node == "" {
		in.Node = c.id
	}
	if in.Node != c.id {
		return fmt.Errorf("serfcluster: instance %q names node %q; a node only publishes its own instances (this is %q)", in.ID, in.Node, c.id)
	}
	if err := in.Validate(); err != nil {
		return err
	}
	return c.do(func() error {
		cur, ok := c.instances.Get(in.ID, time.Now())
		live := ok && !cur.Deleted
		if live && cur.Value.Node != c.id {
			if mem := c.memberByID(cur.Value.Node); mem != nil && mem.status() != StatusLeft {
				return fmt.Errorf("serfcluster: instance id %q is already used by node %q", in.ID, cur.Value.Node)
			}
		}
		if o, owned := c.owned[in.ID]; owned && live && cur.Rev == o.rev && instanceEqual(o.inst, in) {
			return nil // unchanged
		}
		c.owned[in.ID] = ownedInstance{inst: in, rev: c.writeInstance(in)}
		return nil
	})
}

// DeleteInstance removes an instance of this node.
func (c *Cluster) DeleteInstance(id string) error {
	return c.do(func() error {
		cur, ok := c.instances.Get(id, time.Now())
		if !ok || cur.Deleted {
			delete(c.owned, id)
			return fmt.Errorf("%w: instance %q", ErrNotFound, id)
		}
		if cur.Value.Node != c.id {
			return fmt.Errorf("serfcluster: instance %q belongs to node %q; only it can delete it", id, cur.Value.Node)
		}
		delete(c.owned, id)
		c.deleteInstance(id)
		return nil
	})
}

// PutInstanceLink publishes an instance link. Any node may write any link; the last write wins everywhere.
func (c *Cluster) PutInstanceLink(l InstanceLink) error {
	l.PrefillInstances = slices.Clone(l.PrefillInstances)
	l.DecodeInstances = slices.Clone(l.DecodeInstances)
	l.Revision = Revision{}
	if l.PrefillInstances == nil {
		l.PrefillInstances = []string{}
	}
	if err := l.Validate(); err != nil {
		return err
	}
	return c.do(func() error {
		if cur, ok := c.links.Get(l.LinkID, time.Now()); ok && !cur.Deleted && linkEqual(cur.Value, l) {
			return nil
		}
		c.writeLink(l)
		return nil
	})
}

// DeleteInstanceLink removes an instance link.
func (c *Cluster) DeleteInstanceLink(id string) error {
	return c.do(func() error {
		cur, ok := c.links.Get(id, time.Now())
		if !ok || cur.Deleted {
			return fmt.Errorf("%w: instance link %q", ErrNotFound, id)
		}
		c.deleteLink(id)
		return nil
	})
}

// SetLoad records the load of one of this node's instances. It is cheap enough to call on every request:
// the value is picked up and spread at most once per LoadInterval, so the snapshot, here and elsewhere,
// shows it after up to LoadInterval plus gossip time. Loads of instances this node has not published
// are ignored.
func (c *Cluster) SetLoad(instanceID string, ld Load) error {
	if err := checkID("instance id", instanceID); err != nil {
		return fmt.Errorf("serfcluster: set load: %w", err)
	}
	if err := ld.validate(); err != nil {
		return err
	}
	if ld.UpdatedAt.IsZero() {
		ld.UpdatedAt = time.Now()
	}
	c.loadMu.Lock()
	c.pendingLoads[instanceID] = ld
	c.loadMu.Unlock()
	return nil
}

// SetSpeed records the measured speed of one of this node's instances. It may be called as often as speeds
// change: the latest value per instance goes out with the next load broadcast at least SpeedInterval after
// the last speeds went out, and later load broadcasts do not repeat it (every node keeps an instance's last
// speed). Speeds of instances this node has not published are ignored.
func (c *Cluster) SetSpeed(instanceID string, sp Speed) error {
	if err := checkID("instance id", instanceID); err != nil {
		return fmt.Errorf("serfcluster: set speed: %w", err)
	}
	if err := sp.validate(); err != nil {
		return err
	}
	sp.PrefillTPS = slices.Clone(sp.PrefillTPS)
	sp.Ingress = slices.Clone(sp.Ingress)
	c.loadMu.Lock()
	c.pendingSpeeds[instanceID] = sp
	c.loadMu.Unlock()
	return nil
}

// memberByID returns the member with a node ID, preferring one that is alive.
func (c *Cluster) memberByID(id NodeID) *member {
	var found *member
	for _, m := range c.members {
		if m.problem != "" || m.tags.NodeID != id {
			continue
		}
		if found == nil || m.status() == StatusAlive && found.status() != StatusAlive {
			found = m
		}
	}
	return found
}

func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

func instanceEqual(a, b Instance) bool {
	return a.ID == b.ID && a.Model == b.Model && a.Node == b.Node && a.Engine == b.Engine && a.Role == b.Role &&
		a.Status == b.Status && a.KVEndpoint == b.KVEndpoint && a.Fingerprint == b.Fingerprint &&
		maps.Equal(a.Labels, b.Labels)
}

func linkEqual(a, b InstanceLink) bool {
	return a.LinkID == b.LinkID && slices.Equal(a.PrefillInstances, b.PrefillInstances) &&
		slices.Equal(a.DecodeInstances, b.DecodeInstances)
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), port)
}
