package node

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/duet-ai/duet/sdk/router"
)

type routeFunc func() (router.Decision, error)

func (f routeFunc) Route(context.Context, router.Request, *router.Snapshot) (router.Decision, error) {
	return f()
}

// TestRouterSwitch: a swap sends new calls to the new router at once, and stops the old one only after the
// calls it was given returned; a router's panic is the call's error.
func TestRouterSwitch(t *testing.T) {
	t.Parallel()
	var stopped atomic.Bool
	old := &RouterHandle{Name: "old", Get: func() (router.Router, error) {
		return routeFunc(func() (router.Decision, error) { panic("boom") }), nil
	}, Stop: func() { stopped.Store(true) }}
	sw := NewRouterSwitch(old)
	r, release, err := sw.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(context.Background(), router.Request{}, &router.Snapshot{}); err == nil || !strings.Contains(err.Error(), "router old panicked") {
		t.Errorf("a panic: %v", err)
	}
	done := make(chan struct{})
	sw.Swap(&RouterHandle{Name: "new", Get: func() (router.Router, error) {
		return routeFunc(func() (router.Decision, error) { return router.Decision{Reason: "new"}, nil }), nil
	}, Stop: func() { close(done) }})
	if sw.Current() != "new" {
		t.Errorf("current %q", sw.Current())
	}
	if stopped.Load() {
		t.Fatal("the old router stopped while a call held it")
	}
	release()
	old.calls.Wait()
	r, release, err = sw.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if d, err := r.Route(context.Background(), router.Request{}, &router.Snapshot{}); err != nil || d.Reason != "new" {
		t.Errorf("after the swap: %+v %v", d, err)
	}
	release()
	sw.Stop()
	<-done
}
