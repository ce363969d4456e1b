package cpu

import (
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// physicalMemory is the memory this process may use in bytes: the machine's RAM, or less when a cgroup (a
// container's limit) says so; MaxInt64 when nothing says.
func physicalMemory() int64 {
	n := int64(math.MaxInt64)
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil && si.Totalram > 0 {
		n = int64(si.Totalram) * max(int64(si.Unit), 1)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if l, ok := cgroupLimit(f); ok {
			n = min(n, l)
		}
	}
	return n
}

// cgroupLimit reads a cgroup memory limit file: a byte count, or "max" (cgroup v2) or a huge number (v1) for
// none.
func cgroupLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= 1<<60 {
		return 0, false
	}
	return v, true
}
