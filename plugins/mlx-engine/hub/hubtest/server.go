package hubtest

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Server is a fake Hugging Face hub on 127.0.0.1: the model-info API, the resolve endpoint with ETags and
// LFS redirects, and a second listener playing the storage host LFS files redirect to. Both serve byte ranges.
// It records every request and can inject faults. It is safe for concurrent use.
type Server struct {
	// URL is the hub endpoint, to use as Options.Endpoint (HF_ENDPOINT).
	URL string
	// StorageURL is where LFS files are served from: another port, so another host for redirects.
	StorageURL string

	hub, storage *httptest.Server
	stop         context.CancelFunc
	stopped      context.Context

	mu       sync.Mutex
	repos    map[string]*Repo
	blobs    map[string][]byte // sha256 -> contents, for the storage host
	requests []Request
	gets     map[string]int // "repo\x00file" -> content GETs so far
	fault    func(FileRequest) Fault
}

// Request is one request the server answered.
type Request struct {
	Host   string // "hub" or "storage"
	Method string
	Path   string // unescaped URL path
	Range  string // the Range header
	Auth   string // the Authorization header
	Status int
	Bytes  int64 // body bytes sent
}

// NewServer starts a fake hub; it stops when the test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{repos: map[string]*Repo{}, blobs: map[string][]byte{}, gets: map[string]int{}}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.storage = httptest.NewServer(http.HandlerFunc(s.serveStorage))
	s.URL, s.StorageURL = s.hub.URL, s.storage.URL
	tb.Cleanup(s.Close)
	return s
}

// Close stops both listeners, ending stalled responses first.
func (s *Server) Close() {
	s.stop()
	s.hub.CloseClientConnections()
	s.storage.CloseClientConnections()
	s.hub.Close()
	s.storage.Close()
}

// Requests returns a copy of the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// ResetRequests forgets the recorded requests and the per-file GET counts.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
	s.gets = map[string]int{}
}

// BytesServed is the number of file body bytes sent by both hosts since the last reset.
func (s *Server) BytesServed() int64 {
	var n int64
	for _, r := range s.Requests() {
		n += r.Bytes
	}
	return n
}

// SetFault installs f, consulted for every GET of file contents (on the hub for small files, on the storage
// host for LFS files); nil removes it.
func (s *Server) SetFault(f func(FileRequest) Fault) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// FileRequest describes a GET of file contents, for a fault function.
type FileRequest struct {
	Repo, File string
	N          int   // 1 for the first GET of this file since the last reset, 2 for the next...
	Offset     int64 // where the requested range starts
}

// Fault is what to do wrong with one response. The zero Fault serves the file correctly.
type Fault struct {
	Status      int   // answer with this status and no contents (e.g. 500, 503, 429)
	Drop        bool  // close the connection after DropAfter body bytes
	DropAfter   int64 //
	Stall       bool  // after StallAfter body bytes, send nothing until the client gives up or the server closes
	StallAfter  int64 //
	Corrupt     bool  // flip one byte of the body
	IgnoreRange bool  // answer 200 with the whole file, as some proxies do
}

// Repo is a repository of the fake hub: commits, and refs (branches and tags) naming them.
type Repo struct {
	s       *Server
	id      string
	opts    RepoOptions
	commits map[string]map[string]*file // commit -> path -> file
	refs    map[string]string           // branch or tag -> commit
}

type file struct {
	data   []byte
	blobID string // git blob sha1
	sha256 string // set for LFS files
}

// RepoOptions configure a repository.
type RepoOptions struct {
	// Gated repositories serve their listing to anyone but their files only with a token from Tokens
	// (401 without one, 403 with a wrong one, X-Error-Code GatedRepo).
	Gated bool
	// Private repositories answer as missing (401, X-Error-Code RepoNotFound) without a token from Tokens.
	Private bool
	Tokens  []string
	// LFS says which files are stored in LFS (redirected to the storage host, etag = sha256). Default:
	// *.safetensors, *.bin, *.gguf and files of 10 MiB or more, as .gitattributes on the hub usually says.
	LFS func(path string, size int) bool
	// OmitBlobs makes the API ignore ?blobs=true (no sizes or hashes in the listing), as some mirrors do;
	// clients must then HEAD each file.
	OmitBlobs bool
}

// AddRepo creates an empty repository named "org/name".
func (s *Server) AddRepo(id string, opts RepoOptions) *Repo {
	if opts.LFS == nil {
		opts.LFS = func(p string, size int) bool {
			ext := path.Ext(p)
			return ext == ".safetensors" || ext == ".bin" || ext == ".gguf" || size >= 10<<20
		}
	}
	r := &Repo{s: s, id: id, opts: opts, commits: map[string]map[string]*file{}, refs: map[string]string{}}
	s.mu.Lock()
	s.repos[id] = r
	s.mu.Unlock()
	return r
}

// Commit records a commit whose tree is exactly files (slash-separated paths), points the "main" branch at it
// and returns its hash.
func (r *Repo) Commit(files map[string][]byte) string {
	return r.CommitTo("main", files)
}

