package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Resolve returns the directory of the model ref names.
//
// An existing local directory is returned as is, without looking further. A path that does not exist (one
// starting with "/", ".", "~" or with more than one "/") is an error. Anything else is a hub reference,
// "org/name" or "org/name@revision" (a branch, tag or commit; default "main"): Resolve finds its commit, downloads
// the files Options.Include selects into the cache, and returns the snapshot folder,
// <CacheDir>/models--org--name/snapshots/<commit>.
//
// Online, a branch or tag costs one request to learn its current commit, and files already in the cache are
// not downloaded again; a full commit hash whose listing is cached costs none. If the hub cannot be reached,
// Resolve falls back to a complete cached snapshot of the revision and says so with an EventWarning. Offline
// (Options.Offline or HF_HUB_OFFLINE=1) it makes no request and fails with ErrNotCached, naming what is
// missing, if the cache cannot serve the revision.
//
// Errors are *Error values matching one of the Err* kinds with errors.Is.
func Resolve(ctx context.Context, ref string, opts Options) (string, error) {
	if st, err := os.Stat(ref); err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("hub: %s is a file; a model is a directory (config.json, *.safetensors, tokenizer.json)", ref)
		}
		return ref, nil
	}
	if looksLikePath(ref) {
		return "", fmt.Errorf("hub: local model directory %s does not exist", ref)
	}
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	return newDownloader(opts, r).resolve(ctx)
}

// downloader resolves one reference.
type downloader struct {
	s         settings
	ref       Ref
	cache     cache
	client    *http.Client
	track     *tracker
	freeSpace func(dir string) (uint64, bool)
}

func newDownloader(opts Options, r Ref) *downloader {
	s := opts.settle()
	return &downloader{
		s:         s,
		ref:       r,
		cache:     newCache(s.CacheDir, r),
		client:    newClient(s),
		track:     newTracker(s.Progress, r),
		freeSpace: freeSpace,
	}
}

func (d *downloader) resolve(ctx context.Context) (dir string, err error) {
	cached := 0
	defer func() { d.track.emit(Event{Kind: EventDone, Dir: dir, Err: err, Cached: cached}) }()
	if d.s.Offline {
		dir, cached, err = d.fromCache(nil)
		return dir, err
	}
	commit, files, complete, err := d.plan(ctx)
	if errors.Is(err, ErrUnreachable) {
		dir, n, cerr := d.fromCache(err)
		if cerr != nil {
			return "", cerr
		}
		cached = n
		d.track.emit(Event{Kind: EventWarning, Message: fmt.Sprintf(
			"hub unreachable (%v); using the cached snapshot %s (set HF_HUB_OFFLINE=1 to skip the hub)", rootCause(err), filepath.Base(dir))})
		return dir, nil
	}
	if err != nil {
		return "", err
	}
	d.track.setCommit(commit)
	return d.fetchAll(ctx, commit, files, complete, &cached)
}

// plan finds the commit and its files: from the cached listing when the revision is a full commit hash,
// otherwise from the hub.
func (d *downloader) plan(ctx context.Context) (commit string, files []remoteFile, complete bool, err error) {
	if commitHash.MatchString(d.ref.Revision) {
		if files, ok := d.cache.readTree(d.ref.Revision); ok {
			return d.ref.Revision, files, true, nil
		}
	}
	return d.listing(ctx)
}

