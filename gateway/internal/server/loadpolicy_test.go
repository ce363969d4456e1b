package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

func TestCheckLoadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[string]string
		says string // "" : accepted
	}{
		{"none", nil, ""},
		{"tuning", map[string]string{"threads": "2", "prefix_cache_mb": "0", "remote_prefill_threshold": "64"}, ""},
		{"kv_listen", map[string]string{"threads": "2", "kv_listen": "0.0.0.0:1"}, "option kv_listen names an address or a file"},
		{"kv_advertise", map[string]string{"kv_advertise": "10.0.0.1:1"}, "operator's setting"},
		{"cluster_secret_file", map[string]string{"cluster_secret_file": "/etc/passwd"}, "cluster_secret_file"},
		{"unknown", map[string]string{"zzz": "1"}, `option "zzz" is not one`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLoadOptions(tc.opts)
			if tc.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *apicore.Error
			if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, tc.says) {
				t.Fatalf("got %v, want a 400 saying %q", err, tc.says)
			}
		})
	}
}

func TestResolveAPIModel(t *testing.T) {
	root := t.TempDir()
	models := filepath.Join(root, "models")
	for _, d := range []string{"models/good", "models/org/name", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "config.json"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "outside"), filepath.Join(models, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(models, "good"), filepath.Join(models, "alias")); err != nil {
		t.Fatal(err)
	}
	s := &loadPolicy{operatorModels: []string{"/srv/operator-model"}, root: models}
	none := &loadPolicy{}
	for _, tc := range []struct {
		name, model string
		srv         *loadPolicy
		want        string // "" : refused with the one answer
	}{
		{"embedded", "embedded", s, "embedded"},
		{"operator's", "/srv/operator-model", s, "/srv/operator-model"},
		{"hub id", "mlx-community/Qwen3-0.6B-4bit", s, "mlx-community/Qwen3-0.6B-4bit"},
		{"hub id with revision", "org/other@main", s, "org/other@main"},
		{"hub id found under the directory", "org/name", s, filepath.Join(models, "org", "name")},
		{"relative", "good", s, filepath.Join(models, "good")},
		{"absolute inside", filepath.Join(models, "good"), s, filepath.Join(models, "good")},
		{"a link inside", "alias", s, filepath.Join(models, "alias")},
		{"a link out", "escape", s, ""},
		{"dot dot", "../outside", s, ""},
		{"dot dot inside a path", "good/../../outside", s, ""},
		{"absolute outside", filepath.Join(root, "outside"), s, ""},
		{"the directory itself", models, s, ""},
		{"a file", filepath.Join(models, "good", "config.json"), s, ""},
		{"missing", "nope", s, ""},
		{"no --models-dir", filepath.Join(models, "good"), none, ""},
		{"no --models-dir, missing", "/nonexistent", none, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := tc.srv.resolveAPIModel(tc.model)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var e *apicore.Error
			if !errors.As(err, &e) || e.Status != 404 || e.Code != "model_not_found" || e.Message != modelUnavailable(tc.model).(*apicore.Error).Message {
				t.Fatalf("got %q, %v; want the one refusal", got, err)
			}
		})
	}
}

func TestCheckFits(t *testing.T) {
	defer func(f func() (int64, bool)) { memAvailable = f }(memAvailable)
	memAvailable = func() (int64, bool) { return 1 << 30, true }
	if err := checkFits("m", 512<<20); err != nil {
		t.Errorf("half the memory: %v", err)
	}
	var e *apicore.Error
	if err := checkFits("m", 2<<30); !errors.As(err, &e) || e.Status != 507 || !strings.Contains(e.Message, "2048 MiB") {
		t.Errorf("twice the memory: %v", err)
	}
	memAvailable = func() (int64, bool) { return 0, false }
	if err := checkFits("m", 2<<30); err != nil {
		t.Errorf("memory unknown: %v", err)
	}
}
