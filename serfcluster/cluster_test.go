package serfcluster

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/serfcluster/internal/lww"
)

const clusterSize = 5

func TestJoinAndReplicate(t *testing.T) {
	nodes := startCluster(t, clusterSize, nil)
	for _, n := range nodes {
		if err := n.PutInstance(testInstance(n.id, "a")); err != nil {
			t.Fatal(err)
		}
		// Read your writes: the snapshot has it when PutInstance returns.
		if _, ok := n.Snapshot().Instance(string(n.id) + "/a"); !ok {
			t.Fatalf("%s: own instance missing right after PutInstance", n.id)
		}
	}
	if err := nodes[0].PutInstanceLink(InstanceLink{
		LinkID: "l1", PrefillInstances: []string{"n1/a", "n2/a"}, DecodeInstances: []string{"n0/a"},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			if len(s.Instances) != clusterSize || len(s.Links) != 1 {
				return false, fmt.Sprintf("%d instances, %d links", len(s.Instances), len(s.Links))
			}
			for _, in := range s.Instances {
				if in.Status != InstanceReady {
					return false, fmt.Sprintf("%s is %s", in.ID, in.Status)
				}
			}
			return true, ""
		})
	})
	// Identity and link state arrived with the tags.
	s := nodes[3].Snapshot()
	n1, _ := s.Node("n1")
	if n1.Tags.Version != "test" || n1.Tags.HardwareClass != "ci" || len(n1.Addresses) != 3 {
		t.Fatalf("n1 as seen by n3: %+v", n1)
	}
	p, ok := s.Path("n3", "n1")
	if !ok || p.Address.IP.String() != "169.254.7.11" || !p.Direct {
		t.Fatalf("Path(n3, n1) = %+v, %v; want the Thunderbolt address", p, ok)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		_, ok := nodes[3].Snapshot().RTT("n3", "n1")
		return ok, "no RTT estimate from n3 to n1 yet"
	})
	if ld := nodes[0].LocalNode(); ld.ID != "n0" || ld.Status != StatusAlive {
		t.Fatalf("LocalNode = %+v", ld)
	}
}

func TestGracefulLeaveRemovesInstances(t *testing.T) {
	nodes := startCluster(t, clusterSize, nil)
	leaver := nodes[4]
	if err := leaver.PutInstance(testInstance(leaver.id, "a")); err != nil {
		t.Fatal(err)
	}
	rest := nodes[:4]
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(rest, func(s *Snapshot) (bool, string) {
			_, ok := s.Instance("n4/a")
			return ok, "n4/a not seen"
		})
	})
	if err := leaver.Leave(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(rest, func(s *Snapshot) (bool, string) {
			n, _ := s.Node("n4")
			if n.Status != StatusLeft {
				return false, "n4 is " + string(n.Status)
			}
			if _, ok := s.Instance("n4/a"); ok {
				return false, "n4/a still listed"
			}
			return true, ""
		})
	})
	if err := leaver.PutInstance(testInstance(leaver.id, "b")); !isClosed(err) {
		t.Fatalf("PutInstance after Leave: %v, want ErrClosed", err)
	}
}

func TestFailedNodeInstancesBecomeUnavailable(t *testing.T) {
	nodes := startCluster(t, clusterSize, nil)
	victim := nodes[2]
	if err := victim.PutInstance(testInstance(victim.id, "a")); err != nil {
		t.Fatal(err)
	}
	rest := slices.Concat(nodes[:2], nodes[3:])
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(rest, func(s *Snapshot) (bool, string) {
			in, ok := s.Instance("n2/a")
			return ok && in.Status == InstanceReady, "n2/a not ready"
		})
	})
	victim.stop()
	waitFor(t, 15*time.Second, func() (bool, string) {
		return everywhere(rest, func(s *Snapshot) (bool, string) {
			n, _ := s.Node("n2")
			in, ok := s.Instance("n2/a")
			if n.Status != StatusFailed || !ok || in.Status != InstanceUnavailable {
				return false, fmt.Sprintf("n2 %s, n2/a listed %v as %s", n.Status, ok, in.Status)
			}
			return true, ""
		})
	})
}

