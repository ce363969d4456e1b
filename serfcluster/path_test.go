package serfcluster

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/duet-ai/duet/serfcluster/netif"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addr(ip string, bits int, kind netif.Kind, speed int) netif.Address {
	return netif.Address{IP: mustAddr(ip), PrefixLen: bits, Interface: "if", Kind: kind, SpeedMbps: speed}
}

func TestChoosePath(t *testing.T) {
	t.Parallel()
	tb := netif.KindThunderbolt
	eth := netif.KindEthernet
	wifi := netif.KindWiFi
	tests := []struct {
		name       string
		from, to   []netif.Address
		gossip     string
		wantIP     string
		wantDirect bool
		wantKind   netif.Kind
		wantSpeed  int
	}{
		{
			name:   "thunderbolt beats 10GbE when both ends have it",
			from:   []netif.Address{addr("169.254.1.1", 16, tb, 0), addr("10.0.0.1", 24, eth, 10000)},
			to:     []netif.Address{addr("10.0.0.2", 24, eth, 10000), addr("169.254.1.2", 16, tb, 0)},
			wantIP: "169.254.1.2", wantDirect: true, wantKind: tb,
		},
		{
			name:   "peer's thunderbolt is useless without a shared subnet",
			from:   []netif.Address{addr("10.0.0.1", 24, eth, 10000)},
			to:     []netif.Address{addr("169.254.1.2", 16, tb, 0), addr("10.0.0.2", 24, eth, 1000)},
			wantIP: "10.0.0.2", wantDirect: true, wantKind: eth, wantSpeed: 1000,
		},
		{
			name:   "bottleneck is the weaker end",
			from:   []netif.Address{addr("192.168.1.5", 24, wifi, 0)},
			to:     []netif.Address{addr("192.168.1.6", 24, eth, 1000)},
			wantIP: "192.168.1.6", wantDirect: true, wantKind: wifi, wantSpeed: 1000,
		},
		{
			name:   "faster of two ethernet subnets",
			from:   []netif.Address{addr("10.0.0.1", 24, eth, 1000), addr("10.9.0.1", 24, eth, 25000)},
			to:     []netif.Address{addr("10.0.0.2", 24, eth, 1000), addr("10.9.0.2", 24, eth, 25000)},
			wantIP: "10.9.0.2", wantDirect: true, wantKind: eth, wantSpeed: 25000,
		},
		{
			name:   "no shared subnet: best kind, routed",
			from:   []netif.Address{addr("10.0.0.1", 24, eth, 0)},
			to:     []netif.Address{addr("172.16.0.2", 24, wifi, 0), addr("172.17.0.2", 24, eth, 0)},
			wantIP: "172.17.0.2", wantDirect: false, wantKind: eth,
		},
		{
			name:   "ipv4 before ipv6 at equal rank",
			from:   []netif.Address{addr("10.0.0.1", 24, eth, 0), addr("fd00::1", 64, eth, 0)},
			to:     []netif.Address{addr("fd00::2", 64, eth, 0), addr("10.0.0.2", 24, eth, 0)},
			wantIP: "10.0.0.2", wantDirect: true, wantKind: eth,
		},
		{
			name:   "loopback only when nothing else",
			from:   []netif.Address{addr("127.0.0.1", 8, netif.KindLoopback, 0)},
			to:     []netif.Address{addr("127.0.0.1", 8, netif.KindLoopback, 0), addr("10.0.0.2", 24, eth, 0)},
			wantIP: "10.0.0.2", wantDirect: false, wantKind: eth,
		},
		{
			name:   "gossip address when none advertised",
			gossip: "10.4.4.4:7946",
			wantIP: "10.4.4.4", wantDirect: false, wantKind: netif.KindOther,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := Node{ID: "a", Addresses: tc.from}
			b := Node{ID: "b", Addresses: tc.to}
			if tc.gossip != "" {
				b.Gossip = netip.MustParseAddrPort(tc.gossip)
			}
			p, ok := choosePath(a, b, 0, false)
			if !ok {
				t.Fatal("no path")
			}
			if p.Address.IP.String() != tc.wantIP || p.Direct != tc.wantDirect || p.Kind != tc.wantKind || p.SpeedMbps != tc.wantSpeed {
				t.Fatalf("path = %s direct=%v kind=%s speed=%d; want %s direct=%v kind=%s speed=%d",
					p.Address.IP, p.Direct, p.Kind, p.SpeedMbps, tc.wantIP, tc.wantDirect, tc.wantKind, tc.wantSpeed)
			}
			if p.Quality <= 0 || p.Quality > 1 {
				t.Fatalf("quality %v outside (0, 1]", p.Quality)
			}
		})
	}
	if _, ok := choosePath(Node{ID: "a"}, Node{ID: "b"}, 0, false); ok {
		t.Error("a path to a node with no address at all")
	}
	self, _ := choosePath(Node{ID: "a"}, Node{ID: "a"}, 0, false)
	if self.Kind != netif.KindLoopback || self.Quality != 1 || !self.RTTKnown {
		t.Errorf("path to self = %+v", self)
	}
}

func TestQuality(t *testing.T) {
	t.Parallel()
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	tests := []struct {
		name   string
		mbps   int
		direct bool
		rtt    time.Duration
		rttOK  bool
		want   float64
	}{
		{"100G direct, zero rtt", 100000, true, 0, true, 1},
		{"10G direct, 1ms", 10000, true, time.Millisecond, true, 0.7*0.8 + 0.3*0.5},
		{"1G direct, unknown rtt", 1000, true, 0, false, 0.7*0.6 + 0.3*0.5},
		{"1G routed, unknown rtt", 1000, false, 0, false, 0.8 * (0.7*0.6 + 0.3*0.5)},
	}
	for _, tc := range tests {
		if got := qualityOf(tc.mbps, tc.direct, tc.rtt, tc.rttOK); !near(got, tc.want) {
			t.Errorf("%s: quality %v, want %v", tc.name, got, tc.want)
		}
	}
	if qualityOf(40000, true, 0, false) <= qualityOf(1000, true, 0, false) {
		t.Error("Thunderbolt does not score above 1GbE")
	}
}
