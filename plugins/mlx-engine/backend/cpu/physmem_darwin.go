package cpu

import (
	"math"

	"golang.org/x/sys/unix"
)

// physicalMemory is the machine's RAM in bytes (MaxInt64 when the OS does not say).
func physicalMemory() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil || n == 0 || n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
