package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

func TestResolveFreshDownload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3<<20)
	dir := f.resolve(t, repoID)

	repoDir := filepath.Join(f.opts.CacheDir, "models--duet-test--tiny-llama")
	if want := filepath.Join(repoDir, "snapshots", f.commit); dir != want {
		t.Fatalf("dir = %s, want %s", dir, want)
	}
	checkFiles(t, dir, f.files, wanted)
	if got := f.srv.BytesServed(); got != sizeOf(f.files, wanted...) {
		t.Errorf("served %d bytes, want %d", got, sizeOf(f.files, wanted...))
	}
	for _, r := range f.srv.Requests() {
		if r.Host == "storage" && r.Auth != "" {
			t.Errorf("storage host got an Authorization header: %+v", r)
		}
	}

	evs := f.events.list()
	if evs[0].Kind != hub.EventStart || evs[0].Files != len(wanted) || evs[0].Total != sizeOf(f.files, wanted...) {
		t.Errorf("first event = %+v, want Start of %d files", evs[0], len(wanted))
	}
	last := evs[len(evs)-1]
	if last.Kind != hub.EventDone || last.Dir != dir || last.Err != nil || last.Bytes != last.Total || last.Commit != f.commit {
		t.Errorf("last event = %+v, want Done", last)
	}
	if n := len(f.events.of(hub.EventFileDone)); n != len(wanted) {
		t.Errorf("%d FileDone events, want %d", n, len(wanted))
	}
	for _, ev := range f.events.of(hub.EventProgress) {
		if ev.Bytes > ev.Total || ev.Bytes < 0 {
			t.Errorf("progress %d of %d", ev.Bytes, ev.Total)
		}
	}
}

func TestResolveUsesCache(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	first := f.resolve(t, repoID)
	f.srv.ResetRequests()
	f.events.reset()

	// A branch costs one listing request to learn its commit; no file is fetched again.
	if dir := f.resolve(t, repoID); dir != first {
		t.Fatalf("second Resolve = %s, want %s", dir, first)
	}
	got := countRequests(f.srv)
	if len(got) != 1 || got["hub GET"] != 1 || f.srv.BytesServed() != 0 {
		t.Errorf("second Resolve made requests %v and got %d bytes; want only the listing", got, f.srv.BytesServed())
	}
	if evs := f.events.list(); len(evs) != 1 || evs[0].Kind != hub.EventDone || evs[0].Cached != len(wanted) {
		t.Errorf("events %+v, want a single Done with %d cached", evs, len(wanted))
	}

	// A full commit hash with its listing cached costs nothing at all.
	f.srv.ResetRequests()
	if dir := f.resolve(t, repoID+"@"+f.commit); dir != first {
		t.Fatalf("Resolve by commit = %s, want %s", dir, first)
	}
	if n := len(f.srv.Requests()); n != 0 {
		t.Errorf("Resolve by cached commit made %d requests, want 0", n)
	}
}

func TestResolveNewCommitFetchesOnlyChangedFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	f.resolve(t, repoID)
	f.files["config.json"] = []byte(`{"model_type": "llama", "hidden_size": 128}`)
	commit := f.repo.Commit(f.files)
	f.srv.ResetRequests()

	dir := f.resolve(t, repoID)
	if filepath.Base(dir) != commit {
		t.Fatalf("dir %s is not the new commit %s", dir, commit)
	}
	checkFiles(t, dir, f.files, wanted)
	if got, want := f.srv.BytesServed(), sizeOf(f.files, "config.json"); got != want {
		t.Errorf("served %d bytes, want %d (config.json only)", got, want)
	}
}

func TestResolveRevisions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 64<<10)
	v1 := f.commit
	f.repo.SetRef("v1.0", v1)
	v2files := modelFiles(64 << 10)
	v2files["config.json"] = []byte(`{"model_type": "qwen2"}`)
	v2 := f.repo.Commit(v2files)
	devFiles := modelFiles(64 << 10)
	devFiles["config.json"] = []byte(`{"model_type": "qwen3"}`)
	dev := f.repo.CommitTo("dev", devFiles)

	tests := []struct {
		name, rev, commit string
		files             map[string][]byte
	}{
		{"default branch", "", v2, v2files},
		{"branch", "@main", v2, v2files},
		{"other branch", "@dev", dev, devFiles},
		{"tag", "@v1.0", v1, f.files},
		{"commit", "@" + v1, v1, f.files},
		{"short commit", "@" + v1[:10], v1, f.files},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := f.resolve(t, repoID+tt.rev)
			if filepath.Base(dir) != tt.commit {
				t.Fatalf("resolved to %s, want commit %s", filepath.Base(dir), tt.commit)
			}
			checkFiles(t, dir, tt.files, wanted)
		})
	}
	ref, err := os.ReadFile(filepath.Join(f.opts.CacheDir, "models--duet-test--tiny-llama", "refs", "v1.0"))
	if err != nil || string(ref) != v1 {
		t.Errorf("refs/v1.0 = %q, %v; want %q", ref, err, v1)
	}

	_, err = hub.Resolve(context.Background(), repoID+"@nope", f.opts)
	if !errors.Is(err, hub.ErrRevisionNotFound) {
		t.Fatalf("unknown revision: err = %v, want ErrRevisionNotFound", err)
	}
	if !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("error %q does not name the revision", err)
	}
}

