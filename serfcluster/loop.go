package serfcluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/hashicorp/serf/serf"

	"github.com/duet-ai/duet/serfcluster/internal/lww"
)

// Stats counts what the event loop did; for tests, benchmarks and the UI.
type Stats struct {
	DeltasSent     uint64 // delta events sent
	DeltasReceived uint64 // delta events from peers handled
	LoadsSent      uint64 // load events sent
	LoadsReceived  uint64 // load events from peers handled
	EventsDropped  uint64 // events the test hook dropped
	BadMessages    uint64 // events, queries or entries refused as malformed
	SendOverflows  uint64 // outgoing events dropped because the send queue was full
	Pulls          uint64 // full-state pulls that succeeded
	PullErrors     uint64 // full-state pulls that failed
	Reasserts      uint64 // own instances written again after a foreign write won
	StubsReceived  uint64 // delta entries that came without their value (too big for an event)
}

type stats struct {
	deltasSent, deltasReceived, loadsSent, loadsReceived, eventsDropped, badMessages, sendOverflows,
	pulls, pullErrors, reasserts, stubsReceived atomic.Uint64
}

// Stats returns the counters so far.
func (c *Cluster) Stats() Stats {
	s := &c.stats
	return Stats{
		DeltasSent: s.deltasSent.Load(), DeltasReceived: s.deltasReceived.Load(), LoadsSent: s.loadsSent.Load(),
		LoadsReceived: s.loadsReceived.Load(), EventsDropped: s.eventsDropped.Load(),
		BadMessages: s.badMessages.Load(), SendOverflows: s.sendOverflows.Load(), Pulls: s.pulls.Load(),
		PullErrors: s.pullErrors.Load(), Reasserts: s.reasserts.Load(), StubsReceived: s.stubsReceived.Load(),
	}
}

// loop is the single goroutine that owns the tables and the member view. Everything that changes them
// arrives here: serf events, API writes, pull results and timers. Nothing here blocks on the network.
func (c *Cluster) loop() {
	defer c.wg.Done()
	defer close(c.done)
	ae := time.NewTimer(jitter(c.cfg.AntiEntropyInterval))
	defer ae.Stop()
	loadTick := time.NewTicker(c.cfg.LoadInterval)
	defer loadTick.Stop()
	coordTick := time.NewTicker(c.cfg.CoordinateInterval)
	defer coordTick.Stop()
	gcTick := time.NewTicker(c.gcInterval())
	defer gcTick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case ev := <-c.events:
			c.handleEvent(ev)
		case job := <-c.work:
			job()
		case <-ae.C:
			c.antiEntropy()
			ae.Reset(jitter(c.cfg.AntiEntropyInterval))
		case <-loadTick.C:
			c.flushLoads()
		case <-coordTick.C:
			c.refreshCoordinates()
		case <-gcTick.C:
			c.collect()
		}
		c.drain()
		c.flush()
	}
}

// drain handles inputs that are already waiting, so that a burst costs one snapshot, not one each.
func (c *Cluster) drain() {
	for range maxBatch {
		select {
		case ev := <-c.events:
			c.handleEvent(ev)
		case job := <-c.work:
			job()
		default:
			return
		}
	}
}

// flush sends what the batch wrote, starts pulls, publishes a snapshot if anything changed and then
// answers the API calls of the batch.
func (c *Cluster) flush() {
	if len(c.outbox) > 0 {
		payloads, dropped := pack(string(c.id), "e", c.outbox, c.cfg.MaxEventBytes-len(eventDelta)-eventOverhead, stubOf)
		for _, p := range payloads {
			if c.send(eventDelta, p) {
				c.stats.deltasSent.Add(1)
			}
		}
		if len(dropped) > 0 {
			c.log.Warn("deltas too large even as stubs; anti-entropy will carry them", "count", len(dropped))
		}
		c.outbox = c.outbox[:0]
	}
	c.startPulls()
	if c.dirty {
		c.publish(c.build(time.Now()))
		c.dirty = false
	}
	for _, f := range c.deferred {
		f()
	}
	c.deferred = c.deferred[:0]
}

