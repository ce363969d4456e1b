package node

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/duet-ai/duet/sdk/engine"
)

// fakeEngine loads and unloads any instance; nothing else is called on it.
type fakeEngine struct {
	engine.Engine
	unloaded []string
}

func (*fakeEngine) Load(_ context.Context, req engine.LoadRequest) (engine.Description, error) {
	if req.Model == "bad" {
		return engine.Description{}, errors.New("no such model")
	}
	return engine.Description{InstanceID: req.InstanceID, ModelID: req.Model}, nil
}

func (e *fakeEngine) Unload(_ context.Context, id string) error {
	e.unloaded = append(e.unloaded, id)
	return nil
}

// TestRegistry: instances get ids of their node, load with the node's defaults under their own options, count
// their load, are bounded by MaxInstances, and are forgotten when removed or when the engine dies.
func TestRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewRegistry(RegistryConfig{Node: "n1", Defaults: map[string]string{"a": "1", "b": "1"}, MaxInstances: 2})
	reg.AddSpec(InstanceSpec{Model: "m1"})
	e := &fakeEngine{}
	if err := reg.LoadAll(ctx, e); err != nil {
		t.Fatal(err)
	}
	in, ok := reg.Get("n1-0")
	if !ok || in.Spec.Role != "both" || in.Desc.ModelID != "m1" {
		t.Fatalf("n1-0: %+v %v", in, ok)
	}
	if got := reg.loadOptions(InstanceSpec{Options: map[string]string{"b": "2"}}); !maps.Equal(got, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("options %v", got)
	}
	if _, err := reg.Add(ctx, e, InstanceSpec{Model: "bad"}); err == nil {
		t.Error("a model that fails to load was added")
	}
	in2, err := reg.Add(ctx, e, InstanceSpec{Model: "m2"}) // n1-1 went to the failed load: ids are never reused
	if err != nil || in2.Desc.InstanceID != "n1-2" {
		t.Fatalf("add: %v %v", in2, err)
	}
	if _, err := reg.Add(ctx, e, InstanceSpec{Model: "m3"}); !errors.Is(err, ErrTooManyInstances) {
		t.Errorf("past MaxInstances: %v", err)
	}
	if got := reg.ByModel("m2"); len(got) != 1 || got[0] != in2 {
		t.Errorf("by model: %v", got)
	}

	gen := reg.LoadGen()
	reg.Begin(in)
	if reg.LoadGen() == gen || in.InFlight() != 1 || reg.LocalLoads()["n1-0"] != 1 {
		t.Errorf("after Begin: gen %d→%d, in flight %d, loads %v", gen, reg.LoadGen(), in.InFlight(), reg.LocalLoads())
	}
	reg.End(in)
	if in.InFlight() != 0 {
		t.Errorf("after End: %d in flight", in.InFlight())
	}

	if err := reg.Remove(ctx, e, "n1-2"); err != nil || len(e.unloaded) != 1 {
		t.Fatalf("remove: %v, unloaded %v", err, e.unloaded)
	}
	if err := reg.Remove(ctx, e, "n1-2"); !errors.Is(err, ErrNoInstance) {
		t.Errorf("removed twice: %v", err)
	}
	reg.EngineGone()
	if len(reg.All()) != 0 {
		t.Errorf("after the engine died: %d instances", len(reg.All()))
	}
	if err := reg.LoadAll(ctx, e); err != nil || len(reg.All()) != 1 {
		t.Errorf("loaded again: %v, %d instances", err, len(reg.All()))
	}
}
