package hub

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress receives what Resolve is doing. Report is never called concurrently: calls for one Resolve come
// one at a time, in order, so an implementation needs no locking of its own for a single download.
type Progress interface {
	Report(Event)
}

// ProgressFunc adapts a function to Progress.
type ProgressFunc func(Event)

// Report calls f(e).
func (f ProgressFunc) Report(e Event) { f(e) }

// Discard is a Progress that ignores every event.
var Discard Progress = ProgressFunc(func(Event) {})

// EventKind says what an Event reports.
type EventKind int

// The events of one Resolve, in the order they come: one Start (only when something must be downloaded), then
// Progress, FileDone, Retry and Warning in any order, then one Done. A Resolve that finds everything in the
// cache sends only Done (with Cached set), or Warning then Done.
const (
	// EventStart: the download plan is known. Files, Total and Cached are set.
	EventStart EventKind = iota + 1
	// EventProgress: bytes moved. Bytes and Transferred are set.
	EventProgress
	// EventFileDone: File was downloaded and verified.
	EventFileDone
	// EventRetry: a request for File failed with Err; it is retried after Wait (Attempt counts the retries).
	EventRetry
	// EventWarning: something worth a line in the log, in Message (a cache fallback, a wait for a lock).
	EventWarning
	// EventDone: Resolve is returning. Dir is the model directory, or Err the failure.
	EventDone
)

// Event is one report from Resolve.
type Event struct {
	Kind     EventKind
	Time     time.Time // when it happened
	Repo     string    // "org/name"
	Revision string    // as asked: branch, tag or commit
	Commit   string    // the commit it resolved to, once known

	Files  int   // Start: files to download
	Cached int   // Start, Done: files found in the cache
	Total  int64 // bytes of the files to download (their full sizes)
	// Bytes of those files now on disk, including what earlier attempts left in blobs/*.incomplete.
	Bytes int64
	// Transferred is the number of bytes received over the network by this Resolve; rates are computed from it.
	Transferred int64

	File    string        // FileDone, Retry: the repository file
	Attempt int           // Retry: 1 for the first retry
	Wait    time.Duration // Retry: how long until the next attempt
	Err     error         // Retry: what failed; Done: why Resolve failed
	Message string        // Warning
	Dir     string        // Done: the snapshot directory
}

// tracker counts bytes from the download goroutines and hands serialized events to a Progress.
type tracker struct {
	p        Progress
	base     Event // Repo, Revision, Commit
	now      func() time.Time
	bytes    atomic.Int64
	moved    atomic.Int64
	total    atomic.Int64
	mu       sync.Mutex // serializes Report calls
	reported [2]int64   // Bytes and Transferred at the last EventProgress
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newTracker(p Progress, r Ref) *tracker {
	return &tracker{p: p, base: Event{Repo: r.Repo, Revision: r.Revision}, now: time.Now}
}

// emit fills the common fields of e and reports it.
func (t *tracker) emit(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.Time = t.now()
	e.Repo, e.Revision = t.base.Repo, t.base.Revision
	if e.Commit == "" {
		e.Commit = t.base.Commit
	}
	if e.Kind != EventStart {
		e.Total = t.total.Load()
		e.Bytes = t.bytes.Load()
		e.Transferred = t.moved.Load()
	}
	if e.Kind == EventProgress {
		now := [2]int64{e.Bytes, e.Transferred}
		if now == t.reported {
			return
		}
		t.reported = now
	}
	t.p.Report(e)
}

func (t *tracker) setCommit(c string) {
	t.mu.Lock()
	t.base.Commit = c
	t.mu.Unlock()
}

// start reports the plan and sends EventProgress every interval until finish.
func (t *tracker) start(files, cached int, total, onDisk int64, interval time.Duration) {
	t.total.Store(total)
	t.bytes.Store(onDisk)
	t.emit(Event{Kind: EventStart, Files: files, Cached: cached, Total: total, Bytes: onDisk})
	t.stop = make(chan struct{})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
				t.emit(Event{Kind: EventProgress})
			}
		}
	}()
}

// finish stops the ticker and sends a last EventProgress, so consumers see the final count before Done.
func (t *tracker) finish() {
	if t.stop == nil {
		return
	}
	close(t.stop)
	t.wg.Wait()
	t.stop = nil
	t.emit(Event{Kind: EventProgress})
}
