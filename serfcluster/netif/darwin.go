package netif

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
)

// ParseHardwarePorts parses `networksetup -listallhardwareports` into a map from device (en0, bridge0) to its
// hardware port name ("Wi-Fi", "Thunderbolt Bridge", "Ethernet", "Thunderbolt 1").
func ParseHardwarePorts(out string) map[string]string {
	ports := make(map[string]string)
	port := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "Hardware Port:"); ok {
			port = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, "Device:"); ok && port != "" {
			ports[strings.TrimSpace(v)] = port
			port = ""
		}
	}
	return ports
}

// KindOfHardwarePort maps a macOS hardware port name to a Kind.
func KindOfHardwarePort(port string) Kind {
	p := strings.ToLower(port)
	switch {
	case strings.Contains(p, "wi-fi"), strings.Contains(p, "airport"), strings.Contains(p, "wifi"):
		return KindWiFi
	case strings.Contains(p, "thunderbolt"):
		return KindThunderbolt
	case strings.Contains(p, "ethernet"), strings.Contains(p, "lan"):
		return KindEthernet
	}
	return KindOther
}

var mediaSpeed = regexp.MustCompile(`(?i)\b(\d+(?:\.\d+)?)(g|m)?base`)

// ParseMediaSpeed reads the speed in Mbps from the "media:" line of macOS ifconfig output, such as
// "media: autoselect (10Gbase-T <full-duplex>)" or "media: autoselect (1000baseT <full-duplex>)". It returns 0
// when the line is absent or names no speed (Wi-Fi, Thunderbolt Bridge).
func ParseMediaSpeed(ifconfig string) int {
	for line := range strings.Lines(ifconfig) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "media:") {
			continue
		}
		m := mediaSpeed.FindStringSubmatch(line)
		if m == nil {
			return 0
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0
		}
		if strings.EqualFold(m[2], "g") {
			v *= 1000
		}
		return min(int(v), MaxSpeedMbps)
	}
	return 0
}