// TestRejoinFromSnapshot crashes a node and restarts it from its serf snapshot, with no join address: it
// must find the cluster by itself, make its new instance state win over the copies its peers kept from
// its previous run, and have its stale instance deleted after the grace period.
func TestRejoinFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	nodes := startCluster(t, clusterSize, func(i int, cfg *Config) {
		if i == 1 {
			cfg.SnapshotPath = filepath.Join(dir, "n1.snapshot")
		}
	})
	n1 := nodes[1]
	first := testInstance(n1.id, "a")
	for range 5 { // push its clock ahead so the peers' copies outrank the restarted node's first writes
		if err := n1.PutInstance(first); err != nil {
			t.Fatal(err)
		}
		first.Status = map[InstanceStatus]InstanceStatus{InstanceReady: InstanceLoading, InstanceLoading: InstanceReady}[first.Status]
	}
	if err := n1.PutInstance(testInstance(n1.id, "stale")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			return len(s.Instances) == 2, fmt.Sprintf("%d instances", len(s.Instances))
		})
	})
	cfg := n1.cfg
	cfg.BindAddr = n1.GossipAddr() // same address, so peers' probes reach the new process
	cfg.JoinAddrs = nil
	n1.stop()

	restarted := startNode(t, cfg)
	nodes[1] = restarted
	want := testInstance(n1.id, "a")
	want.Status = InstanceDraining
	if err := restarted.PutInstance(want); err != nil {
		t.Fatal(err)
	}
	waitAllAlive(t, nodes, 20*time.Second)
	waitFor(t, 15*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			in, ok := s.Instance("n1/a")
			if !ok || in.Status != InstanceDraining {
				return false, fmt.Sprintf("n1/a listed %v as %s", ok, in.Status)
			}
			if _, ok := s.Instance("n1/stale"); ok {
				return false, "n1/stale still listed"
			}
			return true, ""
		})
	})
}

// TestOwnerReassertsOverStaleEntries plants, on another node, a tombstone for an instance under its
// owner's name and with a revision above the owner's write: what a restarted node meets when peers hold
// entries from its previous run. Anti-entropy carries it to the owner, which must write its instance again
// above it, so that every node ends with the instance live. (TestRejoinFromSnapshot covers the restart
// itself; whether the restarted node writes before or after it first pulls is a race, so the mechanism is
// checked here.)
func TestOwnerReassertsOverStaleEntries(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	owner, other := nodes[0], nodes[2]
	in := testInstance(owner.id, "a")
	if err := owner.PutInstance(in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			_, ok := s.Instance(in.ID)
			return ok, "instance not replicated"
		})
	})
	planted, _ := other.Snapshot().Instance(in.ID)
	stale := lww.Rev{LTime: planted.Revision.LTime + 100, Origin: string(owner.id)}
	if err := other.do(func() error {
		other.applyRemote(decodedEntry{table: tableInstances, inst: lww.Entry[Instance]{
			Key: in.ID, Rev: stale, Deleted: true, TTL: time.Minute,
		}}, owner.id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Snapshot().Instance(in.ID); ok {
		t.Fatal("the planted tombstone did not take")
	}
	waitFor(t, 15*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			got, ok := s.Instance(in.ID)
			if !ok || got.Revision.LTime <= stale.LTime {
				return false, fmt.Sprintf("instance listed %v at revision %d, stale tombstone at %d", ok, got.Revision.LTime, stale.LTime)
			}
			return true, ""
		})
	})
	if owner.Stats().Reasserts == 0 {
		t.Fatal("the owner never reasserted")
	}
}

// TestConcurrentLinkWritesConverge has every node write the same link at once, many times, and checks that
// all replicas settle on one value and revision.
func TestConcurrentLinkWritesConverge(t *testing.T) {
	nodes := startCluster(t, clusterSize, nil)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			for round := range 20 {
				l := InstanceLink{
					LinkID:           "shared",
					PrefillInstances: []string{fmt.Sprintf("%s/p%d", n.id, round)},
					DecodeInstances:  []string{"d"},
				}
				if err := n.PutInstanceLink(l); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, 15*time.Second, func() (bool, string) {
		ref := nodes[0].Snapshot()
		want := describeLinks(ref)
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			if got := describeLinks(s); got != want || s.Digest != ref.Digest {
				return false, fmt.Sprintf("links %q, want %q", got, want)
			}
			return true, ""
		})
	})
	final, _ := nodes[0].Snapshot().Link("shared")
	if want := fmt.Sprintf("%s/p19", final.Revision.Origin); final.PrefillInstances[0] != want {
		t.Fatalf("winner %+v is not its writer's last write %s", final, want)
	}
}

