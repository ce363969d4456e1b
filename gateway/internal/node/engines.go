package node

import (
	"errors"
	"sync/atomic"

	"github.com/duet-ai/duet/gateway/internal/pluginhost"
	"github.com/duet-ai/duet/sdk/engine"
)

// EngineProvider hands out the running engine plugin; pluginhost.Supervisor implements it.
type EngineProvider interface {
	Get() (engine.Engine, uint64, error)
	Explain(gen uint64) (died bool, lastWords string)
}

// lateEngines is the engine provider before and after the engine plugin is up: the API answers while the
// engine starts (peers pull this node's state; /healthz says "starting").
type lateEngines struct {
	sup atomic.Pointer[pluginhost.Supervisor[engine.Engine]]
}

var _ EngineProvider = (*lateEngines)(nil)

var errStarting = errors.New("the engine plugin is starting")

func (l *lateEngines) Get() (engine.Engine, uint64, error) {
	s := l.sup.Load()
	if s == nil {
		return nil, 0, errStarting
	}
	return s.Get()
}

func (l *lateEngines) Explain(gen uint64) (bool, string) {
	s := l.sup.Load()
	if s == nil {
		return false, ""
	}
	return s.Explain(gen)
}
