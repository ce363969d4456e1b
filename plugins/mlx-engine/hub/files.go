package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// remoteFile is one file of a commit, with what the hub says about its contents.
type remoteFile struct {
	Path   string // slash-separated, relative to the repository root
	Size   int64
	BlobID string // git blob sha1, from the model-info listing
	SHA256 string // LFS files: sha256 of the contents, which is also their etag
	Etag   string // the blob's name in the cache: SHA256 for LFS files, BlobID otherwise
	check  hashKind
}

// hashKind is how a file's contents are verified beyond their size.
type hashKind int

const (
	checkSize    hashKind = iota // etag is neither a sha256 nor a git sha1: size only
	checkSHA256                  // LFS: sha256(contents) == etag
	checkGitSHA1                 // git blob: sha1("blob <size>\x00" + contents) == etag
)

var (
	hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// settle derives Etag and the check from what is known and validates everything that becomes a path.
func (f *remoteFile) settle() bool {
	if !validRepoPath(f.Path) || f.Size < 0 {
		return false
	}
	switch {
	case f.SHA256 != "":
		f.Etag = f.SHA256
	case f.BlobID != "":
		f.Etag = f.BlobID
	}
	switch {
	case hex64.MatchString(f.Etag):
		f.check = checkSHA256
	case hex40.MatchString(f.Etag):
		f.check = checkGitSHA1
	default:
		f.check = checkSize
	}
	return validEtag(f.Etag)
}

// selectFiles keeps the files Include selects and Exclude does not drop, sorted by path.
func selectFiles(files []remoteFile, include, exclude []string) []remoteFile {
	var out []remoteFile
	for _, f := range files {
		if matchAny(include, f.Path) && !excluded(exclude, f.Path) {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b remoteFile) int { return strings.Compare(a.Path, b.Path) })
	return out
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, p); ok {
			return true
		}
	}
	return false
}

func excluded(patterns []string, p string) bool {
	for _, pat := range patterns {
		switch {
		case strings.HasSuffix(pat, "/"):
			if strings.HasPrefix(p, pat) || strings.Contains(p, "/"+pat) {
				return true
			}
		case !strings.Contains(pat, "/"):
			if ok, _ := path.Match(pat, path.Base(p)); ok {
				return true
			}
		default:
			if ok, _ := path.Match(pat, p); ok {
				return true
			}
		}
	}
	return false
}

// checkModel refuses a selection that cannot be a model the engine loads: no config.json, or no safetensors
// weights. skipped are the files of the repository the selection left out, to say what is there instead.
func checkModel(sel, all []remoteFile) (detail string, ok bool) {
	has := func(files []remoteFile, pred func(string) bool) []string {
		var names []string
		for _, f := range files {
			if pred(f.Path) {
				names = append(names, f.Path)
			}
		}
		return names
	}
	if len(has(sel, func(p string) bool { return p == "config.json" })) == 0 {
		return "the repository has no config.json at its top level", false
	}
	if len(has(sel, func(p string) bool { return strings.HasSuffix(p, ".safetensors") })) > 0 {
		return "", true
	}
	weights := has(all, func(p string) bool {
		for _, ext := range []string{".bin", ".pth", ".pt", ".gguf", ".msgpack", ".h5", ".ckpt", ".safetensors", ".onnx"} {
			if strings.HasSuffix(p, ext) {
				return true
			}
		}
		return false
	})
	if len(weights) == 0 {
		return "the repository has no weight files", false
	}
	if len(weights) > 5 {
		weights = append(weights[:5], fmt.Sprintf("and %d more", len(weights)-5))
	}
	return "no safetensors weights at the top level; the engine loads safetensors only, and the repository has " +
		strings.Join(weights, ", "), false
}

// verifier hashes a blob as it is written and checks it at the end.
type verifier struct {
	f remoteFile
	h hash.Hash
}

func newVerifier(f remoteFile) *verifier {
	v := &verifier{f: f}
	v.reset()
	return v
}

// reset starts over, for a file that is written again from its first byte.
func (v *verifier) reset() {
	switch v.f.check {
	case checkSHA256:
		v.h = sha256.New()
	case checkGitSHA1:
		v.h = sha1.New()
		v.h.Write([]byte("blob " + strconv.FormatInt(v.f.Size, 10) + "\x00"))
	default:
		v.h = nil
	}
}

func (v *verifier) Write(p []byte) (int, error) {
	if v.h != nil {
		v.h.Write(p)
	}
	return len(p), nil
}

// verify checks n bytes written against the expected size and hash.
func (v *verifier) verify(n int64) string {
	if n != v.f.Size {
		return fmt.Sprintf("got %d bytes, expected %d", n, v.f.Size)
	}
	if v.h == nil {
		return ""
	}
	got := hex.EncodeToString(v.h.Sum(nil))
	if got == v.f.Etag {
		return ""
	}
	name := "sha256"
	if v.f.check == checkGitSHA1 {
		name = "git blob sha1"
	}
	return fmt.Sprintf("%s is %s, expected %s", name, got, v.f.Etag)
}
