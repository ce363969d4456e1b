package netif

import (
	"io/fs"
	"net/netip"
	"os"
	"reflect"
	"runtime"
	"testing"
	"testing/fstest"
)

func TestClassifySysfs(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink}
	}
	dir := &fstest.MapFile{Mode: fs.ModeDir}
	sys := fstest.MapFS{
		"lo/type":                       file("772\n"),
		"eth0/type":                     file("1\n"),
		"eth0/speed":                    file("10000\n"),
		"eth0/device/driver":            link("../../../../bus/pci/drivers/ixgbe"),
		"eth1/type":                     file("1\n"),
		"eth1/speed":                    file("-1\n"),
		"eth1/device/driver":            link("../../../../bus/virtio/drivers/virtio_net"),
		"wlan0/type":                    file("1\n"),
		"wlan0/wireless":                dir,
		"wlp2s0/type":                   file("1\n"),
		"wlp2s0/phy80211":               link("../../ieee80211/phy0"),
		"thunderbolt0/type":             file("1\n"),
		"thunderbolt0/device/driver":    link("../../../../bus/thunderbolt/drivers/thunderbolt-net"),
		"tbnet/type":                    file("1\n"),
		"tbnet/device/driver":           link("../../../../bus/thunderbolt/drivers/thunderbolt-net"),
		"veth1/type":                    file("1\n"),
		"veth1/speed":                   file("10000\n"),
		"docker0/type":                  file("1\n"),
		"docker0/bridge/forward_delay":  file("1500\n"),
		"tun0/type":                     file("65534\n"),
		"missing-device-speed-file/foo": file(""),
	}
	tests := []struct {
		name string
		want Link
	}{
		{"lo", Link{Kind: KindLoopback}},
		{"eth0", Link{Kind: KindEthernet, SpeedMbps: 10000}},
		{"eth1", Link{Kind: KindEthernet}},
		{"wlan0", Link{Kind: KindWiFi}},
		{"wlp2s0", Link{Kind: KindWiFi}},
		{"thunderbolt0", Link{Kind: KindThunderbolt}},
		{"tbnet", Link{Kind: KindThunderbolt}},
		{"veth1", Link{Kind: KindOther, SpeedMbps: 10000}},
		{"docker0", Link{Kind: KindOther}},
		{"tun0", Link{Kind: KindOther}},
		{"missing-device-speed-file", Link{Kind: KindOther}},
		{"absent", Link{Kind: KindOther}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ClassifySysfs(sys, tc.name); got != tc.want {
				t.Fatalf("ClassifySysfs(%s) = %+v, want %+v", tc.name, got, tc.want)
			}
		})
	}
}

func TestParseHardwarePorts(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/networksetup-macstudio.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := ParseHardwarePorts(string(b))
	want := map[string]string{
		"en0": "Ethernet", "en1": "Wi-Fi", "en2": "Thunderbolt 1", "en3": "Thunderbolt 2",
		"bridge0": "Thunderbolt Bridge",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseHardwarePorts = %v, want %v", got, want)
	}
	kinds := map[string]Kind{"en0": KindEthernet, "en1": KindWiFi, "en2": KindThunderbolt, "bridge0": KindThunderbolt}
	for dev, k := range kinds {
		if got := KindOfHardwarePort(want[dev]); got != k {
			t.Errorf("KindOfHardwarePort(%q) = %s, want %s", want[dev], got, k)
		}
	}
}

