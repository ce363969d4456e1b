package hub

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// cache is one repository's folder in the hub cache, laid out as huggingface_hub lays it out:
//
//	<CacheDir>/models--org--name/
//	  blobs/<etag>                   file contents, named by sha256 (LFS files) or git blob sha1 (others)
//	  blobs/<etag>.incomplete        a download in progress, resumed by the next attempt
//	  refs/<revision>                the commit hash a branch or tag pointed to (no newline)
//	  snapshots/<commit>/<file>      relative symlinks into ../../blobs (one more ../ per subfolder)
//	  trees/<commit>.json            the file listing of the commit (huggingface_hub's tree cache, format 1)
//	<CacheDir>/.locks/models--org--name/<etag>.lock   flock(2) taken while a blob is written
type cache struct {
	root string // CacheDir
	dir  string // the repository's folder
	lock string // the repository's lock folder
}

func newCache(root string, r Ref) cache {
	return cache{root: root, dir: filepath.Join(root, r.folder()), lock: filepath.Join(root, ".locks", r.folder())}
}

func (c cache) blob(etag string) string     { return filepath.Join(c.dir, "blobs", etag) }
func (c cache) lockFile(etag string) string { return filepath.Join(c.lock, etag+".lock") }
func (c cache) snapshot(commit string) string {
	return filepath.Join(c.dir, "snapshots", commit)
}
func (c cache) pointer(commit, file string) string {
	return filepath.Join(c.snapshot(commit), filepath.FromSlash(file))
}

// readRef returns the commit refs/<rev> holds.
func (c cache) readRef(rev string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	commit := strings.TrimSpace(string(b))
	return commit, commitHash.MatchString(commit)
}

// writeRef points refs/<rev> at commit, atomically, unless rev is the commit itself.
func (c cache) writeRef(rev, commit string) error {
	if rev == commit {
		return nil
	}
	if old, ok := c.readRef(rev); ok && old == commit {
		return nil
	}
	return writeAtomic(filepath.Join(c.dir, "refs", filepath.FromSlash(rev)), []byte(commit))
}

// resolveCommit finds the commit a revision names using only the cache: refs/<rev>, a full commit hash, or an
// abbreviated one that prefixes exactly one snapshot.
func (c cache) resolveCommit(rev string) (string, bool) {
	if commit, ok := c.readRef(rev); ok {
		return commit, true
	}
	if commitHash.MatchString(rev) {
		return rev, true
	}
	if shortHash.MatchString(rev) {
		var found []string
		for _, s := range c.snapshots() {
			if strings.HasPrefix(s, rev) {
				found = append(found, s)
			}
		}
		if len(found) == 1 {
			return found[0], true
		}
	}
	return "", false
}

// snapshots lists the commits that have a snapshot folder.
func (c cache) snapshots() []string {
	ents, _ := os.ReadDir(filepath.Join(c.dir, "snapshots"))
	var out []string
	for _, e := range ents {
		if e.IsDir() && commitHash.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// refs lists the cached refs as "name -> commit".
func (c cache) refs() map[string]string {
	out := map[string]string{}
	base := filepath.Join(c.dir, "refs")
	_ = filepath.WalkDir(base, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if commit, ok := c.readRef(filepath.ToSlash(rel)); ok {
			out[filepath.ToSlash(rel)] = commit
		}
		return nil
	})
	return out
}

// describe says what the cache holds for the repository, for error messages.
func (c cache) describe() string {
	snaps := c.snapshots()
	if len(snaps) == 0 {
		return "the cache " + c.root + " has no snapshot of it"
	}
	byCommit := map[string][]string{}
	for name, commit := range c.refs() {
		byCommit[commit] = append(byCommit[commit], name)
	}
	var parts []string
	for _, s := range snaps {
		names := byCommit[s]
		sort.Strings(names)
		if len(names) > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s)", s[:12], strings.Join(names, ", ")))
		} else {
			parts = append(parts, s[:12])
		}
	}
	return "cached snapshots: " + strings.Join(parts, "; ")
}

// pointerSize returns the size of the file a snapshot pointer leads to, or -1 if it leads nowhere.
func (c cache) pointerSize(commit, file string) int64 {
	st, err := os.Stat(c.pointer(commit, file))
	if err != nil || !st.Mode().IsRegular() {
		return -1
	}
	return st.Size()
}

// blobSize returns the size of a finished blob, or -1.
func (c cache) blobSize(etag string) int64 {
	st, err := os.Stat(c.blob(etag))
	if err != nil || !st.Mode().IsRegular() {
		return -1
	}
	return st.Size()
}

