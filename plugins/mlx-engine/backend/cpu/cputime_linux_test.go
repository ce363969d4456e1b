package cpu

import (
	"syscall"
	"time"
)

// threadCPUTime is the CPU time the calling OS thread has used (lock the goroutine to its thread first). On a
// shared machine it measures a kernel's work independently of how much of the wall clock it was given.
func threadCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPUTime is the CPU time all threads of the process have used.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
