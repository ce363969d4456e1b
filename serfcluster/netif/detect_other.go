//go:build !linux && !darwin

package netif

func osClassifier() func(name string, loopback bool) Link {
	return func(name string, loopback bool) Link {
		return Link{Kind: ClassifyName(name, loopback)}
	}
}
