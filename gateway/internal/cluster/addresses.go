package cluster

import (
	"log/slog"
	"net"
	"net/netip"
	"strconv"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// AdvertisedAPI is how peers reach this API: the listener's address, or for one bound to every interface,
// the best address of this machine (Thunderbolt, Ethernet, Wi-Fi; not loopback).
func AdvertisedAPI(a *net.TCPAddr, log *slog.Logger) string {
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	addrs, err := netif.Detect()
	if err == nil {
		netif.Sort(addrs)
		for _, ad := range addrs {
			if ad.Kind != netif.KindLoopback && ad.IP.Is4() {
				return net.JoinHostPort(ad.IP.String(), strconv.Itoa(a.Port))
			}
		}
	}
	log.Warn("found no address for peers to reach this API; set --api-advertise", "error", err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
}

// ListenAddresses is what this node advertises for paths: for an API bound to one address, only that one
// (peers could not reach it elsewhere), with its interface's kind and speed; nil otherwise, to detect them all.
func ListenAddresses(listenHost string) []netif.Address {
	ip, err := netip.ParseAddr(listenHost)
	if listenHost == "localhost" {
		ip, err = netip.MustParseAddr("127.0.0.1"), nil
	}
	if err != nil || ip.IsUnspecified() {
		return nil
	}
	out := netif.Address{IP: ip, Kind: netif.KindOther}
	if ip.IsLoopback() {
		out.Kind, out.PrefixLen = netif.KindLoopback, 8
	}
	if addrs, err := netif.Detect(); err == nil {
		for _, a := range addrs {
			if p, ok := a.Prefix(); ok && p.Contains(ip) {
				out.PrefixLen, out.Interface, out.Kind, out.SpeedMbps = a.PrefixLen, a.Interface, a.Kind, a.SpeedMbps
				if a.IP == ip {
					break
				}
			}
		}
	}
	return []netif.Address{out}
}
