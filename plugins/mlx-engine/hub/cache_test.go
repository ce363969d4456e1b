package hub_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

// TestCacheLayout checks the cache against huggingface_hub's layout, file by file.
func TestCacheLayout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 256<<10)
	f.repo.SetRef("v1", f.commit)
	f.resolve(t, repoID+"@v1")
	repoDir := filepath.Join(f.opts.CacheDir, "models--duet-test--tiny-llama")

	for _, name := range wanted {
		ptr := filepath.Join(repoDir, "snapshots", f.commit, name)
		target, err := os.Readlink(ptr)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", name, err)
		}
		etag := hubtest.GitBlobID(f.files[name])
		if name == weights {
			etag = hubtest.SHA256(f.files[name])
		}
		if want := "../../blobs/" + etag; target != want {
			t.Errorf("%s -> %s, want %s", name, target, want)
		}
	}
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "v1"))
	if err != nil || string(ref) != f.commit {
		t.Errorf("refs/v1 = %q, %v; want the commit without newline", ref, err)
	}
	if _, err := os.Stat(filepath.Join(repoDir, "refs", "main")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refs/main written for a download of v1")
	}
	tree, err := os.ReadFile(filepath.Join(repoDir, "trees", f.commit+".json"))
	if err != nil || !strings.Contains(string(tree), `"format_version": 1`) ||
		!strings.Contains(string(tree), `"lfs_sha256": "`+hubtest.SHA256(f.files[weights])+`"`) ||
		!strings.Contains(string(tree), `"README.md"`) {
		t.Errorf("trees/%s.json = %s, %v; want the full listing in format 1", f.commit, tree, err)
	}
	if _, err := os.Stat(filepath.Join(f.opts.CacheDir, ".locks", "models--duet-test--tiny-llama", hubtest.SHA256(f.files[weights])+".lock")); err != nil {
		t.Errorf("no lock file where huggingface_hub keeps it: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.opts.CacheDir, "CACHEDIR.TAG")); err != nil || !strings.HasPrefix(string(b), "Signature: 8a477f597d28d172789f06886806bc55") {
		t.Errorf("CACHEDIR.TAG = %q, %v", b, err)
	}
	ents, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".") {
			t.Errorf("leftover %s in blobs/", e.Name())
		}
	}
}

// writeHFCache lays out a repository the way huggingface_hub's snapshot_download leaves it, before it kept tree
// listings: blobs named by etag, relative symlinks, refs/main. skip names files left out.
func writeHFCache(t *testing.T, cacheDir, commit string, files map[string][]byte, names []string, skip ...string) {
	t.Helper()
	repoDir := filepath.Join(cacheDir, "models--duet-test--tiny-llama")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(repoDir, "blobs"), 0o755))
	must(os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755))
	must(os.MkdirAll(filepath.Join(repoDir, "snapshots", commit), 0o755))
	must(os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(commit), 0o644))
	for _, name := range names {
		if strings.Contains(strings.Join(skip, "\x00"), name) {
			continue
		}
		etag := hubtest.GitBlobID(files[name])
		if strings.HasSuffix(name, ".safetensors") {
			etag = hubtest.SHA256(files[name])
		}
		must(os.WriteFile(filepath.Join(repoDir, "blobs", etag), files[name], 0o644))
		must(os.Symlink("../../blobs/"+etag, filepath.Join(repoDir, "snapshots", commit, name)))
	}
}

func TestFindsModelsHuggingfaceHubDownloaded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 256<<10)
	writeHFCache(t, f.opts.CacheDir, f.commit, f.files, wanted)
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)
	if got := countRequests(f.srv); len(got) != 1 || got["hub GET"] != 1 {
		t.Errorf("requests %v, want only the listing", got)
	}

	offline := f.opts
	offline.CacheDir = t.TempDir()
	offline.Offline = true
	writeHFCache(t, offline.CacheDir, f.commit, f.files, wanted)
	if dir, err := hub.Resolve(context.Background(), repoID, offline); err != nil || filepath.Base(dir) != f.commit {
		t.Fatalf("offline Resolve of a huggingface_hub cache = %q, %v", dir, err)
	}
}

func TestOffline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 128<<10)
	online := f.resolve(t, repoID)
	f.srv.ResetRequests()
	offline := f.opts
	offline.Getenv = env(t, map[string]string{"HF_HUB_OFFLINE": "1"})

	t.Run("hit", func(t *testing.T) {
		for _, ref := range []string{repoID, repoID + "@main", repoID + "@" + f.commit, repoID + "@" + f.commit[:8]} {
			dir, err := hub.Resolve(context.Background(), ref, offline)
			if err != nil || dir != online {
				t.Errorf("offline Resolve(%q) = %q, %v; want %q", ref, dir, err, online)
			}
		}
		if n := len(f.srv.Requests()); n != 0 {
			t.Errorf("offline mode made %d requests", n)
		}
	})
	t.Run("unknown revision", func(t *testing.T) {
		_, err := hub.Resolve(context.Background(), repoID+"@dev", offline)
		if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), `revision "dev"`) ||
			!strings.Contains(err.Error(), f.commit[:12]+" (main)") {
			t.Fatalf("err = %v, want ErrNotCached naming the revision and the cached snapshots", err)
		}
	})
	t.Run("unknown repo", func(t *testing.T) {
		_, err := hub.Resolve(context.Background(), "org/other", offline)
		if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "no snapshot") {
			t.Fatalf("err = %v, want ErrNotCached", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		g := newFixture(t, 128<<10)
		g.resolve(t, repoID)
		if err := os.Remove(filepath.Join(g.opts.CacheDir, "models--duet-test--tiny-llama", "blobs", hubtest.GitBlobID(g.files["tokenizer.json"]))); err != nil {
			t.Fatal(err)
		}
		g.opts.Offline = true
		_, err := hub.Resolve(context.Background(), repoID, g.opts)
		if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "lacks 1 file(s): tokenizer.json") {
			t.Fatalf("err = %v, want ErrNotCached naming tokenizer.json", err)
		}
	})
	t.Run("missing shard without tree listing", func(t *testing.T) {
		opts := offline
		opts.CacheDir = t.TempDir()
		files := map[string][]byte{
			"config.json": []byte("{}"), "tokenizer.json": []byte(`{"a":1}`),
			"model.safetensors.index.json":     []byte(`{"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}`),
			"model-00001-of-00002.safetensors": []byte("one"), "model-00002-of-00002.safetensors": []byte("two"),
		}
		names := []string{"config.json", "tokenizer.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
		writeHFCache(t, opts.CacheDir, f.commit, files, names, "model-00002-of-00002.safetensors")
		_, err := hub.Resolve(context.Background(), repoID, opts)
		if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
			t.Fatalf("err = %v, want ErrNotCached naming the missing shard", err)
		}
	})
}