// CommitTo is Commit on another branch.
func (r *Repo) CommitTo(branch string, files map[string][]byte) string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	tree := map[string]*file{}
	h := sha1.New()
	fmt.Fprintf(h, "repo %s\nparent %s\n", r.id, r.refs[branch])
	for _, p := range slices.Sorted(maps.Keys(files)) {
		data := slices.Clone(files[p])
		f := &file{data: data, blobID: GitBlobID(data)}
		if r.opts.LFS(p, len(data)) {
			sum := sha256.Sum256(data)
			f.sha256 = hex.EncodeToString(sum[:])
			r.s.blobs[f.sha256] = data
		}
		tree[p] = f
		fmt.Fprintf(h, "%s %s\n", f.blobID, p)
	}
	commit := hex.EncodeToString(h.Sum(nil))
	r.commits[commit] = tree
	r.refs[branch] = commit
	return commit
}

// CommitDir commits the regular files under dir (recursively) to "main".
func (r *Repo) CommitDir(dir string) (string, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return "", err
	}
	return r.Commit(files), nil
}

// SetRef points a branch or tag at a commit.
func (r *Repo) SetRef(name, commit string) {
	r.s.mu.Lock()
	r.refs[name] = commit
	r.s.mu.Unlock()
}

// GitBlobID is the git object id of a blob with these contents: sha1("blob <size>\x00" + data).
func GitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hex sha256 of data, the etag of an LFS file.
func SHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// resolveRev finds the commit a revision names: a ref, a full hash, or a unique prefix of 7+ characters.
// The caller holds s.mu.
func (r *Repo) resolveRev(rev string) (string, bool) {
	if c, ok := r.refs[rev]; ok {
		return c, true
	}
	if _, ok := r.commits[rev]; ok {
		return rev, true
	}
	if len(rev) >= 7 {
		var found []string
		for c := range r.commits {
			if strings.HasPrefix(c, rev) {
				found = append(found, c)
			}
		}
		if len(found) == 1 {
			return found[0], true
		}
	}
	return "", false
}

// authorized reports whether the request carries one of the repository's tokens; present says it carries one.
func (r *Repo) authorized(req *http.Request) (ok, present bool) {
	tok, found := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !found || tok == "" {
		return false, false
	}
	return slices.Contains(r.opts.Tokens, tok), true
}

// recorder records the status and body size of a response.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) record(host string, req *http.Request, w *recorder, counted bool) {
	r := Request{Host: host, Method: req.Method, Path: req.URL.Path, Range: req.Header.Get("Range"),
		Auth: req.Header.Get("Authorization"), Status: w.status}
	if counted {
		r.Bytes = w.bytes
	}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.mu.Unlock()
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

// serveHub answers /api/models/{repo}[/revision/{rev}] and /{repo}/resolve/{rev}/{path}.
func (s *Server) serveHub(rw http.ResponseWriter, req *http.Request) {
	w := &recorder{ResponseWriter: rw}
	content := false
	defer func() { s.record("hub", req, w, content) }()
	segs := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
		segs[i] = u
	}
	if len(segs) >= 3 && segs[0] == "api" && segs[1] == "models" {
		s.serveAPI(w, req, segs[2:])
		return
	}
	for i := 1; i <= 2 && i+2 < len(segs); i++ {
		if segs[i] == "resolve" {
			content = true
			s.serveResolve(w, req, strings.Join(segs[:i], "/"), segs[i+1], strings.Join(segs[i+2:], "/"))
			return
		}
	}
	http.NotFound(w, req)
}

