package serfcluster

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// Path is the way from one node to another: the address to dial and what is known about the link.
type Path struct {
	From NodeID `json:"from"`
	To   NodeID `json:"to"`
	// Address is the address of To that traffic from From should use.
	Address netif.Address `json:"address"`
	// Direct is true when From has an address on the same subnet as Address; Local is that address.
	Direct bool          `json:"direct"`
	Local  netif.Address `json:"local"`
	// Kind is the weaker of the two ends' link kinds on a direct path, Address's kind otherwise.
	Kind netif.Kind `json:"kind"`
	// SpeedMbps is the slower known end's speed; 0 when neither end reports one.
	SpeedMbps int `json:"speed_mbps"`
	// RTT is the Vivaldi estimate, valid when RTTKnown.
	RTT      time.Duration `json:"rtt"`
	RTTKnown bool          `json:"rtt_known"`
	// Quality scores the path in [0, 1] for routers; see qualityOf.
	Quality float64 `json:"quality"`
}

// choosePath picks the address of b that a should use. A candidate is better when it is on a subnet a also
// has an address on (direct), then by link kind (Thunderbolt, Ethernet, Wi-Fi, other), then by speed,
// then IPv4 over IPv6, then by b's own order. This is exo's interface-priority choice
// (find_ip_prioritised) plus the subnet match that tells which of the peer's networks is reachable at all.
func choosePath(a, b Node, rtt time.Duration, rttOK bool) (Path, bool) {
	p := Path{From: a.ID, To: b.ID, RTT: rtt, RTTKnown: rttOK}
	if a.ID == b.ID {
		p.Address = netif.Address{IP: netip.AddrFrom4([4]byte{127, 0, 0, 1}), PrefixLen: 8, Kind: netif.KindLoopback}
		for _, ad := range b.Addresses {
			if ad.Kind == netif.KindLoopback {
				p.Address = ad
				break
			}
		}
		p.Direct, p.Local, p.Kind = true, p.Address, netif.KindLoopback
		p.RTT, p.RTTKnown, p.Quality = 0, true, 1
		return p, true
	}
	cands := candidates(b)
	if len(cands) == 0 {
		return Path{}, false
	}
	type option struct {
		order  int
		remote netif.Address
		local  netif.Address
		direct bool
		kind   netif.Kind
		speed  int
	}
	opts := make([]option, 0, len(cands))
	for i, r := range cands {
		o := option{order: i, remote: r, kind: r.Kind, speed: r.SpeedMbps}
		best := -1
		for j, l := range a.Addresses {
			if !sameSubnet(l, r) {
				continue
			}
			if best < 0 || l.Kind.Rank() > a.Addresses[best].Kind.Rank() ||
				l.Kind.Rank() == a.Addresses[best].Kind.Rank() && l.EffectiveMbps() > a.Addresses[best].EffectiveMbps() {
				best = j
			}
		}
		if best >= 0 {
			l := a.Addresses[best]
			o.direct, o.local = true, l
			if l.Kind.Rank() < r.Kind.Rank() {
				o.kind = l.Kind
			}
			o.speed = minKnown(l.SpeedMbps, r.SpeedMbps)
		}
		opts = append(opts, o)
	}
	effective := func(o option) int {
		if o.speed > 0 {
			return o.speed
		}
		return o.kind.NominalMbps()
	}
	slices.SortStableFunc(opts, func(x, y option) int {
		if x.direct != y.direct {
			if x.direct {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(y.kind.Rank(), x.kind.Rank()); c != 0 {
			return c
		}
		if c := cmp.Compare(effective(y), effective(x)); c != 0 {
			return c
		}
		if x.remote.IP.Is4() != y.remote.IP.Is4() {
			if x.remote.IP.Is4() {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.order, y.order)
	})
	o := opts[0]
	p.Address, p.Local, p.Direct, p.Kind, p.SpeedMbps = o.remote, o.local, o.direct, o.kind, o.speed
	p.Quality = qualityOf(effective(o), o.direct, rtt, rttOK)
	return p, true
}

// candidates are the addresses of b worth dialling from another node: its non-loopback addresses, its
// loopback ones only when it has nothing else (a cluster on one machine), and its gossip address when it
// advertises none.
func candidates(b Node) []netif.Address {
	var out, loop []netif.Address
	for _, ad := range b.Addresses {
		if ad.Kind == netif.KindLoopback || ad.IP.IsLoopback() {
			loop = append(loop, ad)
		} else {
			out = append(out, ad)
		}
	}
	if len(out) == 0 {
		out = loop
	}
	if len(out) == 0 && b.Gossip.Addr().IsValid() {
		kind := netif.KindOther
		if b.Gossip.Addr().IsLoopback() {
			kind = netif.KindLoopback
		}
		out = []netif.Address{{IP: b.Gossip.Addr(), Kind: kind}}
	}
	return out
}

func sameSubnet(l, r netif.Address) bool {
	if l.IP.Is4() != r.IP.Is4() {
		return false
	}
	if p, ok := l.Prefix(); ok && p.Contains(r.IP) {
		return true
	}
	if p, ok := r.Prefix(); ok && p.Contains(l.IP) {
		return true
	}
	return false
}

func minKnown(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// qualityOf scores a path in [0, 1]: 0.7 for bandwidth, log-scaled so that 100 Gb/s is 1, 10 Gb/s 0.8,
// 1 Gb/s 0.6 and 100 Mb/s 0.4; 0.3 for latency, 1/(1+RTT in ms), or 0.5 when no estimate exists yet. A path
// that is not on a shared subnet (routed, or reachability unknown) keeps 80% of its score.
func qualityOf(mbps int, direct bool, rtt time.Duration, rttOK bool) float64 {
	bw := math.Min(1, math.Max(0, math.Log10(float64(max(mbps, 1)))/5))
	lat := 0.5
	if rttOK {
		lat = 1 / (1 + float64(rtt)/float64(time.Millisecond))
	}
	q := 0.7*bw + 0.3*lat
	if !direct {
		q *= 0.8
	}
	return q
}
