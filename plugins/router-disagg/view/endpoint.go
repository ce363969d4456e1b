package view

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// splitKV splits a KV endpoint into host and port, and checks that the port is in 1..65535.
func splitKV(kv string) (host string, port string, err error) {
	host, port, err = net.SplitHostPort(kv)
	if err != nil {
		return "", "", fmt.Errorf("KV endpoint %q: %w", kv, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", "", fmt.Errorf("KV endpoint %q: port %q is not in 1..65535", kv, port)
	}
	return host, port, nil
}

// ResolveKV returns the address at which a decode instance dials the KV endpoint kv of a prefill instance.
// pathAddress is the address of the prefill node that the decode node should use (router.Path.Address from
// the decode node to the prefill node, a bare host or host:port; empty when unknown), and sameNode says both
// instances share a node.
//
// Across nodes, a known path address replaces kv's host. On the same node kv stands, except that an
// unspecified host (0.0.0.0, ::, empty) becomes loopback. An unspecified host with no path address to replace
// it cannot be dialled from another node and is an error.
func ResolveKV(kv string, sameNode bool, pathAddress string) (string, error) {
	host, port, err := splitKV(kv)
	if err != nil {
		return "", err
	}
	if !sameNode && pathAddress != "" {
		h := pathAddress
		if lh, _, err := net.SplitHostPort(pathAddress); err == nil {
			h = lh
		} else if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1]
		}
		if h != "" {
			return net.JoinHostPort(h, port), nil
		}
	}
	if !unspecifiedHost(host) {
		return kv, nil
	}
	if sameNode {
		if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
			return net.JoinHostPort("::1", port), nil
		}
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	return "", fmt.Errorf("KV endpoint %q: unspecified host and no path address for its node", kv)
}

// unspecifiedHost reports whether host is empty or an unspecified address (0.0.0.0, ::): a server bound to all
// interfaces, which says nothing about where to reach it.
func unspecifiedHost(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}
