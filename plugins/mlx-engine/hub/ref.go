package hub

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultRevision is the revision a reference without "@revision" resolves, as on the hub.
const DefaultRevision = "main"

// Ref names a model repository on the hub at a revision.
type Ref struct {
	// Repo is the repository id, "org/name" (or a bare "name" for the few legacy repositories without an org).
	Repo string
	// Revision is a branch, a tag or a commit hash (full or abbreviated).
	Revision string
}

// String returns the reference in the form ParseRef reads.
func (r Ref) String() string { return r.Repo + "@" + r.Revision }

// folder is the repository's folder in the cache, as huggingface_hub names it: "models--org--name".
func (r Ref) folder() string { return "models--" + strings.ReplaceAll(r.Repo, "/", "--") }

var (
	repoPart   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)
	shortHash  = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
)

// ParseRef reads "org/name" or "org/name@revision". The repository id follows the hub's rules (letters, digits,
// "_", "-" and "."; no "--" or ".."; at most 96 characters per part); the revision may contain "/" (as in
// "refs/pr/1") but no ".." segment, since it becomes a file name under refs/ in the cache.
func ParseRef(s string) (Ref, error) {
	repo, rev, hasRev := strings.Cut(s, "@")
	if hasRev && rev == "" {
		return Ref{}, fmt.Errorf("hub: %q: empty revision after @", s)
	}
	if !hasRev {
		rev = DefaultRevision
	}
	if err := checkRepoID(repo); err != nil {
		return Ref{}, fmt.Errorf("hub: %q: %w", s, err)
	}
	if err := checkRevision(rev); err != nil {
		return Ref{}, fmt.Errorf("hub: %q: %w", s, err)
	}
	return Ref{Repo: repo, Revision: rev}, nil
}

func checkRepoID(id string) error {
	parts := strings.Split(id, "/")
	if id == "" || len(parts) > 2 {
		return fmt.Errorf("repository id %q is not of the form org/name", id)
	}
	for _, p := range parts {
		switch {
		case p == "":
			return fmt.Errorf("repository id %q has an empty part", id)
		case len(p) > 96:
			return fmt.Errorf("repository id %q: part longer than 96 characters", id)
		case !repoPart.MatchString(p):
			return fmt.Errorf("repository id %q: only letters, digits, '_', '-' and '.' are allowed", id)
		case strings.Contains(p, "--") || strings.Contains(p, ".."):
			return fmt.Errorf("repository id %q: '--' and '..' are not allowed", id)
		case strings.HasPrefix(p, "-") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, "-") || strings.HasSuffix(p, "."):
			return fmt.Errorf("repository id %q: parts cannot start or end with '-' or '.'", id)
		}
	}
	return nil
}

func checkRevision(rev string) error {
	if len(rev) > 256 {
		return fmt.Errorf("revision longer than 256 characters")
	}
	if strings.HasPrefix(rev, "/") || strings.HasSuffix(rev, "/") {
		return fmt.Errorf("revision %q cannot start or end with '/'", rev)
	}
	for _, seg := range strings.Split(rev, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("revision %q has an empty, '.' or '..' segment", rev)
		}
	}
	for _, c := range rev {
		if c < 0x20 || c == 0x7f || c == '\\' || c == ':' {
			return fmt.Errorf("revision %q contains %q", rev, c)
		}
	}
	return nil
}

// looksLikePath reports whether s can only be meant as a local path, never as a repository id, so that a
// missing directory is reported as such instead of being looked up on the hub.
func looksLikePath(s string) bool {
	return filepath.IsAbs(s) || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") ||
		strings.ContainsRune(s, '\\') || strings.Count(s, "/") > 1 && !strings.Contains(s, "@")
}

// validRepoPath reports whether a file name the hub returned is a safe relative path: slash-separated, no empty,
// "." or ".." segments, no backslashes or control characters. It is joined under the snapshot folder.
func validRepoPath(p string) bool {
	if p == "" || len(p) > 1024 || strings.HasPrefix(p, "/") {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// validEtag reports whether an etag can serve as a blob file name.
func validEtag(e string) bool {
	if e == "" || len(e) > 128 {
		return false
	}
	for _, c := range e {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
