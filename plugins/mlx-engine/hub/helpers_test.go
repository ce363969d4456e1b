package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

// modelFiles is a small model repository as the hub holds it: the files Resolve fetches by default, and some it
// must leave alone. The weights are random bytes: the hub and the cache do not look inside.
func modelFiles(weightSize int) map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	weights := make([]byte, weightSize)
	for i := range weights {
		weights[i] = byte(rng.Uint32())
	}
	return map[string][]byte{
		"config.json":             []byte(`{"model_type": "llama", "hidden_size": 64}`),
		"tokenizer.json":          bytes.Repeat([]byte(`{"version": "1.0"}`), 200),
		"tokenizer_config.json":   []byte(`{"bos_token": "<s>"}`),
		"generation_config.json":  []byte(`{"eos_token_id": 2}`),
		"special_tokens_map.json": []byte(`{}`),
		"chat_template.jinja":     []byte(`{% for m in messages %}{{ m.content }}{% endfor %}`),
		"model.safetensors":       weights,
		// Not fetched by default:
		"README.md":                 []byte("# a model\n"),
		".gitattributes":            []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n"),
		"pytorch_model.bin":         []byte("pickled weights"),
		"original/consolidated.pth": []byte("original weights"),
		"consolidated.safetensors":  []byte("mistral-format weights"),
	}
}

// wanted are the files of modelFiles that Resolve fetches by default.
var wanted = []string{"chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
	"special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}

// fixture is a fake hub with one model repository and the options to reach it.
type fixture struct {
	srv    *hubtest.Server
	repo   *hubtest.Repo
	files  map[string][]byte
	commit string
	opts   hub.Options
	events *events
}

const repoID = "duet-test/tiny-llama"

func newFixture(t *testing.T, weightSize int) *fixture {
	t.Helper()
	f := &fixture{srv: hubtest.NewServer(t), files: modelFiles(weightSize), events: &events{}}
	f.repo = f.srv.AddRepo(repoID, hubtest.RepoOptions{})
	f.commit = f.repo.Commit(f.files)
	f.opts = hub.Options{
		Endpoint:         f.srv.URL,
		CacheDir:         t.TempDir(),
		Progress:         f.events,
		ProgressInterval: 5 * time.Millisecond,
		Backoff:          time.Millisecond,
		IdleTimeout:      5 * time.Second,
		Getenv:           env(t, nil),
	}
	return f
}

// resolve runs Resolve with the fixture's options and fails the test on error.
func (f *fixture) resolve(t *testing.T, ref string) string {
	t.Helper()
	dir, err := hub.Resolve(context.Background(), ref, f.opts)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", ref, err)
	}
	return dir
}

// env is a Getenv over vars, with HOME in a fresh temporary folder so no real token or cache is seen.
func env(t testing.TB, vars map[string]string) func(string) string {
	t.Helper()
	m := map[string]string{"HOME": t.TempDir()}
	maps.Copy(m, vars)
	return func(k string) string { return m[k] }
}

// checkFiles fails unless dir holds exactly names, with the contents files gives them.
func checkFiles(t *testing.T, dir string, files map[string][]byte, names []string) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, names) {
		t.Fatalf("snapshot has %v, want %v", got, names)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, files[n]) {
			t.Fatalf("%s: contents differ (%d bytes, want %d)", n, len(b), len(files[n]))
		}
	}
}

// sizeOf sums the sizes of the named files.
func sizeOf(files map[string][]byte, names ...string) int64 {
	var n int64
	for _, name := range names {
		n += int64(len(files[name]))
	}
	return n
}

// events records the events of one or more Resolve calls.
type events struct {
	mu  sync.Mutex
	all []hub.Event
}

func (e *events) Report(ev hub.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) list() []hub.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all)
}

func (e *events) reset() {
	e.mu.Lock()
	e.all = nil
	e.mu.Unlock()
}

func (e *events) of(kind hub.EventKind) []hub.Event {
	var out []hub.Event
	for _, ev := range e.list() {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// countRequests counts recorded requests by host and method.
func countRequests(srv *hubtest.Server) map[string]int {
	m := map[string]int{}
	for _, r := range srv.Requests() {
		m[fmt.Sprintf("%s %s", r.Host, r.Method)]++
	}
	return m
}