// send queues a user event for the sender goroutine. serf delivers a node's own events to its own event
// channel synchronously, so calling serf.UserEvent from the loop could deadlock on a full channel.
func (c *Cluster) send(name string, payload []byte) bool {
	select {
	case c.sends <- outgoing{name: name, payload: payload}:
		return true
	default:
		c.stats.sendOverflows.Add(1)
		c.warnEvery("send-overflow", "send queue full; dropping an event, anti-entropy will repair")
		return false
	}
}

func (c *Cluster) sender() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case o := <-c.sends:
			if err := c.serf.UserEvent(o.name, o.payload, false); err != nil {
				c.log.Warn("cannot send event", "name", o.name, "bytes", len(o.payload), "err", err)
			}
		}
	}
}

// warnEvery logs a warning at most once a minute per key.
func (c *Cluster) warnEvery(key, msg string, args ...any) {
	now := time.Now()
	if last, ok := c.warned[key]; ok && now.Sub(last) < time.Minute {
		return
	}
	c.warned[key] = now
	c.log.Warn(msg, args...)
}

func (c *Cluster) handleEvent(ev serf.Event) {
	switch e := ev.(type) {
	case serf.MemberEvent:
		c.handleMemberEvent(e)
	case serf.UserEvent:
		c.handleUserEvent(e)
	case *serf.Query:
		c.handleQuery(e)
	}
}

func (c *Cluster) handleMemberEvent(e serf.MemberEvent) {
	c.dirty = true
	for _, m := range e.Members {
		if e.Type == serf.EventMemberReap {
			old := c.members[m.Name]
			delete(c.members, m.Name)
			delete(c.coords, m.Name)
			if old != nil && old.problem == "" {
				c.removeNode(old.tags.NodeID)
			}
			continue
		}
		mem := newMember(m)
		c.members[m.Name] = mem
		if mem.problem != "" {
			c.warnEvery("tags/"+m.Name, "member has bad tags; it is ineligible", "member", m.Name, "problem", mem.problem)
			continue
		}
		id := mem.tags.NodeID
		if id == c.id {
			continue
		}
		switch e.Type {
		case serf.EventMemberJoin:
			// A new or returning node: learn its truth (and everything it knows) now rather than at the
			// next anti-entropy round.
			c.pulls.add(id)
		case serf.EventMemberLeave:
			c.removeNode(id)
		case serf.EventMemberFailed:
			c.dropLoadsOf(id)
		}
	}
}

// removeNode deletes the instances of a node that left or was reaped. Every node does this on its own, with
// tombstones at the revisions of the values they delete, so all replicas agree without sending anything;
// a node that returns writes its instances again at newer revisions.
func (c *Cluster) removeNode(id NodeID) {
	if id == c.id {
		return
	}
	if m := c.memberByID(id); m != nil && m.status() == StatusAlive {
		return // the ID lives on in another member (a restart under a new name)
	}
	now := time.Now()
	for _, e := range c.instances.Live() {
		if e.Value.Node != id {
			continue
		}
		tomb := lww.Entry[Instance]{Key: e.Key, Rev: e.Rev, Deleted: true, TTL: c.cfg.TombstoneTTL}
		if ok, _ := c.instances.Apply(tomb, now); ok {
			c.tablesGen++
		}
	}
	c.dropLoadsOf(id)
	c.dirty = true
}

func (c *Cluster) dropLoadsOf(id NodeID) {
	for k, le := range c.loads {
		if le.origin == id {
			delete(c.loads, k)
			c.dirty = true
		}
	}
}

