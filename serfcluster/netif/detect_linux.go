//go:build linux

package netif

import "os"

func osClassifier() func(name string, loopback bool) Link {
	sys := os.DirFS("/sys/class/net")
	return func(name string, loopback bool) Link {
		if loopback {
			return Link{Kind: KindLoopback}
		}
		return ClassifySysfs(sys, name)
	}
}
