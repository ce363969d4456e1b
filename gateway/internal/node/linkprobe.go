package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
)

// Link probes: a router that decides by estimated time (PD auto) needs the KV goodput of the link from each
// prefill node, which real transfers measure only once one happened; until then it falls back on the path's
// nominal speed, and the first long prompt pays for a link slower than it says. So each gateway, in the
// background and never on a request's path, probes the links into its instances that nothing measured yet:
// it fetches LinkProbeBytes from the peer's gateway over the same hop requests take (a timed download, no
// prefill), and a few empty requests on the warm connection for the round trip. The figures seed the link
// in cluster.Speeds (published like any), until the first real transfer replaces them. A pair is probed at
// most once per Config.LinkProbeEvery, one probe at a time, and a gateway serves one probe at a time (the
// server's linkprobe.go).

// DefaultLinkProbeEvery is how often a link that only probes measured is probed again.
const DefaultLinkProbeEvery = 3 * time.Minute

const (
	// LinkProbeBytes is a probe's download: large enough to leave TCP's slow start on a LAN and to count as
	// a KV sample (cluster's minKVSample), small enough to cost nothing (0.34 s at 100 Mbit/s).
	LinkProbeBytes = 4 << 20
	// linkProbeTimeout bounds one probe; on a link so slow that the download outlasts it, what arrived counts.
	linkProbeTimeout = 20 * time.Second
	// linkProbeTick is how often the prober looks for a link to probe (one per tick).
	linkProbeTick = 2 * time.Second
	// linkProbePings is how many empty requests measure the round trip (the least counts).
	linkProbePings = 3
	// linkProbeMinBytes is the least a probe must have read after its first bytes to give a goodput.
	linkProbeMinBytes = 64 << 10
)

// Paths of the probe on the admin API (behind the hop's credential or an API key), served by the HTTP server.
const (
	LinkProbePath = "/admin/v1/link-probe"
	LinkPingPath  = "/admin/v1/link-probe/ping"
)

// prober probes the links into this node's instances; it remembers when each peer was last probed.
type prober struct {
	agent *cluster.Agent
	reg   *Registry
	fwd   *forward.Client
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	last map[cluster.NodeID]time.Time
	seq  atomic.Uint64
}

// linkMeasure is what one probe measured.
type linkMeasure struct {
	Goodput float64 // bytes per second once the first bytes arrived
	RTT     time.Duration
	Bytes   int64
}

// run probes one due link per tick until ctx ends.
func (s *prober) run(ctx context.Context) {
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
func (s *prober) probeOnce(ctx context.Context, now time.Time) {
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
	speeds := s.agent.Speeds()
	for _, id := range into {
		speeds.ObserveProbe(id, peer, m.Goodput, m.RTT)
	}
	s.log.Info("link probed", "peer", peer, "bytes", m.Bytes, "goodput_mbit_s", round1(m.Goodput*8/1e6),
		"rtt", m.RTT.Round(10*time.Microsecond), "instances", len(into))
}

// probeDue picks a peer node whose link into a local instance is unmeasured (no real transfer, no recent
// probe) and that serves KV for one of that instance's model, when it was not probed within LinkProbeEvery;
// it notes the attempt. into are the local instances the probe measures for.
func (s *prober) probeDue(now time.Time) (peer cluster.NodeID, into []string) {
	snap := s.agent.RouterSnapshot()
	speeds := s.agent.Speeds()
	every := s.every
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[cluster.NodeID]time.Time{}
	}
	for _, p := range snap.Instances {
		if p.Node == snap.Self || p.Node == "" || p.KVEndpoint == "" {
			continue
		}
		node := cluster.NodeID(p.Node)
		if at, ok := s.last[node]; (peer != "" && node != peer) || (ok && now.Sub(at) < every) {
			continue
		}
		for _, d := range snap.Instances {
			if d.Node == snap.Self && d.Model == p.Model && speeds.NeedsProbe(d.ID, node, every) && !contains(into, d.ID) {
				peer, into = node, append(into, d.ID)
			}
		}
	}
	if peer != "" {
		s.last[peer] = now
		if len(s.last) > 4*cluster.MaxSpeedIngress {
			for n, at := range s.last {
				if now.Sub(at) >= every {
					delete(s.last, n)
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

// probeLink downloads LinkProbeBytes from a peer's gateway over the hop and times it, then pings it on the
// warm connection for the round trip.
func (s *prober) probeLink(ctx context.Context, peer cluster.NodeID) (linkMeasure, error) {
	var m linkMeasure
	if s.fwd == nil {
		return m, errors.New("no hop client")
	}
	hostPort, tls, ok := cluster.APIEndpoint(s.agent.Snapshot(), s.reg.Node(), string(peer))
	if !ok {
		return m, fmt.Errorf("node %s advertises no API address", peer)
	}
	target := forward.Target{HostPort: hostPort, TLS: tls}
	send := func(path string) (*http.Response, error) {
		id := "link-probe-" + s.reg.Node() + "-" + strconv.FormatUint(s.seq.Add(1), 10)
		resp, err := s.fwd.Send(ctx, target, forward.Request{Method: http.MethodGet, Path: path, RequestID: id,
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
	resp, err := send(LinkProbePath)
	if err != nil {
		return m, err
	}
	m.Goodput, m.Bytes, err = TimeBody(resp.Body, LinkProbeBytes)
	resp.Body.Close()
	if err != nil {
		return m, err
	}
	for range linkProbePings {
		start := time.Now()
		resp, err := send(LinkPingPath)
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

// TimeBody reads up to limit bytes and returns the goodput once the first bytes arrived (the bytes after the
// first read over the time from it to the last), as KV goodput is measured. A read that ends early (the
// probe's deadline on a slow link) still counts if enough arrived.
func TimeBody(r io.Reader, limit int64) (goodput float64, n int64, err error) {
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
