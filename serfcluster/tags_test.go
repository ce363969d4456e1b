package serfcluster

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/serf/serf"

	"github.com/duet-ai/duet/serfcluster/netif"
)

func validTags() Tags {
	return Tags{
		NodeID: "studio-1", APIAddr: "10.1.0.5:8080", KVAddr: "10.1.0.5:9000", Version: "v0.1.0",
		HardwareClass: "m3-ultra", StateURL: defaultStateURL("10.1.0.5:8080"),
	}
}

func TestTagsRoundTrip(t *testing.T) {
	t.Parallel()
	tags := validTags()
	addrs := fakeAddresses(1)
	m, err := encodeTags(tags, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m[tagStateURL]; ok {
		t.Error("the default state URL was sent; it should be derived from the API address")
	}
	gotTags, gotAddrs, err := decodeTags(m)
	if err != nil {
		t.Fatal(err)
	}
	if gotTags != tags || !reflect.DeepEqual(gotAddrs, addrs) {
		t.Fatalf("round trip:\n got %+v %+v\nwant %+v %+v", gotTags, gotAddrs, tags, addrs)
	}

	tags.StateURL = "https://gw.example:8443/cluster/v1/state"
	m, err = encodeTags(tags, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gotTags, _, _ := decodeTags(m); gotTags.StateURL != tags.StateURL {
		t.Fatalf("custom state URL lost: %q", gotTags.StateURL)
	}
}

func TestEncodeTagsSizeLimit(t *testing.T) {
	t.Parallel()
	var many []netif.Address
	for range MaxAdvertisedAddresses {
		many = append(many, fakeAddresses(0)...)
	}
	_, err := encodeTags(validTags(), many[:MaxAdvertisedAddresses])
	if err == nil || !strings.Contains(err.Error(), "over serf's limit of 512") {
		t.Fatalf("16 addresses: err = %v, want the 512-byte limit explained", err)
	}
	if _, err := encodeTags(validTags(), many[:MaxAdvertisedAddresses+1]); err == nil {
		t.Fatal("17 addresses accepted")
	}
}

// TestEncodedTagSizeMatchesSerf pads tags to exactly MaxTagBytes by this package's count and checks that
// serf accepts them, and refuses one byte more: the count is serf's own.
func TestEncodedTagSizeMatchesSerf(t *testing.T) {
	t.Parallel()
	sized := func(n int) map[string]string {
		for pad := 0; pad < 600; pad++ {
			m := map[string]string{"id": "x", "pad": strings.Repeat("p", pad)}
			if encodedTagSize(m) == n {
				return m
			}
		}
		t.Fatalf("no padding gives %d bytes", n)
		return nil
	}
	for _, tc := range []struct {
		size int
		ok   bool
	}{{MaxTagBytes, true}, {MaxTagBytes + 1, false}} {
		conf := serf.DefaultConfig()
		conf.NodeName = "sizer"
		conf.Tags = sized(tc.size)
		conf.Logger = newSerfLogger(testLogger())
		conf.MemberlistConfig.BindAddr = "127.0.0.1"
		conf.MemberlistConfig.BindPort = 0
		conf.MemberlistConfig.Logger = conf.Logger
		s, err := serf.Create(conf)
		if s != nil {
			_ = s.Shutdown()
		}
		if (err == nil) != tc.ok {
			t.Errorf("serf.Create with %d-byte tags: err = %v, want ok=%v", tc.size, err, tc.ok)
		}
	}
}

func TestDecodeTagsStrict(t *testing.T) {
	t.Parallel()
	base := func() map[string]string {
		m, err := encodeTags(validTags(), fakeAddresses(2))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name   string
		mutate func(map[string]string)
		ok     bool
	}{
		{"valid", func(map[string]string) {}, true},
		{"unknown key ignored", func(m map[string]string) { m["future"] = "x y z" }, true},
		{"no addresses", func(m map[string]string) { delete(m, tagAddresses) }, true},
		{"missing id", func(m map[string]string) { delete(m, tagID) }, false},
		{"id with space", func(m map[string]string) { m[tagID] = "a b" }, false},
		{"missing api", func(m map[string]string) { delete(m, tagAPI) }, false},
		{"api without port", func(m map[string]string) { m[tagAPI] = "10.0.0.1" }, false},
		{"api port zero", func(m map[string]string) { m[tagAPI] = "10.0.0.1:0" }, false},
		{"kv garbage", func(m map[string]string) { m[tagKV] = "::::" }, false},
		{"version with newline", func(m map[string]string) { m[tagVersion] = "v1\n" }, false},
		{"hardware too long", func(m map[string]string) { m[tagHardware] = strings.Repeat("h", 33) }, false},
		{"state url relative", func(m map[string]string) { m[tagStateURL] = "/cluster/v1/state" }, false},
		{"state url ftp", func(m map[string]string) { m[tagStateURL] = "ftp://h/x" }, false},
		{"address three fields", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/24,en0,eth" }, false},
		{"address bad ip", func(m map[string]string) { m[tagAddresses] = "10.0.0/24,en0,eth,0" }, false},
		{"address bad prefix", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/40,en0,eth,0" }, false},
		{"address zero prefix", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/0,en0,eth,0" }, false},
		{"address unknown kind", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/24,en0,5g,0" }, false},
		{"address bad speed", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/24,en0,eth,fast" }, false},
		{"address negative speed", func(m map[string]string) { m[tagAddresses] = "10.0.0.1/24,en0,eth,-5" }, false},
		{"address zone", func(m map[string]string) { m[tagAddresses] = "fe80::1%en0/64,en0,eth,0" }, false},
		{"address no prefix ok", func(m map[string]string) { m[tagAddresses] = "10.0.0.1,en0,eth,0" }, true},
		{"address double space", func(m map[string]string) { m[tagAddresses] = "10.0.0.1,en0,eth,0  10.0.0.2,en0,eth,0" }, false},
		{"too many addresses", func(m map[string]string) {
			m[tagAddresses] = strings.TrimSpace(strings.Repeat("10.0.0.1,en0,eth,0 ", MaxAdvertisedAddresses+1))
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := base()
			tc.mutate(m)
			_, _, err := decodeTags(m)
			if (err == nil) != tc.ok {
				t.Fatalf("decodeTags: err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestSelectAddresses(t *testing.T) {
	t.Parallel()
	lo := netif.Address{IP: mustAddr("127.0.0.1"), PrefixLen: 8, Interface: "lo", Kind: netif.KindLoopback}
	wifi := fakeAddresses(0)[2]
	eth := fakeAddresses(0)[1]
	bad := netif.Address{IP: mustAddr("10.9.9.9"), Kind: "radio"}
	got := selectAddresses([]netif.Address{lo, wifi, bad, eth}, 1)
	if len(got) != 1 || got[0] != eth {
		t.Fatalf("selectAddresses = %+v, want only the Ethernet address", got)
	}
	if got := selectAddresses([]netif.Address{lo}, 4); len(got) != 1 || got[0] != lo {
		t.Fatalf("loopback-only machine: %+v", got)
	}
}