func (c *Cluster) handleUserEvent(e serf.UserEvent) {
	if !strings.HasPrefix(e.Name, namePrefix) {
		return
	}
	if c.cfg.dropUserEvent != nil && c.cfg.dropUserEvent(e.Name) {
		c.stats.eventsDropped.Add(1)
		return
	}
	switch e.Name {
	case eventDelta:
		var msg deltaMsg
		if err := decodeMsg(e.Payload, &msg, &msg.msgHeader); err != nil {
			c.bad("delta event", err)
			return
		}
		if NodeID(msg.Sender) == c.id {
			return
		}
		c.stats.deltasReceived.Add(1)
		for _, w := range msg.Entries {
			d, err := w.decode(c.cfg.TombstoneTTL)
			if err != nil {
				c.bad("delta from "+msg.Sender, err)
				continue
			}
			c.applyRemote(d, NodeID(msg.Sender))
		}
	case eventLoad:
		var msg loadMsg
		if err := decodeMsg(e.Payload, &msg, &msg.msgHeader); err != nil {
			c.bad("load event", err)
			return
		}
		if NodeID(msg.Sender) == c.id {
			return
		}
		c.stats.loadsReceived.Add(1)
		for _, w := range msg.Loads {
			w.Origin = "" // a load event speaks for its sender only
			id, le, err := w.decode(msg.Sender)
			if err != nil {
				c.bad("load from "+msg.Sender, err)
				continue
			}
			c.applyLoad(id, le)
		}
	}
}

func (c *Cluster) bad(what string, err error) {
	c.stats.badMessages.Add(1)
	c.warnEvery("bad/"+what, "refused malformed "+what, "err", err)
}

// applyRemote merges one validated entry from a peer. sender is who to pull from when it is a stub.
func (c *Cluster) applyRemote(d decodedEntry, sender NodeID) {
	rev := d.rev()
	if rev.LTime > uint64(c.clock.Time())+maxClockJump {
		c.bad("entry from "+string(sender), errors.New("lamport time implausibly far ahead"))
		return
	}
	c.clock.Witness(serf.LamportTime(rev.LTime))
	now := time.Now()
	if d.stub {
		c.stats.stubsReceived.Add(1)
		if cur, ok := c.held(d.table, d.key(), now); !ok || cur.Compare(rev) < 0 {
			c.pulls.add(sender)
		}
		return
	}
	var applied bool
	var err error
	if d.table == tableInstances {
		applied, err = c.instances.Apply(d.inst, now)
	} else {
		applied, err = c.links.Apply(d.link, now)
	}
	if errors.Is(err, lww.ErrFull) {
		c.warnEvery("full/"+d.table, "table full; refusing new keys", "table", d.table, "limit", c.cfg.MaxTableEntries)
		return
	}
	if !applied {
		return
	}
	c.tablesGen++
	c.dirty = true
	if d.table == tableInstances {
		c.checkOwned(d.key())
	}
}

// held returns the revision this node holds for a key, tombstones included.
func (c *Cluster) held(table, key string, now time.Time) (lww.Rev, bool) {
	if table == tableInstances {
		e, ok := c.instances.Get(key, now)
		return e.Rev, ok
	}
	e, ok := c.links.Get(key, now)
	return e.Rev, ok
}

// checkOwned keeps this node's instances true: when anything but this node's own last write holds the key,
// the node writes its instance again, at a revision above what it just witnessed. If the key now belongs
// to another node (two nodes published the same instance ID) the node yields rather than fight.
func (c *Cluster) checkOwned(key string) {
	o, ok := c.owned[key]
	if !ok {
		return
	}
	cur, _ := c.instances.Get(key, time.Now())
	if !cur.Deleted && cur.Rev == o.rev {
		return
	}
	if !cur.Deleted && cur.Value.Node != c.id {
		c.log.Error("instance id taken over by another node; withdrawing ours", "instance", key, "node", cur.Value.Node)
		delete(c.owned, key)
		return
	}
	c.stats.reasserts.Add(1)
	c.owned[key] = ownedInstance{inst: o.inst, rev: c.writeInstance(o.inst)}
}

func (c *Cluster) applyLoad(id string, le loadEntry) {
	if le.ltime > uint64(c.clock.Time())+maxClockJump {
		return
	}
	c.clock.Witness(serf.LamportTime(le.ltime))
	cur, ok := c.loads[id]
	if ok && cur.ltime >= le.ltime {
		return
	}
	if !ok && len(c.loads) >= c.cfg.MaxTableEntries {
		c.warnEvery("full/loads", "load table full; refusing new keys", "limit", c.cfg.MaxTableEntries)
		return
	}
	if le.load.Speed == nil && ok {
		le.load.Speed = cur.load.Speed // load events carry a speed only when it changed
	}
	le.seen = time.Now()
	c.loads[id] = le
	c.dirty = true
}