// closedEndpoint is a loopback URL nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestUnreachableHub(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 64<<10)
	online := f.resolve(t, repoID)
	f.opts.Endpoint = closedEndpoint(t)
	f.opts.Retries = 1

	t.Run("falls back to the cache", func(t *testing.T) {
		f.events.reset()
		dir, err := hub.Resolve(context.Background(), repoID, f.opts)
		if err != nil || dir != online {
			t.Fatalf("Resolve = %q, %v; want the cached snapshot %q", dir, err, online)
		}
		w := f.events.of(hub.EventWarning)
		if len(w) != 1 || !strings.Contains(w[0].Message, "HF_HUB_OFFLINE=1") || !strings.Contains(w[0].Message, f.commit) {
			t.Errorf("warnings %+v, want one about the fallback", w)
		}
	})
	t.Run("nothing cached", func(t *testing.T) {
		_, err := hub.Resolve(context.Background(), "org/other", f.opts)
		if !errors.Is(err, hub.ErrUnreachable) || !strings.Contains(err.Error(), "HF_ENDPOINT") {
			t.Fatalf("err = %v, want ErrUnreachable", err)
		}
	})
	t.Run("other revision cached", func(t *testing.T) {
		_, err := hub.Resolve(context.Background(), repoID+"@dev", f.opts)
		if !errors.Is(err, hub.ErrUnreachable) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE=1") ||
			!strings.Contains(err.Error(), f.commit[:12]) {
			t.Fatalf("err = %v, want ErrUnreachable suggesting the cached commit offline", err)
		}
	})
}

func TestAuthAndMissingRepos(t *testing.T) {
	t.Parallel()
	srv := hubtest.NewServer(t)
	files := modelFiles(64 << 10)
	srv.AddRepo("org/gated", hubtest.RepoOptions{Gated: true, Tokens: []string{"hf_good"}}).Commit(files)
	srv.AddRepo("org/private", hubtest.RepoOptions{Private: true, Tokens: []string{"hf_good"}}).Commit(files)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "token"), []byte("hf_good\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, repo string
		env        map[string]string
		kind       error
		status     int
		say        string
	}{
		{"gated without token", "org/gated", nil, hub.ErrAuth, 401, "set HF_TOKEN"},
		{"gated with wrong token", "org/gated", map[string]string{"HF_TOKEN": "hf_bad"}, hub.ErrAuth, 403, "accept its terms"},
		{"gated with token", "org/gated", map[string]string{"HF_TOKEN": "hf_good"}, nil, 0, ""},
		{"gated with token file", "org/gated", map[string]string{"HF_HOME": home}, nil, 0, ""},
		{"private without token", "org/private", nil, hub.ErrRepoNotFound, 401, "set HF_TOKEN"},
		{"private with token", "org/private", map[string]string{"HF_TOKEN": "hf_good"}, nil, 0, ""},
		{"missing", "org/missing", nil, hub.ErrRepoNotFound, 404, "Check the name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := hub.Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Progress: hub.Discard, Getenv: env(t, tt.env)}
			dir, err := hub.Resolve(context.Background(), tt.repo, opts)
			if tt.kind == nil {
				if err != nil {
					t.Fatal(err)
				}
				checkFiles(t, dir, files, wanted)
				return
			}
			var he *hub.Error
			if !errors.Is(err, tt.kind) || !errors.As(err, &he) || he.Status != tt.status || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("err = %v, want %v with HTTP %d saying %q", err, tt.kind, tt.status, tt.say)
			}
		})
	}
	for _, r := range srv.Requests() {
		if r.Host == "storage" && r.Auth != "" {
			t.Errorf("the token reached the storage host: %+v", r)
		}
	}
}

// TestConcurrentResolve runs several Resolve calls for one repository into one cache at once: each blob is
// written once, under its lock, and every caller gets the complete snapshot.
func TestConcurrentResolve(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2<<20)
	f.opts.Progress = hub.Discard
	const n = 4
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dirs[i], errs[i] = hub.Resolve(context.Background(), repoID, f.opts) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Resolve %d: %v", i, errs[i])
		}
		checkFiles(t, dirs[i], f.files, wanted)
	}
	if got, want := f.srv.BytesServed(), sizeOf(f.files, wanted...); got != want {
		t.Errorf("served %d bytes for %d concurrent calls, want %d (each blob once)", got, n, want)
	}
}
