package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/serfcluster"
)

// Link probes: a router that decides by estimated time (PD auto) needs the KV goodput of the link from each
// prefill node, which real transfers measure only once one happened; until then it falls back on the path's
// nominal speed, and the first long prompt pays for a link slower than it says. So each gateway, in the
// background and never on a request's path, probes the links into its instances that nothing measured yet:
// it fetches linkProbeBytes from the peer's gateway over the same hop requests take (a timed download, no
// prefill), and a few empty requests on the warm connection for the round trip. The figures seed the link
// in cluster.Speeds (published like any), until the first real transfer replaces them. A pair is probed at
// most once per Config.LinkProbeEvery, one probe at a time, and a gateway serves one probe at a time.

// DefaultLinkProbeEvery is how often a link that only probes measured is probed again.
const DefaultLinkProbeEvery = 3 * time.Minute

const (
	// linkProbeBytes is a probe's download: large enough to leave TCP's slow start on a LAN and to count as
	// a KV sample (cluster's minKVSample), small enough to cost nothing (0.34 s at 100 Mbit/s).
	linkProbeBytes = 4 << 20
	// linkProbeTimeout bounds one probe; on a link so slow that the download outlasts it, what arrived counts.
	linkProbeTimeout = 20 * time.Second
	// linkProbeTick is how often the prober looks for a link to probe (one per tick).
	linkProbeTick = 2 * time.Second
	// linkProbePings is how many empty requests measure the round trip (the least counts).
	linkProbePings = 3
	// linkProbeMinBytes is the least a probe must have read after its first bytes to give a goodput.
	linkProbeMinBytes = 64 << 10
	// linkProbeWriteTimeout bounds serving one probe, which holds the node's only probe slot: a caller that
	// does not read cannot keep it from everyone for longer (the server's --write-timeout is a minute). A link
	// too slow for the whole download in it still gets a figure from what arrived.
	linkProbeWriteTimeout = 5 * time.Second
)

// Paths of the probe on the admin API (behind the hop's credential or an API key).
const (
	linkProbePath = "/admin/v1/link-probe"
	linkPingPath  = "/admin/v1/link-probe/ping"
)

// linkProber holds the prober's state: when each peer was last probed, and whether a probe is being served.
type linkProber struct {
	mu      sync.Mutex
	last    map[serfcluster.NodeID]time.Time
	serving atomic.Bool
	seq     atomic.Uint64
	start   sync.Once
}

// linkMeasure is what one probe measured.
type linkMeasure struct {
	Goodput float64 // bytes per second once the first bytes arrived
	RTT     time.Duration
	Bytes   int64
}

// probeLinks runs until the server shuts down, probing one due link per tick.
func (s *Server) probeLinks() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopLoad
		cancel()
	}()
	t := time.NewTicker(linkProbeTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.probeOnce(ctx, time.Now())
	}
}

// probeOnce probes the first due link, if any, and records it for every local instance that lacked it.
func (s *Server) probeOnce(ctx context.Context, now time.Time) {
	peer, into := s.probeDue(now)
	if peer == "" {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, linkProbeTimeout)
	m, err := s.probeLink(pctx, peer)
	cancel()
	if err != nil {
		s.log.Info("link probe failed; the link stays unmeasured until a transfer or the next probe", "peer", peer, "error", err)
		return
	}
	speeds := s.snaps.agent.Speeds()
	for _, id := range into {
		speeds.ObserveProbe(id, peer, m.Goodput, m.RTT)
	}
	s.log.Info("link probed", "peer", peer, "bytes", m.Bytes, "goodput_mbit_s", round1(m.Goodput*8/1e6),
		"rtt", m.RTT.Round(10*time.Microsecond), "instances", len(into))
}

