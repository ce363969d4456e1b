//go:build linux || darwin

package hub

import "syscall"

// freeSpace returns the bytes available to an unprivileged user on the file system holding dir.
func freeSpace(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
