package netif

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Kind is the kind of link an address sits on.
type Kind string

// The kinds of link, best first for bulk transfers.
const (
	KindThunderbolt Kind = "thunderbolt"
	KindEthernet    Kind = "ethernet"
	KindWiFi        Kind = "wifi"
	KindOther       Kind = "other"
	KindLoopback    Kind = "loopback"
)

// ParseKind parses one of the Kind constants.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if k.Rank() < 0 {
		return "", fmt.Errorf("netif: unknown link kind %q", s)
	}
	return k, nil
}

// Rank orders kinds by how well they carry KV traffic between machines: higher is better, -1 for an unknown
// kind. Loopback ranks lowest because it never reaches another machine.
func (k Kind) Rank() int {
	switch k {
	case KindThunderbolt:
		return 4
	case KindEthernet:
		return 3
	case KindWiFi:
		return 2
	case KindOther:
		return 1
	case KindLoopback:
		return 0
	}
	return -1
}

// NominalMbps is the speed assumed for a link of this kind when the OS does not report one: Thunderbolt
// networking runs near 40 Gb/s raw, Ethernet is taken as 1 GbE, Wi-Fi as a good 802.11ac link.
func (k Kind) NominalMbps() int {
	switch k {
	case KindThunderbolt:
		return 40000
	case KindEthernet:
		return 1000
	case KindWiFi:
		return 400
	case KindLoopback:
		return 100000
	}
	return 100
}

// MaxInterfaceName bounds interface names (Linux allows 15 bytes, macOS 15).
const MaxInterfaceName = 15

// MaxSpeedMbps bounds a reported speed (1.6 Tb/s).
const MaxSpeedMbps = 1_600_000

// Address is one IP address of a node and the link it sits on.
type Address struct {
	IP netip.Addr `json:"ip"`
	// PrefixLen is the subnet prefix length; 0 when unknown.
	PrefixLen int    `json:"prefix_len,omitempty"`
	Interface string `json:"interface,omitempty"`
	Kind      Kind   `json:"kind"`
	// SpeedMbps is the link speed the OS reports; 0 when unknown.
	SpeedMbps int `json:"speed_mbps,omitempty"`
}

// Prefix returns the subnet the address is in, if its prefix length is known.
func (a Address) Prefix() (netip.Prefix, bool) {
	if a.PrefixLen <= 0 {
		return netip.Prefix{}, false
	}
	p, err := a.IP.Prefix(a.PrefixLen)
	return p, err == nil
}

// EffectiveMbps is the reported speed, or the kind's nominal speed when none is reported.
func (a Address) EffectiveMbps() int {
	if a.SpeedMbps > 0 {
		return a.SpeedMbps
	}
	return a.Kind.NominalMbps()
}

// Validate checks the address for advertising to peers.
func (a Address) Validate() error {
	switch {
	case !a.IP.IsValid():
		return fmt.Errorf("netif: address without an IP")
	case a.IP.Zone() != "":
		return fmt.Errorf("netif: address %s has a zone; zoned addresses cannot be advertised", a.IP)
	case a.PrefixLen < 0 || a.PrefixLen > a.IP.BitLen():
		return fmt.Errorf("netif: address %s: prefix length %d out of range", a.IP, a.PrefixLen)
	case a.Kind.Rank() < 0:
		return fmt.Errorf("netif: address %s: unknown link kind %q", a.IP, a.Kind)
	case a.SpeedMbps < 0 || a.SpeedMbps > MaxSpeedMbps:
		return fmt.Errorf("netif: address %s: speed %d Mbps out of range", a.IP, a.SpeedMbps)
	case len(a.Interface) > MaxInterfaceName:
		return fmt.Errorf("netif: address %s: interface name %q longer than %d bytes", a.IP, a.Interface, MaxInterfaceName)
	}
	for _, r := range a.Interface {
		if !validNameRune(r) {
			return fmt.Errorf("netif: address %s: interface name %q has character %q", a.IP, a.Interface, r)
		}
	}
	return nil
}

func validNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@", r)
}

// SanitizeName replaces the characters Validate refuses and truncates to MaxInterfaceName, so odd interface
// names (Linux allows almost anything) can still be advertised.
func SanitizeName(name string) string {
	b := []rune(name)
	for i, r := range b {
		if !validNameRune(r) {
			b[i] = '_'
		}
	}
	s := string(b)
	if len(s) > MaxInterfaceName {
		s = s[:MaxInterfaceName]
	}
	return s
}

// Sort orders addresses best first: by kind rank, then speed, then IPv4 before IPv6, then by IP.
func Sort(addrs []Address) {
	slices.SortStableFunc(addrs, func(a, b Address) int {
		if c := cmp.Compare(b.Kind.Rank(), a.Kind.Rank()); c != 0 {
			return c
		}
		if c := cmp.Compare(b.EffectiveMbps(), a.EffectiveMbps()); c != 0 {
			return c
		}
		if a.IP.Is4() != b.IP.Is4() {
			if a.IP.Is4() {
				return -1
			}
			return 1
		}
		return a.IP.Compare(b.IP)
	})
}

// Link is what the OS says about one interface.
type Link struct {
	Kind      Kind
	SpeedMbps int
}

// Detect lists the addresses of the interfaces that are up, with their link kind and speed, best first.
// IPv6 link-local addresses are left out: they need a zone to be dialled.
func Detect() ([]Address, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("netif: list interfaces: %w", err)
	}
	classify := osClassifier()
	var out []Address
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		var link Link
		classified := false
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLinkLocalUnicast() && ip.Is6() || ip.IsMulticast() || ip.IsUnspecified() {
				continue
			}
			if !classified {
				link = classify(ifi.Name, ifi.Flags&net.FlagLoopback != 0)
				classified = true
			}
			ones, _ := ipn.Mask.Size()
			out = append(out, Address{
				IP:        ip,
				PrefixLen: ones,
				Interface: SanitizeName(ifi.Name),
				Kind:      link.Kind,
				SpeedMbps: min(max(link.SpeedMbps, 0), MaxSpeedMbps),
			})
		}
	}
	Sort(out)
	return out, nil
}

// ClassifyName guesses a link from an interface name alone: the fallback where the OS says nothing better.
func ClassifyName(name string, loopback bool) Kind {
	n := strings.ToLower(name)
	switch {
	case loopback || n == "lo" || strings.HasPrefix(n, "lo0"):
		return KindLoopback
	case strings.HasPrefix(n, "thunderbolt"), n == "bridge0":
		// bridge0 is macOS's Thunderbolt Bridge; other bridges (bridge100 for Internet Sharing) are not.
		return KindThunderbolt
	case strings.HasPrefix(n, "wl"), strings.HasPrefix(n, "wifi"), strings.HasPrefix(n, "ath"):
		return KindWiFi
	case strings.HasPrefix(n, "eth"), strings.HasPrefix(n, "en"):
		return KindEthernet
	}
	return KindOther
}