// Local writes. Each takes a fresh Lamport time, applies locally and queues the delta.

func (c *Cluster) nextRev() lww.Rev {
	return lww.Rev{LTime: uint64(c.clock.Increment()), Origin: string(c.id)}
}

func (c *Cluster) writeInstance(in Instance) lww.Rev {
	e := lww.Entry[Instance]{Key: in.ID, Rev: c.nextRev(), Value: in}
	c.localApply(instanceEntryToWire(e), func(now time.Time) (bool, error) { return c.instances.Apply(e, now) })
	return e.Rev
}

func (c *Cluster) deleteInstance(id string) {
	e := lww.Entry[Instance]{Key: id, Rev: c.nextRev(), Deleted: true, TTL: c.cfg.TombstoneTTL}
	c.localApply(instanceEntryToWire(e), func(now time.Time) (bool, error) { return c.instances.Apply(e, now) })
	delete(c.loads, id)
}

func (c *Cluster) writeLink(l InstanceLink) {
	e := lww.Entry[InstanceLink]{Key: l.LinkID, Rev: c.nextRev(), Value: l}
	c.localApply(linkEntryToWire(e), func(now time.Time) (bool, error) { return c.links.Apply(e, now) })
}

func (c *Cluster) deleteLink(id string) {
	e := lww.Entry[InstanceLink]{Key: id, Rev: c.nextRev(), Deleted: true, TTL: c.cfg.TombstoneTTL}
	c.localApply(linkEntryToWire(e), func(now time.Time) (bool, error) { return c.links.Apply(e, now) })
}

func (c *Cluster) localApply(w wireEntry, apply func(time.Time) (bool, error)) {
	if _, err := apply(time.Now()); err != nil {
		// Only ErrFull; the write still goes out so that peers with room hold it.
		c.warnEvery("full/local", "table full; this node keeps no copy of its own write", "key", w.Key)
	}
	c.tablesGen++
	c.dirty = true
	c.outbox = append(c.outbox, w)
}

// flushLoads spreads the loads set since the last tick, one batch per LoadInterval at most.
func (c *Cluster) flushLoads() {
	now := time.Now()
	c.loadMu.Lock()
	pending := c.pendingLoads
	var speeds map[string]Speed
	if len(c.pendingSpeeds) > 0 && now.Sub(c.speedsSentAt) >= c.cfg.SpeedInterval {
		speeds, c.pendingSpeeds, c.speedsSentAt = c.pendingSpeeds, make(map[string]Speed), now
	}
	if len(pending) == 0 && len(speeds) == 0 {
		c.loadMu.Unlock()
		return
	}
	if len(pending) > 0 {
		c.pendingLoads = make(map[string]Load)
	}
	c.loadMu.Unlock()
	out := make([]wireLoad, 0, len(pending)+len(speeds))
	add := func(id string, ld Load, hasLoad bool) {
		if _, ok := c.owned[id]; !ok {
			return
		}
		cur, known := c.loads[id]
		if !hasLoad {
			if ld = cur.load; !known {
				ld = Load{UpdatedAt: now}
			}
		}
		sp, newSpeed := speeds[id]
		if newSpeed {
			ld.Speed = &sp
		} else {
			ld.Speed = cur.load.Speed
		}
		le := loadEntry{origin: c.id, ltime: uint64(c.clock.Increment()), load: ld, seen: now}
		c.loads[id] = le
		w := loadToWire(id, le, false)
		if !newSpeed {
			w.S = nil // peers keep the last speed they got
		}
		out = append(out, w)
	}
	for id, ld := range pending {
		add(id, ld, true)
	}
	for id := range speeds {
		if _, ok := pending[id]; !ok {
			add(id, Load{}, false)
		}
	}
	c.dirty = c.dirty || len(out) > 0
	c.sendLoads(out)
}

func (c *Cluster) sendLoads(out []wireLoad) {
	if len(out) == 0 {
		return
	}
	slices.SortFunc(out, func(a, b wireLoad) int { return cmp.Compare(a.ID, b.ID) })
	payloads, _ := pack(string(c.id), "l", out, c.cfg.MaxEventBytes-len(eventLoad)-eventOverhead, nil)
	for _, p := range payloads {
		if c.send(eventLoad, p) {
			c.stats.loadsSent.Add(1)
		}
	}
}

