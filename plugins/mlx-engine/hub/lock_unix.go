//go:build unix

package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock(2) on path, creating it if needed, the same lock huggingface_hub's filelock
// takes on the same path, so that Resolve, other duet processes and Python downloads into the same cache never
// write one blob at once. flock locks belong to the open file, so goroutines of one process exclude each other
// too. Waiting polls, to honour ctx; waiting is called every 10s while it lasts.
func lockFile(ctx context.Context, path string, waiting func(time.Duration)) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	began := time.Now()
	next := began.Add(10 * time.Second)
	delay := 5 * time.Millisecond
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(fd, syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if now := time.Now(); now.After(next) {
			waiting(now.Sub(began))
			next = now.Add(10 * time.Second)
		}
		if err := sleep(ctx, delay); err != nil {
			f.Close()
			return nil, err
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}