// probeDue picks a peer node whose link into a local instance is unmeasured (no real transfer, no recent
// probe) and that serves KV for one of that instance's model, when it was not probed within LinkProbeEvery;
// it notes the attempt. into are the local instances the probe measures for.
func (s *Server) probeDue(now time.Time) (peer serfcluster.NodeID, into []string) {
	snap := s.snaps.agent.RouterSnapshot()
	speeds := s.snaps.agent.Speeds()
	every := s.cfg.LinkProbeEvery
	s.probe.mu.Lock()
	defer s.probe.mu.Unlock()
	if s.probe.last == nil {
		s.probe.last = map[serfcluster.NodeID]time.Time{}
	}
	for _, p := range snap.Instances {
		if p.Node == snap.Self || p.Node == "" || p.KVEndpoint == "" {
			continue
		}
		node := serfcluster.NodeID(p.Node)
		if at, ok := s.probe.last[node]; (peer != "" && node != peer) || (ok && now.Sub(at) < every) {
			continue
		}
		for _, d := range snap.Instances {
			if d.Node == snap.Self && d.Model == p.Model && speeds.NeedsProbe(d.ID, node, every) && !contains(into, d.ID) {
				peer, into = node, append(into, d.ID)
			}
		}
	}
	if peer != "" {
		s.probe.last[peer] = now
		if len(s.probe.last) > 4*serfcluster.MaxSpeedIngress {
			for n, at := range s.probe.last {
				if now.Sub(at) >= every {
					delete(s.probe.last, n)
				}
			}
		}
	}
	return peer, into
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// probeLink downloads linkProbeBytes from a peer's gateway over the hop and times it, then pings it on the
// warm connection for the round trip.
func (s *Server) probeLink(ctx context.Context, peer serfcluster.NodeID) (linkMeasure, error) {
	var m linkMeasure
	if s.fwd == nil {
		return m, errors.New("no hop client")
	}
	hostPort, tls, ok := cluster.APIEndpoint(s.snaps.agent.Snapshot(), s.reg.Node(), string(peer))
	if !ok {
		return m, fmt.Errorf("node %s advertises no API address", peer)
	}
	target := forward.Target{HostPort: hostPort, TLS: tls}
	send := func(path string) (*http.Response, error) {
		id := "link-probe-" + s.reg.Node() + "-" + strconv.FormatUint(s.probe.seq.Add(1), 10)
		resp, err := s.fwd.Send(ctx, target, forward.Request{Method: fiber.MethodGet, Path: path, RequestID: id,
			Route: forward.Route{EntryNode: s.reg.Node(), DecodeNode: string(peer)}})
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("%s answered %d", path, resp.StatusCode)
		}
		return resp, nil
	}
	resp, err := send(linkProbePath)
	if err != nil {
		return m, err
	}
	m.Goodput, m.Bytes, err = timeBody(resp.Body, linkProbeBytes)
	resp.Body.Close()
	if err != nil {
		return m, err
	}
	for range linkProbePings {
		start := time.Now()
		resp, err := send(linkPingPath)
		if err != nil {
			break // the goodput stands; the cluster's own RTT estimate fills in
		}
		d := time.Since(start)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if m.RTT == 0 || d < m.RTT {
			m.RTT = d
		}
	}
	return m, nil
}

// timeBody reads up to limit bytes and returns the goodput once the first bytes arrived (the bytes after the
// first read over the time from it to the last), as KV goodput is measured. A read that ends early (the
// probe's deadline on a slow link) still counts if enough arrived.
func timeBody(r io.Reader, limit int64) (goodput float64, n int64, err error) {
	buf := make([]byte, 64<<10)
	var first time.Time
	var firstN int64
	last := time.Now()
	for n < limit {
		k, rerr := r.Read(buf[:min(int64(len(buf)), limit-n)])
		if k > 0 {
			now := time.Now()
			if first.IsZero() {
				first, firstN = now, int64(k)
			}
			n += int64(k)
			last = now
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if n-firstN >= linkProbeMinBytes {
				break // a deadline on a slow link: what arrived measures it
			}
			return 0, n, rerr
		}
	}
	d := last.Sub(first)
	if n-firstN < linkProbeMinBytes || d <= 0 {
		return 0, n, fmt.Errorf("the probe read %d bytes, too few to time", n)
	}
	return float64(n-firstN) / d.Seconds(), n, nil
}

// linkProbe serves a probe: linkProbeBytes of zeros, streamed, one probe at a time (503 while one is served),
// within linkProbeWriteTimeout.
func (s *Server) linkProbe(c *fiber.Ctx) error {
	if !s.probe.serving.CompareAndSwap(false, true) {
		return openai.Unavailable("another link probe is being served; retry later")
	}
	if err := c.Context().SetWriteDeadline(time.Now().Add(linkProbeWriteTimeout)); err != nil {
		s.probe.serving.Store(false)
		return openai.Unavailable("the link probe cannot be served on this connection")
	}
	c.Set(fiber.HeaderContentType, "application/octet-stream")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Context().SetBodyStream(&probeBody{left: linkProbeBytes, done: func() { s.probe.serving.Store(false) }}, linkProbeBytes)
	return nil
}

// linkPing answers a probe's round-trip request with nothing.
func (s *Server) linkPing(c *fiber.Ctx) error {
	return c.SendStatus(fiber.StatusOK)
}

// probeBody is a probe's zeros; fasthttp closes it once written (or when the connection failed).
type probeBody struct {
	left int64
	once sync.Once
	done func()
}

func (b *probeBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	clear(p[:n])
	b.left -= int64(n)
	return n, nil
}

func (b *probeBody) Close() error {
	b.once.Do(b.done)
	return nil
}
