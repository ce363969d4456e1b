package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/duet-ai/duet/gateway/internal/builtin"
	"github.com/duet-ai/duet/gateway/internal/pluginhost"
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

// RouterSwapper starts a router the operator registered, by name, and makes it the one in use
// (PUT /admin/v1/router); nil disables swapping. An error wrapping ErrRouterRefused started nothing and says
// why to the client; any other is logged, and the client gets a generic message.
type RouterSwapper interface {
	SwapRouter(ctx context.Context, name string, sha256 []byte) error
	Current() string
	// Available are the names SwapRouter accepts.
	Available() []string
}

// ErrRouterRefused wraps a router swap refused before anything started (a path, a name the operator did not
// register, a pin that is not the registered one): its message is the gateway's own, for the client.
var ErrRouterRefused = errors.New("router refused")

// routers starts the routers of its catalog (built-in ones in process unless --router-subprocess, external
// ones as supervised plugins pinned by their SHA-256), and swaps the one in use.
type routers struct {
	log        *slog.Logger
	sockets    string
	logLevel   string
	subprocess bool // built-in routers as plugins too
	catalog    *pluginhost.Catalog
	sw         *RouterSwitch

	cur atomic.Pointer[pluginhost.Supervisor[router.Router]]
}

var _ RouterSwapper = (*routers)(nil)

func (r *routers) start(ctx context.Context, p pluginhost.Plugin) (*RouterHandle, error) {
	name := p.Name
	if mk, ok := builtin.InProcessRouters[name]; ok && p.Builtin() && !r.subprocess {
		rt, err := mk()
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", name, err)
		}
		r.cur.Store(nil)
		r.log.Info("router ready", "router", name, "in_process", true)
		return &RouterHandle{Name: name, Get: func() (router.Router, error) { return rt, nil }}, nil
	}
	cmd, err := pluginCommand("router", p)
	if err != nil {
		return nil, err
	}
	sup, err := pluginhost.Start(ctx, pluginhost.Spec[router.Router]{
		Name:         "router " + name,
		Command:      cmd,
		ClientConfig: router.ClientConfig,
		Connect:      router.Connect,
		Checksum:     p.SHA256,
		SocketDir:    r.sockets,
		Logger:       r.log,
		PluginLog:    os.Stderr,
		LogLevel:     r.logLevel,
	})
	if err != nil {
		return nil, err
	}
	r.cur.Store(sup)
	return &RouterHandle{
		Name: name,
		Get:  func() (router.Router, error) { rt, _, err := sup.Get(); return rt, err },
		Stop: sup.Stop,
	}, nil
}

// SwapRouter implements RouterSwapper: only a registered name starts, and a pin given with the request must
// be the registered one.
func (r *routers) SwapRouter(ctx context.Context, name string, checksum []byte) error {
	p, err := r.catalog.Lookup(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRouterRefused, err)
	}
	if checksum != nil {
		if p.Builtin() {
			return fmt.Errorf("%w: sha256 pins an external plugin binary, but router %q is built into duet", ErrRouterRefused, name)
		}
		if !bytes.Equal(checksum, p.SHA256) {
			return fmt.Errorf("%w: sha256 is not the SHA-256 registered for router %q at start", ErrRouterRefused, name)
		}
	}
	h, err := r.start(ctx, p)
	if err != nil {
		return err
	}
	r.sw.Swap(h)
	return nil
}

// Current implements RouterSwapper.
func (r *routers) Current() string { return r.sw.Current() }

// Available implements RouterSwapper.
func (r *routers) Available() []string { return r.catalog.Names() }

func (r *routers) status() pluginhost.Status {
	if s := r.cur.Load(); s != nil {
		return s.Status()
	}
	return pluginhost.Status{Name: "router " + r.sw.Current() + " (in process)", State: pluginhost.StateRunning}
}
