package runner

import (
	"sync"

	"github.com/duet-ai/duet/sdk/engine"
)

// eventQueue carries one request's events from the loop to the request's goroutine. Pushing never blocks:
// the loop must not wait on a slow client; a request produces at most max_tokens events, so the queue is
// bounded by the request itself.
type eventQueue struct {
	mu     sync.Mutex
	events []engine.Event
	notify chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{notify: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev engine.Event) {
	q.mu.Lock()
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// take returns the queued events, reusing buf.
func (q *eventQueue) take(buf []engine.Event) []engine.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	buf = append(buf[:0], q.events...)
	clear(q.events)
	q.events = q.events[:0]
	return buf
}
