package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/sdk/engine"
)

// InstanceSpec is an instance this gateway should serve: loaded at start (--model), or through
// POST /v1/instances, and loaded again whenever the engine plugin restarts.
type InstanceSpec struct {
	ID      string
	Model   string
	Options map[string]string
	Role    cluster.Role
}

// Instance is a model instance this gateway's engine serves, with its live load.
type Instance struct {
	Spec     InstanceSpec
	Desc     engine.Description
	LoadedAt time.Time
	inFlight atomic.Int64
}

// Registry holds the instances of this node: the ones it should serve (specs, in order) and the ones its
// engine has loaded, and publishes them to the cluster as they change (loading, ready, unavailable).
type Registry struct {
	node      string
	engineTag string // the engine plugin's name, published with each instance
	agent     *cluster.Agent
	log       *slog.Logger
	// defaults are the engine options every instance gets (--engine-opt), under its own.
	defaults map[string]string
	kvHost   string // where instances serve KV when their options do not say
	// calibrateTokens is how many prompt tokens a calibration run has after each load (0: none); see calibrate.
	calibrateTokens int
	// max bounds the instances Add accepts, counting those loaded at start (0: no bound).
	max int

	mu        sync.RWMutex
	specs     []InstanceSpec
	instances map[string]*Instance
	next      int
	loadGen   atomic.Uint64 // bumped whenever a local in-flight count changes
}

// LoadGen changes whenever a local in-flight count does.
func (r *Registry) LoadGen() uint64 { return r.loadGen.Load() }

// InFlight is the instance's generations running now.
func (in *Instance) InFlight() int64 { return in.inFlight.Load() }

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Node, Engine string
	Agent        *cluster.Agent
	Defaults     map[string]string
	// KVHost is the host instances' KV servers listen on by default (the API's host): every instance can
	// then prefill for other nodes; a port of 0 is chosen per instance.
	KVHost string
	// CalibrateTokens, when positive, runs one generation of this many prompt tokens (and a few out) on each
	// instance once it is loaded, in the background, to seed its measured speeds (cluster.Speeds) before
	// real requests refine them.
	CalibrateTokens int
	// MaxInstances, when positive, bounds the instances of this node that Add accepts (those of --model
	// count, but are never refused).
	MaxInstances int
	Logger       *slog.Logger
}

// NewRegistry returns a registry with no instances.
func NewRegistry(cfg RegistryConfig) *Registry {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{node: cfg.Node, engineTag: cfg.Engine, agent: cfg.Agent, log: cfg.Logger, defaults: cfg.Defaults,
		kvHost: cfg.KVHost, calibrateTokens: cfg.CalibrateTokens, max: cfg.MaxInstances, instances: map[string]*Instance{}}
}

// Node is this node's id.
func (r *Registry) Node() string { return r.node }

// AddSpec adds an instance to serve (at start, before the engine runs); it returns the instance's id.
func (r *Registry) AddSpec(spec InstanceSpec) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addSpecLocked(spec)
}

func (r *Registry) addSpecLocked(spec InstanceSpec) string {
	if spec.ID == "" {
		for {
			spec.ID = r.node + "-" + strconv.Itoa(r.next)
			r.next++
			if !r.hasSpecLocked(spec.ID) {
				break
			}
		}
	}
	if spec.Role == "" {
		spec.Role = cluster.RoleBoth
	}
	r.specs = append(r.specs, spec)
	return spec.ID
}

func (r *Registry) hasSpecLocked(id string) bool {
	for _, s := range r.specs {
		if s.ID == id {
			return true
		}
	}
	return false
}

// loadOptions are the options the engine gets for spec: the gateway's defaults, and the spec's own, which win.
func (r *Registry) loadOptions(spec InstanceSpec) map[string]string {
	o := maps.Clone(r.defaults)
	if o == nil {
		o = map[string]string{}
	}
	maps.Copy(o, spec.Options)
	return o
}

