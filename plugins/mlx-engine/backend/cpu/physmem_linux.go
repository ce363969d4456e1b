package cpu

import (
	"math"

	"golang.org/x/sys/unix"
)

// physicalMemory is the machine's RAM in bytes (MaxInt64 when the OS does not say).
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return math.MaxInt64
	}
	unit := max(int64(si.Unit), 1)
	return int64(si.Totalram) * unit
}