// TestAntiEntropyWithoutUserEvents drops every user event (deltas and loads) and checks that the digest
// queries and state pulls alone bring all tables together, deletes included.
func TestAntiEntropyWithoutUserEvents(t *testing.T) {
	nodes := startCluster(t, clusterSize, func(i int, cfg *Config) {
		cfg.dropUserEvent = func(string) bool { return true }
	})
	for i, n := range nodes {
		if err := n.PutInstance(testInstance(n.id, "a")); err != nil {
			t.Fatal(err)
		}
		if err := n.PutInstanceLink(InstanceLink{LinkID: fmt.Sprintf("l%d", i), DecodeInstances: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[3].DeleteInstanceLink("l3"); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].SetLoad("n0/a", Load{InFlight: 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		ref := nodes[0].Snapshot().Digest
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			if len(s.Instances) != clusterSize || len(s.Links) != clusterSize-1 || s.Digest != ref {
				return false, fmt.Sprintf("%d instances, %d links, digest %s vs %s", len(s.Instances), len(s.Links), s.Digest, ref)
			}
			if _, ok := s.Link("l3"); ok {
				return false, "deleted link l3 still listed"
			}
			if in, _ := s.Instance("n0/a"); in.Load.InFlight != 7 {
				return false, fmt.Sprintf("n0/a load %+v", in.Load)
			}
			return true, ""
		})
	})
	// A second round long after the joins: no membership change left to trigger a pull, so only the
	// periodic digest comparison can carry it.
	time.Sleep(time.Second)
	before := nodes[4].Stats().Pulls
	if err := nodes[4].PutInstanceLink(InstanceLink{LinkID: "late", DecodeInstances: []string{"y"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			_, ok := s.Link("late")
			return ok, "link late missing"
		})
	})
	// The differing peers answered the writer's digest query, so it pulls from them too.
	waitFor(t, 10*time.Second, func() (bool, string) {
		return nodes[4].Stats().Pulls > before, "the writer made no pull: no peer answered its digest query"
	})
	var dropped, pulls uint64
	for _, n := range nodes {
		st := n.Stats()
		dropped += st.EventsDropped
		pulls += st.Pulls
		if st.DeltasReceived != 0 {
			t.Errorf("%s handled %d delta events with all of them dropped", n.id, st.DeltasReceived)
		}
	}
	if dropped == 0 || pulls == 0 {
		t.Fatalf("dropped %d events and made %d pulls; the test proves nothing", dropped, pulls)
	}
}

// TestOversizedLinkTravelsAsStub writes a link too big for one event: peers get a stub and pull.
func TestOversizedLinkTravelsAsStub(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	var ids []string
	for i := range MaxLinkMembers {
		ids = append(ids, fmt.Sprintf("instance-with-a-long-name-for-the-test-%03d", i))
	}
	if err := nodes[1].PutInstanceLink(InstanceLink{LinkID: "big", PrefillInstances: ids, DecodeInstances: ids[:1]}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			l, ok := s.Link("big")
			return ok && len(l.PrefillInstances) == MaxLinkMembers, "big link missing"
		})
	})
	if st := nodes[0].Stats(); st.StubsReceived == 0 {
		t.Fatalf("n0 received no stub: %+v", st)
	}
}

func TestLoadPropagates(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	if err := nodes[0].PutInstance(testInstance("n0", "a")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := nodes[0].SetLoad("n0/a", Load{InFlight: i, Queued: 2 * i}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		return everywhere(nodes, func(s *Snapshot) (bool, string) {
			in, _ := s.Instance("n0/a")
			return in.Load.InFlight == 4 && in.Load.Queued == 8 && !in.Load.UpdatedAt.IsZero(), fmt.Sprintf("load %+v", in.Load)
		})
	})
	if err := nodes[0].SetLoad("n0/a", Load{InFlight: -1}); err == nil {
		t.Fatal("negative load accepted")
	}
}

