package serfcluster

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"

	"github.com/duet-ai/duet/serfcluster/netif"
)

// MaxTagBytes is serf's limit on a node's encoded tags (memberlist's node metadata size).
const MaxTagBytes = memberlist.MetaMaxSize

// MaxAdvertisedAddresses bounds the addresses a node advertises and a peer accepts.
const MaxAdvertisedAddresses = 16

// Tag keys. They are short because all of them share MaxTagBytes.
const (
	tagID        = "id"
	tagAPI       = "api"
	tagKV        = "kv"
	tagVersion   = "ver"
	tagHardware  = "hw"
	tagStateURL  = "st"
	tagAddresses = "ad"
)

// Limits on tag values.
const (
	maxVersionLen  = 32
	maxHardwareLen = 32
)

// StatePath is where the gateway mounts StateHandler, and where peers pull from unless a node advertises
// another StateURL.
const StatePath = "/cluster/v1/state"

func defaultStateURL(apiAddr string) string {
	if apiAddr == "" {
		return ""
	}
	return "http://" + apiAddr + StatePath
}

var kindCodes = map[netif.Kind]string{
	netif.KindThunderbolt: "tb",
	netif.KindEthernet:    "eth",
	netif.KindWiFi:        "wifi",
	netif.KindOther:       "other",
	netif.KindLoopback:    "lo",
}

func kindOfCode(code string) (netif.Kind, bool) {
	for k, c := range kindCodes {
		if c == code {
			return k, true
		}
	}
	return "", false
}

// validate checks identity tags as New and peers' tag decoding see them.
func (t *Tags) validate() error {
	if err := checkID("node id", string(t.NodeID)); err != nil {
		return err
	}
	if err := checkHostPort("api address", t.APIAddr, false); err != nil {
		return err
	}
	if err := checkHostPort("kv address", t.KVAddr, true); err != nil {
		return err
	}
	if err := checkToken("version", t.Version, maxVersionLen, true); err != nil {
		return err
	}
	if err := checkToken("hardware class", t.HardwareClass, maxHardwareLen, true); err != nil {
		return err
	}
	return checkURL("state url", t.StateURL)
}

// encodeTags turns identity and addresses into serf tags and checks that they fit MaxTagBytes, counting bytes
// exactly as serf will, so that an oversized identity fails here with an explanation rather than inside serf.
func encodeTags(t Tags, addrs []netif.Address) (map[string]string, error) {
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("serfcluster: tags: %w", err)
	}
	if len(addrs) > MaxAdvertisedAddresses {
		return nil, fmt.Errorf("serfcluster: tags: %d addresses, over the limit of %d", len(addrs), MaxAdvertisedAddresses)
	}
	m := map[string]string{tagID: string(t.NodeID), tagAPI: t.APIAddr}
	for k, v := range map[string]string{tagKV: t.KVAddr, tagVersion: t.Version, tagHardware: t.HardwareClass} {
		if v != "" {
			m[k] = v
		}
	}
	if t.StateURL != defaultStateURL(t.APIAddr) {
		m[tagStateURL] = t.StateURL
	}
	if len(addrs) > 0 {
		parts := make([]string, len(addrs))
		for i, a := range addrs {
			if err := a.Validate(); err != nil {
				return nil, fmt.Errorf("serfcluster: tags: %w", err)
			}
			ip := a.IP.String()
			if a.PrefixLen > 0 {
				ip += "/" + strconv.Itoa(a.PrefixLen)
			}
			parts[i] = strings.Join([]string{ip, a.Interface, kindCodes[a.Kind], strconv.Itoa(a.SpeedMbps)}, ",")
		}
		m[tagAddresses] = strings.Join(parts, " ")
	}
	if n := encodedTagSize(m); n > MaxTagBytes {
		return nil, fmt.Errorf("serfcluster: tags encode to %d bytes, over serf's limit of %d: "+
			"advertise fewer addresses (Config.Addresses or MaxAddresses, now %d; %d bytes) or shorten the "+
			"identity (node id %d bytes, api %d, kv %d, version %d, hardware class %d, state url %d)",
			n, MaxTagBytes, len(addrs), len(m[tagAddresses]), len(t.NodeID), len(t.APIAddr), len(t.KVAddr),
			len(t.Version), len(t.HardwareClass), len(m[tagStateURL]))
	}
	return m, nil
}

// encodedTagSize is the size of serf's tag encoding: a magic byte, then the map in msgpack with the same
// codec and handle serf uses.
func encodedTagSize(m map[string]string) int {
	var buf bytes.Buffer
	buf.WriteByte(0xff)
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(m); err != nil {
		return 1 << 30 // a map of strings always encodes; if it ever does not, it certainly does not fit
	}
	return buf.Len()
}

// decodeTags is the one strict decoder of a peer's tags. Every known key must be well formed and the
// required ones present; unknown keys are ignored so that a newer gateway can add tags without making older
// ones reject it.
func decodeTags(m map[string]string) (Tags, []netif.Address, error) {
	t := Tags{
		NodeID:        NodeID(m[tagID]),
		APIAddr:       m[tagAPI],
		KVAddr:        m[tagKV],
		Version:       m[tagVersion],
		HardwareClass: m[tagHardware],
		StateURL:      m[tagStateURL],
	}
	if t.StateURL == "" {
		t.StateURL = defaultStateURL(t.APIAddr)
	}
	if err := t.validate(); err != nil {
		return Tags{}, nil, fmt.Errorf("bad tags: %w", err)
	}
	addrs, err := decodeAddresses(m[tagAddresses])
	if err != nil {
		return Tags{}, nil, fmt.Errorf("bad tags: %w", err)
	}
	return t, addrs, nil
}

func decodeAddresses(s string) ([]netif.Address, error) {
	if s == "" {
		return nil, nil
	}
	entries := strings.Split(s, " ")
	if len(entries) > MaxAdvertisedAddresses {
		return nil, fmt.Errorf("%d addresses, over the limit of %d", len(entries), MaxAdvertisedAddresses)
	}
	out := make([]netif.Address, 0, len(entries))
	for _, e := range entries {
		f := strings.Split(e, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("address %q: want ip[/len],interface,kind,speed", e)
		}
		var a netif.Address
		if ipStr, bits, ok := strings.Cut(f[0], "/"); ok {
			ip, err := netip.ParseAddr(ipStr)
			if err != nil {
				return nil, fmt.Errorf("address %q: %v", e, err)
			}
			n, err := strconv.Atoi(bits)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("address %q: bad prefix length", e)
			}
			a.IP, a.PrefixLen = ip, n
		} else {
			ip, err := netip.ParseAddr(f[0])
			if err != nil {
				return nil, fmt.Errorf("address %q: %v", e, err)
			}
			a.IP = ip
		}
		a.Interface = f[1]
		kind, ok := kindOfCode(f[2])
		if !ok {
			return nil, fmt.Errorf("address %q: unknown link kind %q", e, f[2])
		}
		a.Kind = kind
		speed, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("address %q: bad speed", e)
		}
		a.SpeedMbps = speed
		if err := a.Validate(); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// selectAddresses picks what a node advertises from what it detected: loopback only when there is nothing
// else, best first, at most limit.
func selectAddresses(detected []netif.Address, limit int) []netif.Address {
	var out, loop []netif.Address
	for _, a := range detected {
		if a.Validate() != nil {
			continue
		}
		if a.Kind == netif.KindLoopback || a.IP.IsLoopback() {
			loop = append(loop, a)
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		out = loop
	}
	netif.Sort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
