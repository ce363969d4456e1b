package netif

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Values of /sys/class/net/<if>/type (linux/if_arp.h).
const (
	arphrdEther    = 1
	arphrdLoopback = 772
)

// ClassifySysfs classifies interface name from a Linux /sys/class/net tree (fsys rooted there).
func ClassifySysfs(fsys fs.FS, name string) Link {
	readInt := func(file string) (int, bool) {
		b, err := fs.ReadFile(fsys, path.Join(name, file))
		if err != nil {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return n, err == nil
	}
	exists := func(file string) bool {
		_, err := fs.Lstat(fsys, path.Join(name, file))
		return err == nil
	}
	speed := 0
	if s, ok := readInt("speed"); ok && s > 0 {
		speed = s
	}
	typ, _ := readInt("type")
	driver := ""
	if target, err := fs.ReadLink(fsys, path.Join(name, "device", "driver")); err == nil {
		driver = path.Base(target)
	}
	switch {
	case typ == arphrdLoopback:
		return Link{Kind: KindLoopback}
	case exists("wireless") || exists("phy80211"):
		return Link{Kind: KindWiFi, SpeedMbps: speed}
	case strings.Contains(driver, "thunderbolt") || strings.HasPrefix(name, "thunderbolt"):
		return Link{Kind: KindThunderbolt, SpeedMbps: speed}
	case typ == arphrdEther && exists("device"):
		return Link{Kind: KindEthernet, SpeedMbps: speed}
	}
	// veth, bridges, tunnels, bonds: no device of their own, so their kind says nothing about the wire.
	return Link{Kind: KindOther, SpeedMbps: speed}
}
