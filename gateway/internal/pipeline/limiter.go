package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// Limiter is the gateway's admission control: at most maxInFlight generations run, at most maxQueue wait for
// a slot, each for at most queueTimeout. Everything beyond is a 429 at once, so overload is visible to clients
// instead of piling up.
type Limiter struct {
	slots        chan struct{}
	queued       atomic.Int64
	maxQueue     int64
	queueTimeout time.Duration
}

// NewLimiter admits maxInFlight generations at once and queues maxQueue more, each for up to queueTimeout.
func NewLimiter(maxInFlight, maxQueue int, queueTimeout time.Duration) *Limiter {
	return &Limiter{slots: make(chan struct{}, maxInFlight), maxQueue: int64(maxQueue), queueTimeout: queueTimeout}
}

func (l *Limiter) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
	}
	if l.queued.Add(1) > l.maxQueue {
		l.queued.Add(-1)
		return apicore.TooManyRequests("the server is at capacity; retry later")
	}
	defer l.queued.Add(-1)
	t := time.NewTimer(l.queueTimeout)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-t.C:
		return apicore.TooManyRequests("the server is at capacity: the request waited too long for a slot; retry later")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limiter) release() { <-l.slots }

// InFlight is how many generations hold a slot.
func (l *Limiter) InFlight() int { return len(l.slots) }

// Queued is how many wait for one.
func (l *Limiter) Queued() int { return int(l.queued.Load()) }
