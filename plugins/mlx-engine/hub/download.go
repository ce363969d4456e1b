package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// copyBuffer is the size of the buffer each download reads into.
const copyBuffer = 256 << 10

// job is one blob to download, for one or more files of the snapshot with the same contents.
type job struct {
	remoteFile
	also    []string // other paths with the same etag
	counted int64    // bytes of this blob counted in the tracker's Bytes
}

// account sets the bytes of j the tracker counts as on disk.
func (d *downloader) account(j *job, onDisk int64) {
	d.track.bytes.Add(onDisk - j.counted)
	j.counted = onDisk
}

// fetch makes blobs/<etag> hold the verified contents of j: under the blob's lock it downloads what is
// missing into blobs/<etag>.incomplete, verifies it and renames it into place. A file that fails its integrity
// check is deleted and downloaded once more from scratch.
func (d *downloader) fetch(ctx context.Context, commit string, j *job) error {
	unlock, err := lockFile(ctx, d.cache.lockFile(j.Etag), func(waited time.Duration) {
		d.track.emit(Event{Kind: EventWarning, File: j.Path, Message: fmt.Sprintf(
			"%s: waiting %s for another download of the same file to finish", j.Path, waited.Round(time.Second))})
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return d.local(j.Path, "cannot lock "+d.cache.lockFile(j.Etag), err)
	}
	defer unlock()
	if d.cache.blobSize(j.Etag) == j.Size {
		d.account(j, j.Size) // another process or goroutine fetched it while we waited
		return nil
	}
	err = d.download(ctx, commit, j)
	if errors.Is(err, ErrIntegrity) {
		d.track.emit(Event{Kind: EventWarning, File: j.Path, Message: err.Error() + "; downloading it again"})
		err = d.download(ctx, commit, j)
	}
	return err
}

// download runs the transfer of one blob with resume and retries. The caller holds the blob's lock.
func (d *downloader) download(ctx context.Context, commit string, j *job) error {
	blob := d.cache.blob(j.Etag)
	partial := blob + ".incomplete"
	if err := os.MkdirAll(filepath.Dir(partial), 0o755); err != nil {
		return d.local(j.Path, "cannot create the blobs folder", err)
	}
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return d.local(j.Path, "cannot open "+partial, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return d.local(j.Path, "cannot stat "+partial, err)
	}
	v := newVerifier(j.remoteFile)
	// Hash what an earlier attempt left, which leaves the offset at its end.
	have, err := io.CopyN(v, f, st.Size())
	if err != nil {
		return d.local(j.Path, "cannot read "+partial, err)
	}
	if have > j.Size {
		if have, err = restart(f, v); err != nil {
			return d.local(j.Path, "cannot truncate "+partial, err)
		}
	}
	d.account(j, have)

	failed := 0
	for have < j.Size {
		before := have
		have, err = d.getFrom(ctx, commit, j, f, v, have)
		if err == nil {
			continue
		}
		if errors.Is(err, ErrIntegrity) {
			os.Remove(partial)
			d.account(j, 0)
			return err
		}
		if !isTransient(ctx, err) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if have > before {
			failed = 0 // progress was made: the retry budget starts again, as huggingface_hub's does
		}
		failed++
		if failed > d.s.Retries {
			return d.unreachable(j.Path, failed, err)
		}
		wait, serr := d.backoff(ctx, failed, err)
		d.track.emit(Event{Kind: EventRetry, File: j.Path, Attempt: failed, Wait: wait, Err: err})
		if serr != nil {
			return serr
		}
	}
	if bad := v.verify(have); bad != "" {
		f.Close()
		os.Remove(partial)
		d.account(j, 0)
		return &Error{Ref: d.ref, File: j.Path, Kind: ErrIntegrity, Detail: bad + "; the bad download was deleted"}
	}
	if err := f.Sync(); err != nil {
		return d.local(j.Path, "cannot write "+partial, err)
	}
	if err := f.Close(); err != nil {
		return d.local(j.Path, "cannot write "+partial, err)
	}
	if err := os.Rename(partial, blob); err != nil {
		return d.local(j.Path, "cannot move the finished blob into place", err)
	}
	return nil
}

// restart empties a partial file, for a server that ignored our Range or a file that outgrew its size.
func restart(f *os.File, v *verifier) (int64, error) {
	v.reset()
	if err := f.Truncate(0); err != nil {
		return 0, err
	}
	_, err := f.Seek(0, io.SeekStart)
	return 0, err
}

// getFrom requests the blob from offset have on and appends what arrives to f. It returns how many bytes f
// now holds. A body that ends early is a transient error, so the caller resumes from the new length.
func (d *downloader) getFrom(ctx context.Context, commit string, j *job, f *os.File, v *verifier, have int64) (int64, error) {
	h := http.Header{"Accept-Encoding": {"identity"}}
	if have > 0 {
		h.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := d.send(ctx, d.client, http.MethodGet, d.resolveURL(commit, j.Path), h)
	if err != nil {
		return have, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have || total >= 0 && total != j.Size {
			return have, &Error{Ref: d.ref, File: j.Path, Kind: ErrProtocol, Status: resp.StatusCode, Detail: fmt.Sprintf(
				"asked for bytes %d- of %d, got Content-Range %q", have, j.Size, resp.Header.Get("Content-Range"))}
		}
	case http.StatusOK:
		if have > 0 { // the server ignored the Range header: start over
			if have, err = restart(f, v); err != nil {
				return 0, d.local(j.Path, "cannot truncate the partial download", err)
			}
			d.account(j, 0)
		}
		if resp.ContentLength >= 0 && resp.ContentLength != j.Size {
			return have, &Error{Ref: d.ref, File: j.Path, Kind: ErrIntegrity, Detail: fmt.Sprintf(
				"the server sends %d bytes, the listing says %d", resp.ContentLength, j.Size)}
		}
	case http.StatusRequestedRangeNotSatisfiable: // our partial file does not fit the remote one
		if _, err = restart(f, v); err != nil {
			return 0, d.local(j.Path, "cannot truncate the partial download", err)
		}
		d.account(j, 0)
		return 0, &transient{err: errors.New("the server refused to resume (HTTP 416); starting over")}
	default:
		return have, d.statusError(resp, j.Path)
	}
	w := &blobWriter{f: f, v: v, n: have, wrote: func(n int64) {
		d.track.moved.Add(n)
		d.account(j, j.counted+n)
	}}
	// One byte more than the file should have is enough to know it is too long.
	_, err = io.CopyBuffer(w, io.LimitReader(resp.Body, j.Size-have+1), make([]byte, copyBuffer))
	switch {
	case w.err != nil:
		return w.n, d.local(j.Path, "cannot write the download", w.err)
	case err != nil:
		return w.n, err
	case w.n < j.Size:
		return w.n, &transient{err: fmt.Errorf("connection closed after %d of %d bytes: %w", w.n, j.Size, io.ErrUnexpectedEOF)}
	}
	return w.n, nil
}

// blobWriter appends to the partial file and feeds the verifier exactly the bytes the file took.
type blobWriter struct {
	f     *os.File
	v     *verifier
	n     int64
	err   error
	wrote func(int64)
}

func (w *blobWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.v.Write(p[:n])
	w.n += int64(n)
	if n > 0 {
		w.wrote(int64(n))
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// parseContentRange reads "bytes start-end/total" (total may be "*", returned as -1).
func parseContentRange(v string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(s, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	if tot == "*" {
		return start, -1, true
	}
	total, err = strconv.ParseInt(tot, 10, 64)
	return start, total, err == nil
}

// local wraps a file-system failure, naming disk-full as such.
func (d *downloader) local(file, what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return &Error{Ref: d.ref, File: file, Kind: ErrDiskFull, Detail: "writing into " + d.s.CacheDir, Err: err,
			Hint: "Free some space (the partial download is kept and resumes), or point HF_HUB_CACHE at a larger disk"}
	}
	return &localError{err: fmt.Errorf("hub: %s: %s: %s: %w", d.ref, file, what, err)}
}

// unreachable is the error for a request that kept failing transiently.
func (d *downloader) unreachable(file string, attempts int, err error) error {
	return &Error{Ref: d.ref, File: file, Kind: ErrUnreachable, Err: err,
		Detail: fmt.Sprintf("%s failed %d times", d.s.Endpoint, attempts)}
}

// retry runs op until it succeeds, fails for good, or fails transiently more than Retries times.
func (d *downloader) retry(ctx context.Context, file string, op func() error) error {
	for failed := 1; ; failed++ {
		err := op()
		if err == nil || !isTransient(ctx, err) {
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if failed > d.s.Retries {
			return d.unreachable(file, failed, err)
		}
		wait, serr := d.backoff(ctx, failed, err)
		d.track.emit(Event{Kind: EventRetry, File: file, Attempt: failed, Wait: wait, Err: err})
		if serr != nil {
			return serr
		}
	}
}

// modelInfo is the part of GET /api/models/{repo}/revision/{rev}?blobs=true that Resolve reads.
type modelInfo struct {
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

type sibling struct {
	RFilename string `json:"rfilename"`
	Size      *int64 `json:"size"`
	BlobID    string `json:"blobId"`
	LFS       *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// listing asks the hub which commit the revision is and which files it has. Files without blob metadata (a
// hub or mirror that ignores ?blobs=true) have only their Path set; see headFiles.
func (d *downloader) listing(ctx context.Context) (string, []remoteFile, bool, error) {
	var info modelInfo
	err := d.retry(ctx, "", func() error {
		resp, err := d.send(ctx, d.client, http.MethodGet, d.apiURL(d.ref.Revision), http.Header{"Accept": {"application/json"}})
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return d.statusError(resp, "")
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
		if err != nil {
			return err
		}
		if len(body) > maxAPIBody {
			return &Error{Ref: d.ref, Kind: ErrProtocol, Detail: fmt.Sprintf("model info larger than %d bytes", maxAPIBody)}
		}
		info = modelInfo{}
		if err := json.Unmarshal(body, &info); err != nil {
			return &Error{Ref: d.ref, Kind: ErrProtocol, Detail: "malformed model info", Err: err}
		}
		return nil
	})
	if err != nil {
		return "", nil, false, err
	}
	if !commitHash.MatchString(info.SHA) {
		return "", nil, false, &Error{Ref: d.ref, Kind: ErrProtocol, Detail: fmt.Sprintf("model info has no valid commit hash (sha %q)", info.SHA)}
	}
	if info.Siblings == nil {
		return "", nil, false, &Error{Ref: d.ref, Kind: ErrProtocol, Detail: "model info lists no files (no siblings)"}
	}
	files := make([]remoteFile, 0, len(info.Siblings))
	complete := true
	for _, s := range info.Siblings {
		f := remoteFile{Path: s.RFilename, BlobID: s.BlobID, Size: -1}
		if s.Size != nil {
			f.Size = *s.Size
		}
		if s.LFS != nil {
			f.SHA256, f.Size = s.LFS.SHA256, s.LFS.Size
		}
		if !validRepoPath(f.Path) {
			return "", nil, false, &Error{Ref: d.ref, Kind: ErrProtocol, Detail: fmt.Sprintf("unsafe file name %q in the listing", f.Path)}
		}
		if f.Size < 0 || f.BlobID == "" {
			complete = false
		} else if !f.settle() {
			return "", nil, false, &Error{Ref: d.ref, File: f.Path, Kind: ErrProtocol, Detail: fmt.Sprintf("bad blob id %q or lfs sha256 %q", f.BlobID, f.SHA256)}
		}
		files = append(files, f)
	}
	return info.SHA, files, complete, nil
}

// headFiles fills in the etag and size of files the listing gave no metadata for, as huggingface_hub does
// for every file: a HEAD on the resolve URL, reading X-Linked-Etag and X-Linked-Size from the redirect of an
// LFS file, ETag and Content-Length otherwise.
func (d *downloader) headFiles(ctx context.Context, commit string, files []remoteFile) error {
	noRedirect := *d.client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for i := range files {
		f := &files[i]
		if f.Etag != "" {
			continue
		}
		err := d.retry(ctx, f.Path, func() error {
			target := d.resolveURL(commit, f.Path)
			for hops := 0; ; hops++ {
				resp, err := d.send(ctx, &noRedirect, http.MethodHead, target, http.Header{"Accept-Encoding": {"identity"}})
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode >= 400 {
					return d.statusError(resp, f.Path)
				}
				if c := resp.Header.Get("X-Repo-Commit"); c != "" && c != commit {
					return &Error{Ref: d.ref, File: f.Path, Kind: ErrProtocol, Detail: "X-Repo-Commit " + sanitize(c) + " is not " + commit}
				}
				etag := firstNonEmpty(resp.Header.Get("X-Linked-Etag"), resp.Header.Get("ETag"))
				size := resp.Header.Get("X-Linked-Size")
				if size == "" && resp.StatusCode < 300 {
					size = resp.Header.Get("Content-Length")
				}
				if etag == "" && resp.StatusCode/100 == 3 && hops < 5 { // e.g. a renamed repository: follow it
					loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
					if err != nil {
						return &Error{Ref: d.ref, File: f.Path, Kind: ErrProtocol, Detail: "bad redirect", Err: err}
					}
					target = loc.String()
					continue
				}
				n, err := strconv.ParseInt(size, 10, 64)
				f.Etag = normalizeEtag(etag)
				f.Size = n
				if etag == "" || err != nil || !f.settle() {
					return &Error{Ref: d.ref, File: f.Path, Kind: ErrProtocol, Detail: fmt.Sprintf("no usable ETag (%q) or size (%q)", sanitize(etag), sanitize(size))}
				}
				return nil
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// normalizeEtag strips the weak marker and the quotes: W/"abc" and "abc" are both abc.
func normalizeEtag(e string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(e), "W/"), `"`)
}
