//go:build !linux

package cpu

import "time"

func threadCPUTime() time.Duration { return 0 }

func processCPUTime() time.Duration { return 0 }
