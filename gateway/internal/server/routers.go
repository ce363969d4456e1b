package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/duet-ai/duet/sdk/router"
)

// RouterProvider hands out the router for one call. release ends the call: a router swapped out at run time
// is stopped only once every call it was given has returned.
type RouterProvider interface {
	Acquire() (r router.Router, release func(), err error)
}

// RouterHandle is one router the gateway can use: how to get it for a call (a supervised plugin may be
// restarting), and how to stop it.
type RouterHandle struct {
	Name string
	Get  func() (router.Router, error)
	Stop func()

	calls sync.WaitGroup
}

// RouterSwitch is the RouterProvider whose router can be swapped while requests run (PUT /admin/v1/router).
type RouterSwitch struct {
	mu  sync.RWMutex
	cur *RouterHandle
}

// NewRouterSwitch starts with h.
func NewRouterSwitch(h *RouterHandle) *RouterSwitch { return &RouterSwitch{cur: h} }

// Acquire implements RouterProvider.
func (s *RouterSwitch) Acquire() (router.Router, func(), error) {
	s.mu.RLock()
	h := s.cur
	h.calls.Add(1) // under the read lock: a swap waits for the calls of the handle it replaced, all counted
	s.mu.RUnlock()
	r, err := h.Get()
	if err != nil {
		h.calls.Done()
		return nil, nil, err
	}
	return safeRouter{r, h.Name}, h.calls.Done, nil
}

// Current names the router in use.
func (s *RouterSwitch) Current() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur.Name
}

// Swap makes h the router of new requests; the old one is stopped once its calls returned. It returns at
// once.
func (s *RouterSwitch) Swap(h *RouterHandle) {
	s.mu.Lock()
	old := s.cur
	s.cur = h
	s.mu.Unlock()
	go func() {
		old.calls.Wait()
		if old.Stop != nil {
			old.Stop()
		}
	}()
}

// Stop stops the current router (at shutdown).
func (s *RouterSwitch) Stop() {
	s.mu.Lock()
	h := s.cur
	s.mu.Unlock()
	h.calls.Wait()
	if h.Stop != nil {
		h.Stop()
	}
}

// safeRouter turns a router's panic into an error: a router in the gateway's process must not take it down.
type safeRouter struct {
	r    router.Router
	name string
}

func (s safeRouter) Route(ctx context.Context, req router.Request, snap *router.Snapshot) (d router.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("router %s panicked: %v", s.name, p)
		}
	}()
	return s.r.Route(ctx, req, snap)
}