// serveAPI answers the model info, with the listing of the revision (siblings), and blob metadata when
// ?blobs=true is asked.
func (s *Server) serveAPI(w http.ResponseWriter, req *http.Request, segs []string) {
	var id, rev string
	switch {
	case len(segs) >= 4 && segs[2] == "revision":
		id, rev = segs[0]+"/"+segs[1], strings.Join(segs[3:], "/")
	case len(segs) >= 3 && segs[1] == "revision":
		id, rev = segs[0], strings.Join(segs[2:], "/")
	case len(segs) <= 2:
		id, rev = strings.Join(segs, "/"), "main"
	default:
		http.NotFound(w, req)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	if ok, _ := r.authorized(req); r.opts.Private && !ok {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return
	}
	commit, ok := r.resolveRev(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	blobs := req.URL.Query().Get("blobs") == "true" && !r.opts.OmitBlobs
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      *int   `json:"size,omitempty"`
		BlobID    string `json:"blobId,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	tree := r.commits[commit]
	siblings := []sibling{}
	for _, p := range slices.Sorted(maps.Keys(tree)) {
		f := tree[p]
		sb := sibling{RFilename: p}
		if blobs {
			size := len(f.data)
			sb.Size, sb.BlobID = &size, f.blobID
			if f.sha256 != "" {
				pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", f.sha256, size)
				sb.BlobID = GitBlobID([]byte(pointer)) // git stores the pointer file, not the contents
				sb.LFS = &lfs{SHA256: f.sha256, Size: size, PointerSize: len(pointer)}
			}
		}
		siblings = append(siblings, sb)
	}
	gated := any(false)
	if r.opts.Gated {
		gated = "manual"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "modelId": id, "sha": commit, "private": r.opts.Private, "gated": gated, "siblings": siblings,
	})
}

// serveResolve answers HEAD and GET of a file: small files directly with their git blob id as ETag, LFS files
// with a 302 to the storage host carrying X-Linked-Etag (the sha256) and X-Linked-Size.
func (s *Server) serveResolve(w *recorder, req *http.Request, id, rev, p string) {
	s.mu.Lock()
	r := s.repos[id]
	if r == nil {
		s.mu.Unlock()
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	ok, present := r.authorized(req)
	switch {
	case r.opts.Private && !ok:
		s.mu.Unlock()
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return
	case r.opts.Gated && !ok && !present:
		s.mu.Unlock()
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return
	case r.opts.Gated && !ok:
		s.mu.Unlock()
		hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list.")
		return
	}
	commit, found := r.resolveRev(rev)
	if !found {
		s.mu.Unlock()
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	f := r.commits[commit][p]
	s.mu.Unlock()
	w.Header().Set("X-Repo-Commit", commit)
	if f == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	if f.sha256 != "" {
		loc := s.StorageURL + "/lfs/" + f.sha256 + "?" + url.Values{"repo": {id}, "file": {p}}.Encode()
		w.Header().Set("Location", loc)
		w.Header().Set("X-Linked-Etag", `"`+f.sha256+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		w.Header().Set("ETag", `"`+f.blobID+`"`)
		w.WriteHeader(http.StatusFound)
		return
	}
	s.serveContent(w, req, id, p, f.data, f.blobID)
}

// serveStorage answers /lfs/{sha256}, the way a CDN does: no authentication, byte ranges, the sha256 as ETag.
func (s *Server) serveStorage(rw http.ResponseWriter, req *http.Request) {
	w := &recorder{ResponseWriter: rw}
	defer func() { s.record("storage", req, w, true) }()
	sum, ok := strings.CutPrefix(req.URL.Path, "/lfs/")
	s.mu.Lock()
	data, found := s.blobs[sum]
	s.mu.Unlock()
	if !ok || !found {
		http.NotFound(w, req)
		return
	}
	q := req.URL.Query()
	s.serveContent(w, req, q.Get("repo"), q.Get("file"), data, sum)
}

// serveContent sends data, honouring a single "bytes=a-" or "bytes=a-b" range, and applies the fault function.
func (s *Server) serveContent(w *recorder, req *http.Request, repo, p string, data []byte, etag string) {
	size := int64(len(data))
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	h.Set("ETag", `"`+etag+`"`)
	h.Set("Content-Type", "application/octet-stream")
	start, end, partial, ok := parseRange(req.Header.Get("Range"), size)
	if !ok {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		http.Error(w, "range not satisfiable", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	var fault Fault
	if req.Method == http.MethodGet {
		s.mu.Lock()
		key := repo + "\x00" + p
		s.gets[key]++
		n, fn := s.gets[key], s.fault
		s.mu.Unlock()
		if fn != nil {
			fault = fn(FileRequest{Repo: repo, File: p, N: n, Offset: start})
		}
	}
	if fault.Status != 0 {
		http.Error(w, "injected failure", fault.Status)
		return
	}
	if fault.IgnoreRange {
		start, end, partial = 0, size, false
	}
	body := data[start:end]
	if fault.Corrupt && len(body) > 0 {
		body = slices.Clone(body)
		body[len(body)/2] ^= 0x55
	}
	h.Set("Content-Length", strconv.FormatInt(int64(len(body)), 10))
	if partial {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, size))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if req.Method == http.MethodHead {
		return
	}
	send := func(b []byte) {
		for len(b) > 0 {
			n := min(len(b), 32<<10)
			if _, err := w.Write(b[:n]); err != nil {
				panic(http.ErrAbortHandler)
			}
			b = b[n:]
		}
	}
	if fault.Stall {
		cut := min(max(fault.StallAfter, 0), int64(len(body)))
		send(body[:cut])
		w.Flush()
		select {
		case <-req.Context().Done():
		case <-s.stopped.Done():
		}
		panic(http.ErrAbortHandler)
	}
	if fault.Drop {
		cut := min(max(fault.DropAfter, 0), int64(len(body)))
		send(body[:cut])
		w.Flush()
		panic(http.ErrAbortHandler) // net/http closes the connection without finishing the response
	}
	send(body)
}

// parseRange reads "bytes=a-" or "bytes=a-b"; no header means the whole file. ok is false for a range that
// cannot be satisfied.
func parseRange(v string, size int64) (start, end int64, partial, ok bool) {
	if v == "" {
		return 0, size, false, true
	}
	spec, found := strings.CutPrefix(v, "bytes=")
	a, b, found2 := strings.Cut(spec, "-")
	if !found || !found2 || strings.Contains(spec, ",") {
		return 0, size, false, true // unsupported forms are ignored, as RFC 9110 allows
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0, 0, false, false
	}
	end = size
	if b != "" {
		last, err := strconv.ParseInt(b, 10, 64)
		if err != nil || last < start {
			return 0, 0, false, false
		}
		end = min(last+1, size)
	}
	return start, end, true, true
}