func TestParseMediaSpeed(t *testing.T) {
	t.Parallel()
	golden, err := os.ReadFile("testdata/ifconfig-en0-10g.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, in string
		want     int
	}{
		{"golden 10G", string(golden), 10000},
		{"1000baseT", "\tmedia: autoselect (1000baseT <full-duplex>)\n", 1000},
		{"2.5G", "media: autoselect (2500Base-T <full-duplex>)", 2500},
		{"100baseTX", "media: autoselect (100baseTX <full-duplex,flow-control>)", 100},
		{"wifi", "media: autoselect\nstatus: active\n", 0},
		{"no media line", "status: inactive\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ParseMediaSpeed(tc.in); got != tc.want {
				t.Fatalf("ParseMediaSpeed = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestClassifyName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		loopback bool
		want     Kind
	}{
		{"lo", false, KindLoopback},
		{"lo0", false, KindLoopback},
		{"anything", true, KindLoopback},
		{"bridge0", false, KindThunderbolt},
		{"bridge100", false, KindOther},
		{"thunderbolt0", false, KindThunderbolt},
		{"wlan0", false, KindWiFi},
		{"eth0", false, KindEthernet},
		{"enp3s0", false, KindEthernet},
		{"utun3", false, KindOther},
	}
	for _, tc := range tests {
		if got := ClassifyName(tc.name, tc.loopback); got != tc.want {
			t.Errorf("ClassifyName(%q, %v) = %s, want %s", tc.name, tc.loopback, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Address{IP: netip.MustParseAddr("10.0.0.1"), PrefixLen: 24, Interface: "en0", Kind: KindEthernet}
	tests := []struct {
		name   string
		mutate func(*Address)
		bad    bool
	}{
		{"valid", func(*Address) {}, false},
		{"no ip", func(a *Address) { a.IP = netip.Addr{} }, true},
		{"zone", func(a *Address) { a.IP = netip.MustParseAddr("fe80::1%en0") }, true},
		{"prefix too long", func(a *Address) { a.PrefixLen = 33 }, true},
		{"ipv6 prefix ok", func(a *Address) { a.IP = netip.MustParseAddr("fd00::1"); a.PrefixLen = 64 }, false},
		{"unknown kind", func(a *Address) { a.Kind = "carrier-pigeon" }, true},
		{"negative speed", func(a *Address) { a.SpeedMbps = -1 }, true},
		{"long name", func(a *Address) { a.Interface = "abcdefghijklmnop" }, true},
		{"separator in name", func(a *Address) { a.Interface = "en0,x" }, true},
	}
	for _, tc := range tests {
		a := ok
		tc.mutate(&a)
		if err := a.Validate(); (err != nil) != tc.bad {
			t.Errorf("%s: Validate() = %v, want error %v", tc.name, err, tc.bad)
		}
	}
	if got := SanitizeName("a,b c|d-0123456789xyz"); got != "a_b_c_d-0123456" {
		t.Errorf("SanitizeName = %q", got)
	}
}

func TestSort(t *testing.T) {
	t.Parallel()
	mk := func(ip string, k Kind, speed int) Address {
		return Address{IP: netip.MustParseAddr(ip), Kind: k, SpeedMbps: speed}
	}
	addrs := []Address{
		mk("127.0.0.1", KindLoopback, 0),
		mk("192.168.1.5", KindWiFi, 0),
		mk("fd00::5", KindEthernet, 10000),
		mk("10.0.0.5", KindEthernet, 10000),
		mk("10.0.1.5", KindEthernet, 1000),
		mk("169.254.10.2", KindThunderbolt, 0),
	}
	Sort(addrs)
	var got []string
	for _, a := range addrs {
		got = append(got, a.IP.String())
	}
	want := []string{"169.254.10.2", "10.0.0.5", "fd00::5", "10.0.1.5", "192.168.1.5", "127.0.0.1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Sort order = %v, want %v", got, want)
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	addrs, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	sawLoopback := false
	for _, a := range addrs {
		if err := a.Validate(); err != nil {
			t.Errorf("detected address fails validation: %v", err)
		}
		if a.IP.IsLoopback() {
			sawLoopback = true
			if a.Kind != KindLoopback {
				t.Errorf("%s classified %s, want loopback", a.IP, a.Kind)
			}
		}
	}
	if runtime.GOOS == "linux" && !sawLoopback {
		t.Errorf("no loopback address among %v", addrs)
	}
}