// fetchAll downloads the selected files of commit that the cache lacks, Concurrency at a time, links them into
// the snapshot and records the listing and the ref. complete says every file of the listing has its metadata.
func (d *downloader) fetchAll(ctx context.Context, commit string, files []remoteFile, complete bool, cached *int) (string, error) {
	sel := selectFiles(files, d.s.Include, d.s.Exclude)
	if d.s.defaultFiles {
		if detail, ok := checkModel(sel, files); !ok {
			return "", &Error{Ref: d.ref, Kind: ErrNoModel, Detail: detail,
				Hint: "Look for a safetensors or MLX conversion of the model (e.g. under https://huggingface.co/mlx-community)"}
		}
	}
	if err := d.headFiles(ctx, commit, sel); err != nil {
		return "", err
	}

	var jobs []*job
	byEtag := map[string]*job{}
	var need int64
	for _, f := range sel {
		if d.cache.pointerSize(commit, f.Path) == f.Size {
			*cached++
			continue
		}
		if d.cache.blobSize(f.Etag) == f.Size {
			if err := d.cache.link(commit, f.Path, f.Etag); err != nil {
				return "", d.local(f.Path, "cannot link the snapshot", err)
			}
			*cached++
			continue
		}
		if j := byEtag[f.Etag]; j != nil {
			j.also = append(j.also, f.Path)
			continue
		}
		j := &job{remoteFile: f}
		if st, err := os.Stat(d.cache.blob(f.Etag) + ".incomplete"); err == nil && st.Size() <= f.Size {
			j.counted = st.Size()
		}
		need += f.Size - j.counted
		byEtag[f.Etag] = j
		jobs = append(jobs, j)
	}

	snapshot := d.cache.snapshot(commit)
	if len(jobs) > 0 {
		if err := os.MkdirAll(filepath.Join(d.cache.dir, "blobs"), 0o755); err != nil {
			return "", d.local("", "cannot create the cache", err)
		}
		if free, ok := d.freeSpace(filepath.Join(d.cache.dir, "blobs")); ok && free < uint64(need) {
			return "", &Error{Ref: d.ref, Kind: ErrDiskFull, Detail: fmt.Sprintf("%s to download, %s free in %s",
				formatBytes(need), formatBytes(int64(free)), d.s.CacheDir),
				Hint: "Free some space or point HF_HUB_CACHE at a larger disk"}
		}
		tagCacheDir(d.s.CacheDir)
		var total, onDisk int64
		for _, j := range jobs {
			total += j.Size
			onDisk += j.counted
		}
		d.track.start(len(jobs), *cached, total, onDisk, d.s.ProgressInterval)
		err := d.runJobs(ctx, commit, jobs)
		d.track.finish()
		if err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(snapshot, 0o755); err != nil {
		return "", d.local("", "cannot create the snapshot", err)
	}
	// The listing and the ref only serve later offline runs: failing to write them (a read-only shared cache
	// that already has everything) is worth a warning, not a failure.
	if _, err := os.Stat(d.cache.treePath(commit)); complete && err != nil {
		if err := d.cache.writeTree(commit, files); err != nil {
			d.track.emit(Event{Kind: EventWarning, Message: "cannot write the tree listing: " + err.Error()})
		}
	}
	if err := d.cache.writeRef(d.ref.Revision, commit); err != nil {
		d.track.emit(Event{Kind: EventWarning, Message: "cannot record refs/" + d.ref.Revision + ": " + err.Error()})
	}
	return snapshot, nil
}

// runJobs downloads the jobs on Concurrency workers. The first failure cancels the others and is returned.
func (d *downloader) runJobs(ctx context.Context, commit string, jobs []*job) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *job)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for range min(d.s.Concurrency, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if err := d.fetch(ctx, commit, j); err != nil {
					fail(err)
					continue
				}
				linked := true
				for _, p := range append([]string{j.Path}, j.also...) {
					if err := d.cache.link(commit, p, j.Etag); err != nil {
						fail(d.local(p, "cannot link the snapshot", err))
						linked = false
					}
				}
				if linked {
					d.track.emit(Event{Kind: EventFileDone, File: j.Path})
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err() // the caller's context ended before every job was handed out
}

// fromCache serves the revision from the cache alone: its commit from refs/ (or the hash itself), its snapshot
// folder, and every file the cached listing (or, without one, a model's essential files) says it has.
// cause is why the hub is not asked: nil in offline mode, the ErrUnreachable error otherwise.
func (d *downloader) fromCache(cause error) (string, int, error) {
	fail := func(what string) (string, int, error) {
		return "", 0, d.notCached(cause, what)
	}
	commit, ok := d.cache.resolveCommit(d.ref.Revision)
	if !ok {
		return fail(fmt.Sprintf("no commit is recorded for revision %q", d.ref.Revision))
	}
	dir := d.cache.snapshot(commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fail("commit " + commit + " has no snapshot")
	}
	var missing []string
	n := 0
	if files, ok := d.cache.readTree(commit); ok {
		for _, f := range selectFiles(files, d.s.Include, d.s.Exclude) {
			if d.cache.pointerSize(commit, f.Path) != f.Size {
				missing = append(missing, f.Path)
			} else {
				n++
			}
		}
	} else if d.s.defaultFiles {
		missing = missingModelFiles(dir)
	}
	if len(missing) > 0 {
		list := missing
		if len(list) > 8 {
			list = append(list[:8:8], fmt.Sprintf("and %d more", len(missing)-8))
		}
		return fail(fmt.Sprintf("snapshot %s lacks %d file(s): %s", commit, len(missing), strings.Join(list, ", ")))
	}
	return dir, n, nil
}

// notCached explains why the cache cannot serve the revision, offline (cause nil) or with the hub unreachable.
func (d *downloader) notCached(cause error, what string) error {
	if cause == nil {
		return &Error{Ref: d.ref, Kind: ErrNotCached, Detail: "offline mode (HF_HUB_OFFLINE or Options.Offline): " + what,
			Hint: "Download it once with network access; " + d.cache.describe()}
	}
	e := &Error{Ref: d.ref, Kind: ErrUnreachable, Err: cause, Detail: "the cache cannot stand in: " + what}
	var he *Error
	if errors.As(cause, &he) {
		e.Detail = he.Detail + "; the cache cannot stand in: " + what
		e.Err = he.Err
		e.File = he.File
	}
	if snaps := d.cache.snapshots(); len(snaps) > 0 {
		e.Hint = "Check the connection, or use a cached commit offline: HF_HUB_OFFLINE=1 with " + d.ref.Repo +
			"@<commit>; " + d.cache.describe()
	} else {
		e.Hint = "Check the connection and HF_ENDPOINT (" + d.s.Endpoint + "); " + d.cache.describe()
	}
	return e
}

// rootCause is the error under an *Error, for messages that already say which repository it is about.
func rootCause(err error) error {
	var he *Error
	if errors.As(err, &he) && he.Err != nil {
		return he.Err
	}
	return err
}
