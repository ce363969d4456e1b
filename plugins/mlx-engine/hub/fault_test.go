package hub_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

const weights = "model.safetensors"

// onFile returns a fault function that applies fault to the nth GET of file (n == 0: every GET).
func onFile(file string, n int, fault hubtest.Fault) func(hubtest.FileRequest) hubtest.Fault {
	return func(r hubtest.FileRequest) hubtest.Fault {
		if r.File == file && (n == 0 || r.N == n) {
			return fault
		}
		return hubtest.Fault{}
	}
}

func TestResolveResumesDroppedConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2<<20)
	const cut = 700_000
	f.srv.SetFault(onFile(weights, 1, hubtest.Fault{Drop: true, DropAfter: cut}))
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)

	// Every byte crossed the wire once: the retry asked for the rest only.
	if got, want := f.srv.BytesServed(), sizeOf(f.files, wanted...); got != want {
		t.Errorf("served %d bytes, want %d", got, want)
	}
	var ranges []string
	for _, r := range f.srv.Requests() {
		if r.Host == "storage" {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{"", fmt.Sprintf("bytes=%d-", cut)}; strings.Join(ranges, "|") != strings.Join(want, "|") {
		t.Errorf("storage requests had ranges %q, want %q", ranges, want)
	}
	if r := f.events.of(hub.EventRetry); len(r) != 1 || r[0].File != weights {
		t.Errorf("retry events %+v, want one for %s", r, weights)
	}
}

func TestResolveResumesAcrossRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2<<20)
	const cut = 1_000_000
	f.srv.SetFault(onFile(weights, 0, hubtest.Fault{Drop: true, DropAfter: cut}))
	opts := f.opts
	opts.Retries = -1
	opts.Include = []string{weights} // only the weights, so the next run's count is exact
	_, err := hub.Resolve(context.Background(), repoID, opts)
	if !errors.Is(err, hub.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	partial := filepath.Join(opts.CacheDir, "models--duet-test--tiny-llama", "blobs", hubtest.SHA256(f.files[weights])+".incomplete")
	if st, err := os.Stat(partial); err != nil || st.Size() != cut {
		t.Fatalf("partial download: %v, %v; want %d bytes kept", st, err, cut)
	}

	// The next run, a new process as far as Resolve knows, fetches the rest only.
	f.srv.SetFault(nil)
	f.srv.ResetRequests()
	f.events.reset()
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)
	if got, want := f.srv.BytesServed(), sizeOf(f.files, wanted...)-cut; got != want {
		t.Errorf("second run served %d bytes, want %d", got, want)
	}
	start := f.events.of(hub.EventStart)
	if len(start) != 1 || start[0].Bytes != cut || start[0].Files != len(wanted) {
		t.Errorf("Start = %+v, want %d files with %d bytes already there", start, len(wanted), cut)
	}
}

func TestResolveServerIgnoresRange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	f.srv.SetFault(func(r hubtest.FileRequest) hubtest.Fault {
		switch {
		case r.File != weights:
			return hubtest.Fault{}
		case r.N == 1:
			return hubtest.Fault{Drop: true, DropAfter: 300_000}
		default:
			return hubtest.Fault{IgnoreRange: true}
		}
	})
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)
	if got, want := f.srv.BytesServed(), sizeOf(f.files, wanted...)+300_000; got != want {
		t.Errorf("served %d bytes, want %d (the whole file again)", got, want)
	}
	done := f.events.of(hub.EventDone)
	if done[0].Bytes != done[0].Total {
		t.Errorf("Done counts %d of %d bytes", done[0].Bytes, done[0].Total)
	}
}

