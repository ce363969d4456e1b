package mlxengine_test

import (
	"context"
	"path/filepath"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestLoadFromHub loads a model by its hub id from a fake hub on loopback, then again offline from the cache.
func TestLoadFromHub(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	if err := modelgen.Generate(dir, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	srv := hubtest.NewServer(t)
	if _, err := srv.AddRepo("test-org/tiny", hubtest.RepoOptions{}).CommitDir(dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")

	ctx := context.Background()
	e := mlxengine.New(nil)
	defer e.Close()
	d, err := e.Load(ctx, engine.LoadRequest{Model: "test-org/tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if d.ModelID != "test-org/tiny" {
		t.Errorf("model id %q", d.ModelID)
	}

	t.Setenv("HF_HUB_OFFLINE", "1")
	if _, err := e.Load(ctx, engine.LoadRequest{Model: "test-org/tiny"}); err != nil {
		t.Fatalf("offline load from the cache: %v", err)
	}
	_, err = e.Load(ctx, engine.LoadRequest{Model: "test-org/missing"})
	if engine.CodeOf(err) != engine.CodeNotFound {
		t.Errorf("a model that is not cached, offline: %v (code %q), want not found", err, engine.CodeOf(err))
	}
}

func TestLoadErrors(t *testing.T) {
	e := mlxengine.New(nil)
	defer e.Close()
	ctx := context.Background()
	cases := []struct {
		name, model string
		opts        map[string]string
		code        engine.Code
	}{
		{"not a model", "./no/such/dir", nil, engine.CodeNotFound},
		{"empty dir", t.TempDir(), nil, engine.CodeInvalidArgument},
		{"unknown option", mlxengine.EmbeddedModel, map[string]string{"warp": "9"}, engine.CodeInvalidArgument},
		{"mlx without the tag", mlxengine.EmbeddedModel, map[string]string{"backend": "nope"}, engine.CodeInvalidArgument},
		{"unknown weights", mlxengine.EmbeddedModel, map[string]string{"weights": "fp8"}, engine.CodeInvalidArgument},
		{"snapshot grid off the hash block", mlxengine.EmbeddedModel, map[string]string{"state_snapshot_every": "100"}, engine.CodeInvalidArgument},
		{"snapshot grid of zero", mlxengine.EmbeddedModel, map[string]string{"state_snapshot_every": "0"}, engine.CodeInvalidArgument},
		{"snapshot grid not a number", mlxengine.EmbeddedModel, map[string]string{"state_snapshot_every": "many"}, engine.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Load(ctx, engine.LoadRequest{Model: c.model, Options: c.opts})
			if engine.CodeOf(err) != c.code {
				t.Errorf("got %v (code %q), want code %q", err, engine.CodeOf(err), c.code)
			}
		})
	}
}
