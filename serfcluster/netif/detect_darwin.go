//go:build darwin

package netif

import (
	"context"
	"os/exec"
	"strings"
	"time"
)

// commandTimeout bounds each helper command; a hung networksetup must not stall start-up.
const commandTimeout = 2 * time.Second

func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	return string(out), err
}

func osClassifier() func(name string, loopback bool) Link {
	var ports map[string]string
	if out, err := run("/usr/sbin/networksetup", "-listallhardwareports"); err == nil {
		ports = ParseHardwarePorts(out)
	}
	// Without networksetup, en0 is Wi-Fi on a MacBook and Ethernet on a desktop Mac.
	laptop := false
	if model, err := run("/usr/sbin/sysctl", "-n", "hw.model"); err == nil {
		laptop = strings.Contains(model, "MacBook")
	}
	return func(name string, loopback bool) Link {
		if loopback {
			return Link{Kind: KindLoopback}
		}
		var kind Kind
		if port, ok := ports[name]; ok {
			kind = KindOfHardwarePort(port)
		} else if name == "en0" && laptop {
			kind = KindWiFi
		} else {
			kind = ClassifyName(name, false)
		}
		speed := 0
		if kind == KindEthernet || kind == KindOther {
			if out, err := run("/sbin/ifconfig", name); err == nil {
				speed = ParseMediaSpeed(out)
			}
		}
		return Link{Kind: kind, SpeedMbps: speed}
	}
}