func TestResolveDetectsCorruption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file string
		n          int // 0: every GET
		wantErr    bool
	}{
		{"LFS file once", weights, 1, false},
		{"LFS file always", weights, 0, true},
		{"git blob always", "tokenizer.json", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1<<20)
			f.srv.SetFault(onFile(tt.file, tt.n, hubtest.Fault{Corrupt: true}))
			dir, err := hub.Resolve(context.Background(), repoID, f.opts)
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				checkFiles(t, dir, f.files, wanted)
				if w := f.events.of(hub.EventWarning); len(w) != 1 || !strings.Contains(w[0].Message, "integrity") {
					t.Errorf("warnings %+v, want one about the integrity check", w)
				}
				return
			}
			if !errors.Is(err, hub.ErrIntegrity) || !strings.Contains(err.Error(), tt.file) {
				t.Fatalf("err = %v, want ErrIntegrity naming %s", err, tt.file)
			}
			repoDir := filepath.Join(f.opts.CacheDir, "models--duet-test--tiny-llama")
			etag := hubtest.GitBlobID(f.files[tt.file])
			if tt.file == weights {
				etag = hubtest.SHA256(f.files[tt.file])
			}
			for _, p := range []string{
				filepath.Join(repoDir, "blobs", etag),
				filepath.Join(repoDir, "blobs", etag+".incomplete"),
				filepath.Join(repoDir, "snapshots", f.commit, tt.file),
				filepath.Join(repoDir, "refs", "main"),
			} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after a failed integrity check", p)
				}
			}
		})
	}
}

func TestResolveRetriesStalledTransfer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	f.opts.IdleTimeout = 150 * time.Millisecond
	f.srv.SetFault(onFile(weights, 1, hubtest.Fault{Stall: true, StallAfter: 100_000}))
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)
	r := f.events.of(hub.EventRetry)
	if len(r) != 1 || !strings.Contains(r[0].Err.Error(), "stalled") {
		t.Fatalf("retries %+v, want one for a stall", r)
	}
	if got, want := f.srv.BytesServed(), sizeOf(f.files, wanted...); got != want {
		t.Errorf("served %d bytes, want %d (resumed after the stall)", got, want)
	}
}

func TestResolveRetriesServerErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 64<<10)
	f.srv.SetFault(func(r hubtest.FileRequest) hubtest.Fault {
		if r.N <= 2 {
			return hubtest.Fault{Status: 503}
		}
		return hubtest.Fault{}
	})
	dir := f.resolve(t, repoID)
	checkFiles(t, dir, f.files, wanted)
	if n := len(f.events.of(hub.EventRetry)); n != 2*len(wanted) {
		t.Errorf("%d retries, want %d", n, 2*len(wanted))
	}

	g := newFixture(t, 64<<10)
	g.opts.Retries = 2
	g.srv.SetFault(onFile(weights, 0, hubtest.Fault{Status: 500}))
	_, err := hub.Resolve(context.Background(), repoID, g.opts)
	if !errors.Is(err, hub.ErrUnreachable) || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err = %v, want ErrUnreachable after HTTP 500s", err)
	}
	if n := len(g.events.of(hub.EventRetry)); n != 2 {
		t.Errorf("%d retries, want 2", n)
	}
}

func TestResolveCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1<<20)
	f.srv.SetFault(onFile(weights, 0, hubtest.Fault{Stall: true, StallAfter: 1000}))
	ctx, cancel := context.WithCancel(context.Background())
	f.opts.Progress = hub.ProgressFunc(func(e hub.Event) {
		if e.Kind == hub.EventProgress && e.Bytes > 0 {
			cancel()
		}
	})
	_, err := hub.Resolve(ctx, repoID, f.opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestResolveDiskFull(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("needs /dev/full")
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	f := newFixture(t, 64<<10)
	// Make the partial download of the weights a file system that is always full.
	blobs := filepath.Join(f.opts.CacheDir, "models--duet-test--tiny-llama", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", filepath.Join(blobs, hubtest.SHA256(f.files[weights])+".incomplete")); err != nil {
		t.Fatal(err)
	}
	_, err := hub.Resolve(context.Background(), repoID, f.opts)
	if !errors.Is(err, hub.ErrDiskFull) || !strings.Contains(err.Error(), "HF_HUB_CACHE") {
		t.Fatalf("err = %v, want ErrDiskFull with advice", err)
	}
	if n := len(f.events.of(hub.EventRetry)); n != 0 {
		t.Errorf("%d retries of a full disk, want none", n)
	}
}
