//go:build !unix

package hub

import (
	"context"
	"sync"
	"time"
)

// locks holds one token per lock path for this process. Without flock(2) there is no lock shared with other
// processes here; blobs still appear only through atomic renames, but two processes may both download one.
var locks sync.Map // path -> chan struct{} (capacity 1)

func lockFile(ctx context.Context, path string, waiting func(time.Duration)) (unlock func(), err error) {
	v, _ := locks.LoadOrStore(path, make(chan struct{}, 1))
	ch := v.(chan struct{})
	began := time.Now()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case ch <- struct{}{}:
			return func() { <-ch }, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case now := <-tick.C:
			waiting(now.Sub(began))
		}
	}
}