// antiEntropy asks the cluster, with a serf query carrying this node's digest, who holds different tables.
// Every node that differs pulls from this one and answers; this one then pulls from a few of those that
// answered. It also resends this node's loads, which are soft state and not covered by the digest.
func (c *Cluster) antiEntropy() {
	// Fresh revisions, so that a load this node sent before it caught up with the cluster's clock (just
	// after a restart) cannot stay outranked by its own load from before the restart.
	var loads []wireLoad
	for id, le := range c.loads {
		if le.origin == c.id {
			le.ltime = uint64(c.clock.Increment())
			c.loads[id] = le
			loads = append(loads, loadToWire(id, le, false))
		}
	}
	c.sendLoads(loads)
	c.deleteOrphans()
	if len(c.alivePeers()) == 0 {
		return
	}
	digest := c.digestHex()
	payload, _ := json.Marshal(digestMsg{msgHeader: newHeader(c.id), Digest: digest})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		resp, err := c.serf.Query(queryDigest, payload, nil)
		if err != nil {
			c.log.Warn("anti-entropy query failed; pulling from a random peer", "err", err)
			c.post(c.pullRandomPeer)
			return
		}
		differ, ok := c.differingPeers(resp, digest)
		if !ok || len(differ) == 0 {
			return
		}
		rand.Shuffle(len(differ), func(i, j int) { differ[i], differ[j] = differ[j], differ[i] })
		differ = differ[:min(len(differ), aeFanout)]
		c.post(func() {
			for _, id := range differ {
				c.pulls.add(id)
			}
		})
	}()
}

// differingPeers collects the answers to a digest query: the peers whose digest differs from digest. It
// is false if the cluster stopped meanwhile.
func (c *Cluster) differingPeers(resp *serf.QueryResponse, digest string) ([]NodeID, bool) {
	var differ []NodeID
	for {
		select {
		case <-c.stop:
			return nil, false
		case r, ok := <-resp.ResponseCh():
			if !ok {
				return differ, true
			}
			var m digestMsg
			if decodeMsg(r.Payload, &m, &m.msgHeader) != nil {
				continue
			}
			if m.Digest != digest && NodeID(m.Sender) != c.id {
				differ = append(differ, NodeID(m.Sender))
			}
		}
	}
}

// deleteOrphans deletes this node's instances from a previous run that its gateway has not published
// again within OrphanGrace of the start.
func (c *Cluster) deleteOrphans() {
	if time.Since(c.started) < c.cfg.OrphanGrace {
		return
	}
	for _, e := range c.instances.Live() {
		if _, ok := c.owned[e.Key]; !ok && e.Value.Node == c.id {
			c.log.Info("deleting an instance of this node from a previous run", "instance", e.Key)
			c.deleteInstance(e.Key)
		}
	}
}

func (c *Cluster) handleQuery(q *serf.Query) {
	if q.Name != queryDigest {
		return
	}
	var m digestMsg
	if err := decodeMsg(q.Payload, &m, &m.msgHeader); err != nil {
		c.bad("digest query", err)
		return
	}
	mine := c.digestHex()
	if NodeID(m.Sender) == c.id || m.Digest == mine {
		return
	}
	resp, _ := json.Marshal(digestMsg{msgHeader: newHeader(c.id), Digest: mine})
	if err := q.Respond(resp); err != nil {
		c.log.Debug("cannot answer digest query", "err", err)
	}
	c.pulls.add(NodeID(m.Sender))
}

// alivePeers lists the eligible, alive members other than this node.
func (c *Cluster) alivePeers() []NodeID {
	var ids []NodeID
	for _, m := range c.members {
		if m.problem == "" && m.tags.NodeID != c.id && m.status() == StatusAlive {
			ids = append(ids, m.tags.NodeID)
		}
	}
	return ids
}

func (c *Cluster) pullRandomPeer() {
	if ids := c.alivePeers(); len(ids) > 0 {
		c.pulls.add(ids[rand.N(len(ids))])
	}
}