func TestResolveShardedModel(t *testing.T) {
	t.Parallel()
	srv := hubtest.NewServer(t)
	files := map[string][]byte{
		"config.json":                      []byte(`{}`),
		"tokenizer.json":                   []byte(`{}`),
		"model-00001-of-00002.safetensors": []byte(strings.Repeat("a", 5000)),
		"model-00002-of-00002.safetensors": []byte(strings.Repeat("b", 7000)),
		"model.safetensors.index.json":     []byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`),
		"onnx/model.safetensors":           []byte("elsewhere"),
		"original/params.json":             []byte(`{}`),
		"consolidated-00001.safetensors":   []byte("mistral"),
		"same-as-first-shard.safetensors":  []byte(strings.Repeat("a", 5000)),
	}
	srv.AddRepo("org/sharded", hubtest.RepoOptions{}).Commit(files)
	opts := hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Progress: hub.Discard, Getenv: env(t, nil)}
	dir, err := hub.Resolve(context.Background(), "org/sharded", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, files, []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
		"model.safetensors.index.json", "same-as-first-shard.safetensors", "tokenizer.json"})
	// Files with the same contents (the two "{}" and the two 5000-byte files) share one blob and one download.
	if got, want := srv.BytesServed(), int64(2+5000+7000+len(files["model.safetensors.index.json"])); got != want {
		t.Errorf("served %d bytes, want %d", got, want)
	}
}

func TestResolveLocalDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := hub.Resolve(context.Background(), dir, hub.Options{Progress: hub.Discard, Endpoint: "http://127.0.0.1:1"})
	if err != nil || got != dir {
		t.Fatalf("Resolve(local dir) = %q, %v; want %q", got, err, dir)
	}
	tests := []struct{ name, ref, want string }{
		{"file", file, "is a file"},
		{"missing absolute", filepath.Join(dir, "nope"), "does not exist"},
		{"missing relative", "./nope", "does not exist"},
		{"missing nested", "models/org/name", "does not exist"},
		{"bad repo id", "org/na me", "only letters"},
		{"empty revision", "org/name@", "empty revision"},
		{"dotdot revision", "org/name@a/../b", "segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := hub.Resolve(context.Background(), tt.ref, hub.Options{Progress: hub.Discard, Endpoint: "http://127.0.0.1:1"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Resolve(%q) err = %v, want it to say %q", tt.ref, err, tt.want)
			}
		})
	}
}

func TestResolveNoLoadableModel(t *testing.T) {
	t.Parallel()
	srv := hubtest.NewServer(t)
	srv.AddRepo("org/pytorch-only", hubtest.RepoOptions{}).Commit(map[string][]byte{
		"config.json": []byte(`{}`), "pytorch_model.bin": []byte("pickle"),
	})
	srv.AddRepo("org/no-config", hubtest.RepoOptions{}).Commit(map[string][]byte{
		"model.safetensors": []byte("w"),
	})
	opts := hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Progress: hub.Discard, Getenv: env(t, nil)}
	for repo, want := range map[string]string{"org/pytorch-only": "pytorch_model.bin", "org/no-config": "config.json"} {
		_, err := hub.Resolve(context.Background(), repo, opts)
		if !errors.Is(err, hub.ErrNoModel) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrNoModel naming %s", repo, err, want)
		}
	}
	// With explicit patterns the caller decides what a download is.
	opts.Include = []string{"*.json"}
	dir, err := hub.Resolve(context.Background(), "org/pytorch-only", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, map[string][]byte{"config.json": []byte(`{}`)}, []string{"config.json"})
}

func TestResolveWithoutBlobMetadata(t *testing.T) {
	t.Parallel()
	srv := hubtest.NewServer(t)
	files := modelFiles(200 << 10)
	srv.AddRepo(repoID, hubtest.RepoOptions{OmitBlobs: true}).Commit(files)
	opts := hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Progress: hub.Discard, Getenv: env(t, nil)}
	dir, err := hub.Resolve(context.Background(), repoID, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, files, wanted)
	if got := countRequests(srv)["hub HEAD"]; got != len(wanted) {
		t.Errorf("%d HEAD requests, want one per file (%d)", got, len(wanted))
	}
	blob := filepath.Join(opts.CacheDir, "models--duet-test--tiny-llama", "blobs", hubtest.SHA256(files["model.safetensors"]))
	if _, err := os.Stat(blob); err != nil {
		t.Errorf("LFS blob not named by its X-Linked-Etag: %v", err)
	}
}