// LoadAll loads every instance to serve into a fresh engine (at start, and after the engine plugin
// restarted). An instance that fails to load is reported and left out; the first failure is returned, so that
// a bad --model stops the gateway at start.
func (r *Registry) LoadAll(ctx context.Context, e engine.Engine) error {
	r.mu.RLock()
	specs := append([]InstanceSpec(nil), r.specs...)
	r.mu.RUnlock()
	var first error
	for _, spec := range specs {
		if _, err := r.load(ctx, e, spec); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// load loads one instance and publishes it: loading first, ready once loaded.
func (r *Registry) load(ctx context.Context, e engine.Engine, spec InstanceSpec) (*Instance, error) {
	r.publish(spec, engine.Description{InstanceID: spec.ID, ModelID: spec.Model}, cluster.InstanceLoading)
	desc, err := e.Load(ctx, engine.LoadRequest{InstanceID: spec.ID, Model: spec.Model, Options: r.loadOptions(spec), KVHost: r.kvHost})
	if err != nil {
		if r.agent != nil {
			r.agent.Remove(spec.ID)
		}
		return nil, fmt.Errorf("load model %q: %w", spec.Model, err)
	}
	r.mu.Lock()
	in, ok := r.instances[desc.InstanceID]
	if !ok || in.Desc.Fingerprint != desc.Fingerprint {
		in = &Instance{LoadedAt: time.Now()}
	}
	in.Spec, in.Desc = spec, desc
	r.instances[desc.InstanceID] = in
	r.mu.Unlock()
	r.publish(spec, desc, cluster.InstanceReady)
	r.log.Info("model loaded", "model", desc.ModelID, "instance", desc.InstanceID, "backend", desc.Backend,
		"architecture", desc.Architecture, "kv", desc.PrefillEndpoint)
	if r.calibrateTokens > 0 && r.agent != nil {
		go r.calibrate(e, in)
	}
	return in, nil
}

func (r *Registry) publish(spec InstanceSpec, d engine.Description, status cluster.InstanceStatus) {
	if r.agent == nil {
		return
	}
	err := r.agent.Publish(cluster.Instance{
		ID: spec.ID, Model: spec.Model, Engine: r.engineTag, Role: spec.Role, Status: status,
		KVEndpoint: d.PrefillEndpoint, Fingerprint: d.Fingerprint, Facts: cluster.FactsOf(d),
	})
	if err != nil {
		r.log.Warn("cluster: publish instance", "instance", spec.ID, "error", err)
	}
}

// ErrTooManyInstances is Add's refusal past the node's instance limit.
var ErrTooManyInstances = errors.New("too many instances")

// Add loads a new instance into the running engine and keeps it across engine restarts.
func (r *Registry) Add(ctx context.Context, e engine.Engine, spec InstanceSpec) (*Instance, error) {
	r.mu.Lock()
	if spec.ID != "" && r.hasSpecLocked(spec.ID) {
		r.mu.Unlock()
		return nil, fmt.Errorf("instance %q already exists", spec.ID)
	}
	if r.max > 0 && len(r.specs) >= r.max {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: node %s serves %d instances, its limit (--max-instances); unload one first", ErrTooManyInstances, r.node, len(r.specs))
	}
	spec.ID = r.addSpecLocked(spec)
	spec = r.specs[len(r.specs)-1]
	r.mu.Unlock()
	in, err := r.load(ctx, e, spec)
	if err != nil {
		r.dropSpec(spec.ID)
	}
	return in, err
}

func (r *Registry) dropSpec(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.specs {
		if s.ID == id {
			r.specs = append(r.specs[:i], r.specs[i+1:]...)
			return
		}
	}
}

// ErrNoInstance is returned for an instance this node does not serve.
var ErrNoInstance = errors.New("no such instance on this node")

// Remove unloads an instance and forgets it. Its requests in flight end cancelled.
func (r *Registry) Remove(ctx context.Context, e engine.Engine, id string) error {
	r.mu.Lock()
	known := r.hasSpecLocked(id)
	delete(r.instances, id)
	r.mu.Unlock()
	if !known {
		return ErrNoInstance
	}
	r.dropSpec(id)
	if r.agent != nil {
		if err := r.agent.SetStatus(id, cluster.InstanceDraining); err != nil {
			r.log.Warn("cluster: publish draining", "instance", id, "error", err)
		}
	}
	var err error
	if e != nil {
		err = e.Unload(ctx, id)
		if engine.CodeOf(err) == engine.CodeNotFound {
			err = nil
		}
	}
	if r.agent != nil {
		r.agent.Remove(id)
	}
	return err
}

// EngineGone marks every instance unavailable: the engine plugin died. LoadAll makes them ready again.
func (r *Registry) EngineGone() {
	r.mu.Lock()
	r.instances = map[string]*Instance{}
	r.mu.Unlock()
	if r.agent != nil {
		r.agent.SetAllStatus(cluster.InstanceUnavailable)
	}
}

// Draining marks every instance draining (the gateway is shutting down).
func (r *Registry) Draining() {
	if r.agent != nil {
		r.agent.SetAllStatus(cluster.InstanceDraining)
	}
}

// Get returns a loaded instance by id.
func (r *Registry) Get(id string) (*Instance, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	in, ok := r.instances[id]
	return in, ok
}

// ByModel returns the loaded instances serving a model, by the name the cluster knows it by (the model the
// instance was loaded as: a local directory's path, where the engine's own id is its base name).
func (r *Registry) ByModel(model string) []*Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Instance
	for _, in := range r.instances {
		if in.Spec.Model == model {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Desc.InstanceID < out[j].Desc.InstanceID })
	return out
}

// All returns every loaded instance, sorted by id.
func (r *Registry) All() []*Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Instance, 0, len(r.instances))
	for _, in := range r.instances {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Desc.InstanceID < out[j].Desc.InstanceID })
	return out
}

// Begin and End count a generation against an instance's load.
func (r *Registry) Begin(in *Instance) {
	n := in.inFlight.Add(1)
	r.loadGen.Add(1)
	if r.agent != nil {
		r.agent.SetLoad(in.Desc.InstanceID, int(n), 0)
	}
}

func (r *Registry) End(in *Instance) {
	n := in.inFlight.Add(-1)
	r.loadGen.Add(1)
	if r.agent != nil {
		r.agent.SetLoad(in.Desc.InstanceID, int(n), 0)
	}
}

// LocalLoads is every loaded instance's in-flight count.
func (r *Registry) LocalLoads() map[string]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]int, len(r.instances))
	for id, in := range r.instances {
		out[id] = int(in.inFlight.Load())
	}
	return out
}