// link makes snapshots/<commit>/<file> a relative symlink to blobs/<etag>, replacing whatever was there
// atomically so that a concurrent reader sees the old pointer or the new one, never none. Where symlinks are
// not available it falls back to a hard link, then to a copy, as huggingface_hub does.
func (c cache) link(commit, file, etag string) error {
	dst := c.pointer(commit, file)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	blob := c.blob(etag)
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		rel = blob
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	tmp := dst + "." + randomSuffix() + ".tmp"
	if err := os.Symlink(rel, tmp); err != nil {
		if err := os.Link(blob, tmp); err != nil {
			if err := copyFile(blob, tmp); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// treeFile is huggingface_hub's tree cache (trees/<commit>.json, format_version 1): the file listing of a
// commit, so that a later run, ours or theirs, knows which files a complete snapshot has without asking.
type treeFile struct {
	FormatVersion int                  `json:"format_version"`
	Files         map[string]treeEntry `json:"files"`
}

type treeEntry struct {
	Size      int64  `json:"size"`
	BlobID    string `json:"blob_id"`
	LFSSHA256 string `json:"lfs_sha256,omitempty"`
	LFSSize   *int64 `json:"lfs_size,omitempty"`
	XetHash   string `json:"xet_hash,omitempty"`
}

func (c cache) treePath(commit string) string {
	return filepath.Join(c.dir, "trees", commit+".json")
}

// readTree returns the cached listing of a commit, if there is a valid one.
func (c cache) readTree(commit string) ([]remoteFile, bool) {
	b, err := os.ReadFile(c.treePath(commit))
	if err != nil || len(b) > maxAPIBody {
		return nil, false
	}
	var t treeFile
	if json.Unmarshal(b, &t) != nil || t.FormatVersion != 1 || t.Files == nil {
		return nil, false
	}
	files := make([]remoteFile, 0, len(t.Files))
	for name, e := range t.Files {
		f := remoteFile{Path: name, Size: e.Size, BlobID: e.BlobID, SHA256: e.LFSSHA256}
		if !f.settle() {
			return nil, false
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b remoteFile) int { return strings.Compare(a.Path, b.Path) })
	return files, true
}

// writeTree stores the listing of a commit, when every file has its blob metadata.
func (c cache) writeTree(commit string, files []remoteFile) error {
	t := treeFile{FormatVersion: 1, Files: map[string]treeEntry{}}
	for _, f := range files {
		if f.BlobID == "" {
			return nil
		}
		e := treeEntry{Size: f.Size, BlobID: f.BlobID}
		if f.SHA256 != "" {
			e.LFSSHA256 = f.SHA256
			size := f.Size
			e.LFSSize = &size
		}
		t.Files[f.Path] = e
	}
	b, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(c.treePath(commit), b)
}

// tagCacheDir writes CACHEDIR.TAG (the Cache Directory Tagging Standard) so backup tools skip the cache.
func tagCacheDir(root string) {
	p := filepath.Join(root, "CACHEDIR.TAG")
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = writeAtomic(p, []byte("Signature: 8a477f597d28d172789f06886806bc55\n"+
		"# This file is a cache directory tag created by huggingface_hub-compatible tools.\n"+
		"# For information about cache directory tags see https://bford.info/cachedir/\n"))
}

// writeAtomic writes a small file through a temporary name and a rename.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + "." + randomSuffix() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// missingModelFiles checks a snapshot that has no tree listing (one huggingface_hub wrote before it kept
// listings, or that mlx-lm downloaded): config.json, tokenizer.json, and the weights — every shard
// model.safetensors.index.json names, or at least one .safetensors file.
func missingModelFiles(dir string) []string {
	var missing []string
	exists := func(name string) bool {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
		return err == nil && st.Mode().IsRegular()
	}
	for _, f := range []string{"config.json", "tokenizer.json"} {
		if !exists(f) {
			missing = append(missing, f)
		}
	}
	const index = "model.safetensors.index.json"
	if b, err := os.ReadFile(filepath.Join(dir, index)); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if json.Unmarshal(b, &idx) != nil || len(idx.WeightMap) == 0 {
			return append(missing, index+" (unreadable)")
		}
		shards := map[string]bool{}
		for _, s := range idx.WeightMap {
			shards[s] = true
		}
		for _, s := range slices.Sorted(maps.Keys(shards)) {
			if !validRepoPath(s) || !exists(s) {
				missing = append(missing, s)
			}
		}
		return missing
	}
	weights, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	found := false
	for _, w := range weights {
		if exists(filepath.Base(w)) {
			found = true
		}
	}
	if !found {
		missing = append(missing, "*.safetensors")
	}
	return missing
}