func TestWriteErrors(t *testing.T) {
	nodes := startCluster(t, 2, nil)
	n := nodes[0]
	if err := nodes[1].PutInstance(testInstance("n1", "mine")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		_, ok := n.Snapshot().Instance("n1/mine")
		return ok, "n1/mine not replicated"
	})
	tests := []struct {
		name string
		err  error
	}{
		{"foreign instance", n.PutInstance(testInstance("n1", "x"))},
		{"instance id taken", n.PutInstance(Instance{ID: "n1/mine", Model: "m", Engine: "e", Role: RoleDecode, Status: InstanceReady})},
		{"delete foreign instance", n.DeleteInstance("n1/mine")},
		{"delete missing instance", n.DeleteInstance("nope")},
		{"delete missing link", n.DeleteInstanceLink("nope")},
		{"invalid instance", n.PutInstance(Instance{ID: "bad id", Model: "m", Engine: "e", Role: RoleDecode, Status: InstanceReady})},
		{"invalid link", n.PutInstanceLink(InstanceLink{LinkID: "l"})},
		{"load id", n.SetLoad("", Load{})},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestSubscribeCoalesces(t *testing.T) {
	n := startCluster(t, 1, nil)[0]
	ctx, cancel := context.WithCancel(context.Background())
	ch := n.Subscribe(ctx)
	first := <-ch
	for i := range 50 {
		if err := n.PutInstanceLink(InstanceLink{LinkID: fmt.Sprintf("l%d", i), DecodeInstances: []string{"d"}}); err != nil {
			t.Fatal(err)
		}
	}
	latest := n.Snapshot()
	got := <-ch // nobody read during 50 writes: one snapshot waits, the newest
	if got.Version != latest.Version || got.Version <= first.Version || len(got.Links) != 50 {
		t.Fatalf("got version %d with %d links; latest is %d", got.Version, len(got.Links), latest.Version)
	}
	cancel()
	waitFor(t, 5*time.Second, func() (bool, string) {
		select {
		case _, ok := <-ch:
			return !ok, "channel still open after cancel"
		default:
			return false, "channel still open after cancel"
		}
	})
	// A subscription on a stopped cluster gets the last snapshot and a closed channel.
	n.stop()
	after := n.Subscribe(context.Background())
	if s, ok := <-after; !ok || s.Version != n.Snapshot().Version {
		t.Fatal("no final snapshot after shutdown")
	}
	if _, ok := <-after; ok {
		t.Fatal("channel open after shutdown")
	}
}

// TestSpeedPropagates: a measured speed reaches every node with the next load broadcast, and load updates
// without a speed, which are most of them, keep it.
func TestSpeedPropagates(t *testing.T) {
	nodes := startCluster(t, 2, func(_ int, cfg *Config) {
		cfg.SpeedInterval = 200 * time.Millisecond
		cfg.AntiEntropyInterval = time.Minute // only load events can carry it
	})
	waitAllAlive(t, nodes, 10*time.Second)
	if err := nodes[0].PutInstance(testInstance("n0", "a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) {
		_, ok := nodes[1].Snapshot().Instance("n0/a")
		return ok, "n0/a not on n1"
	})
	want := Speed{PrefillTPS: []float64{812.3, 640}, DecodeTPS: 31.25, QueueWait: 2 * time.Millisecond,
		KVBytesPerToken: 36864, KVStateBytes: 77266944, IngestBPS: 1.5e9, Samples: 4,
		Ingress: []LinkSpeed{{From: "n1", BytesPerSecond: 1.25e7, RTT: 300 * time.Microsecond, Samples: 2, PrefillTPS: []float64{437.5, 0, 212}}}}
	first := want
	first.DecodeTPS = 1 // replaced before it goes out, or soon after
	for _, sp := range []Speed{first, want} {
		if err := nodes[0].SetSpeed("n0/a", sp); err != nil {
			t.Fatal(err)
		}
	}
	hasSpeed := func(inFlight int) func() (bool, string) {
		return func() (bool, string) {
			return everywhere(nodes, func(s *Snapshot) (bool, string) {
				in, _ := s.Instance("n0/a")
				if in.Load.Speed == nil || !reflect.DeepEqual(*in.Load.Speed, want) || in.Load.InFlight != inFlight {
					return false, fmt.Sprintf("load %+v speed %+v", in.Load, in.Load.Speed)
				}
				return true, ""
			})
		}
	}
	waitFor(t, 10*time.Second, hasSpeed(0))
	if err := nodes[0].SetLoad("n0/a", Load{InFlight: 3}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, hasSpeed(3))

	for name, bad := range map[string]Speed{
		"negative rate":  {DecodeTPS: -1},
		"NaN":            {PrefillTPS: []float64{math.NaN()}},
		"too many bands": {PrefillTPS: make([]float64, MaxSpeedBands+1)},
		"bad node id":    {Ingress: []LinkSpeed{{From: "a b", BytesPerSecond: 1}}},
		"negative wait":  {QueueWait: -time.Second},
	} {
		if err := nodes[0].SetSpeed("n0/a", bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