func (c *Cluster) digestHex() string {
	a, b := c.instances.Digest(), c.links.Digest()
	sum := sha256.Sum256(append(a[:], b[:]...))
	return hex.EncodeToString(sum[:16])
}

// pullQueue schedules full-state pulls: each peer at most once in the queue, at most once in flight, and
// pulled again after an in-flight pull if asked meanwhile (the in-flight one may predate what was asked).
type pullQueue struct {
	order    []NodeID
	pending  map[NodeID]bool
	inflight map[NodeID]bool
	again    map[NodeID]bool
}

func newPullQueue() pullQueue {
	return pullQueue{pending: map[NodeID]bool{}, inflight: map[NodeID]bool{}, again: map[NodeID]bool{}}
}

func (q *pullQueue) add(id NodeID) {
	switch {
	case q.inflight[id]:
		q.again[id] = true
	case q.pending[id], len(q.order) >= maxPendingPulls:
	default:
		q.pending[id] = true
		q.order = append(q.order, id)
	}
}

func (c *Cluster) startPulls() {
	for len(c.pulls.inflight) < c.cfg.MaxConcurrentPulls && len(c.pulls.order) > 0 {
		id := c.pulls.order[0]
		c.pulls.order = c.pulls.order[1:]
		delete(c.pulls.pending, id)
		m := c.memberByID(id)
		if id == c.id || m == nil || m.status() != StatusAlive {
			continue
		}
		url := m.tags.StateURL
		c.pulls.inflight[id] = true
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.PullTimeout)
			defer cancel()
			go func() {
				select {
				case <-c.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			res, err := c.fetchState(ctx, url, id)
			c.post(func() { c.pullDone(id, res, err) })
		}()
	}
}

func (c *Cluster) pullDone(id NodeID, res *pulledState, err error) {
	delete(c.pulls.inflight, id)
	if c.pulls.again[id] {
		delete(c.pulls.again, id)
		c.pulls.add(id)
	}
	if err != nil {
		c.stats.pullErrors.Add(1)
		c.log.Warn("state pull failed", "peer", id, "err", err)
		return
	}
	c.stats.pulls.Add(1)
	if res.clock <= uint64(c.clock.Time())+maxClockJump {
		c.clock.Witness(serf.LamportTime(res.clock))
	}
	for _, d := range res.entries {
		c.applyRemote(d, id)
	}
	for _, l := range res.loads {
		c.applyLoad(l.id, l.entry)
	}
}

// refreshCoordinates re-reads RTT coordinates from serf and marks the snapshot dirty when one moved enough
// to matter: by more than 10% of its distance from this node, and at least 200 µs.
func (c *Cluster) refreshCoordinates() {
	self, err := c.serf.GetCoordinate()
	if err != nil {
		return
	}
	changed := false
	update := func(name string, coord *coordinate.Coordinate) {
		prev := c.coords[name]
		c.coords[name] = coord
		if prev == nil || !prev.IsCompatibleWith(coord) || !coord.IsCompatibleWith(self) {
			changed = true
			return
		}
		threshold := max(200*time.Microsecond, coord.DistanceTo(self)/10)
		if prev.DistanceTo(coord) > threshold {
			changed = true
		}
	}
	for name, m := range c.members {
		if name == c.cfg.NodeName {
			update(name, self)
			continue
		}
		if m.status() != StatusAlive {
			continue
		}
		if coord, ok := c.serf.GetCachedCoordinate(name); ok && coord != nil {
			update(name, coord)
		}
	}
	if changed {
		c.dirty = true
	}
}

func (c *Cluster) gcInterval() time.Duration {
	return min(max(c.cfg.TombstoneTTL/4, 100*time.Millisecond), time.Minute)
}

// collect drops expired tombstones and loads of instances that never appeared.
func (c *Cluster) collect() {
	now := time.Now()
	if n := c.instances.Expire(now) + c.links.Expire(now); n > 0 {
		c.tablesGen++
	}
	loadAge := max(10*c.cfg.LoadInterval, time.Minute)
	for id, le := range c.loads {
		if _, ok := c.instances.Get(id, now); !ok && now.Sub(le.seen) > loadAge {
			delete(c.loads, id)
		}
	}
}
