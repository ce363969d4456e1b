package hub

import (
	"errors"
	"fmt"
	"strings"
)

// Kinds of failure. Errors returned by Resolve match one of them with errors.Is, and are *Error values that
// say which repository, revision and file, and what to do about it.
var (
	// ErrRepoNotFound: the hub has no such repository, or it is private and the token cannot see it.
	ErrRepoNotFound = errors.New("repository not found")
	// ErrRevisionNotFound: the repository has no such branch, tag or commit.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrFileNotFound: a file listed for the revision could not be fetched (HTTP 404).
	ErrFileNotFound = errors.New("file not found")
	// ErrAuth: the hub wants a token (HTTP 401) or refuses the one given (HTTP 403), e.g. for gated models.
	ErrAuth = errors.New("access denied")
	// ErrUnreachable: the hub could not be reached or kept failing (connection errors, stalls, HTTP 5xx/429)
	// after all retries.
	ErrUnreachable = errors.New("hub unreachable")
	// ErrNotCached: offline, and the cache lacks the revision or some of its files.
	ErrNotCached = errors.New("not in the cache")
	// ErrIntegrity: a downloaded file has the wrong size or hash, twice in a row.
	ErrIntegrity = errors.New("integrity check failed")
	// ErrDiskFull: the cache's file system has no room for the download.
	ErrDiskFull = errors.New("disk full")
	// ErrNoModel: the repository has no config.json or no safetensors weights.
	ErrNoModel = errors.New("no loadable model")
	// ErrProtocol: the hub answered something Resolve cannot use (malformed JSON, an unsafe file name, a bad
	// commit hash, a wrong range).
	ErrProtocol = errors.New("unexpected answer from the hub")
)

// Error is what Resolve returns for a model reference it cannot serve.
type Error struct {
	Ref    Ref    // the repository and revision asked for
	File   string // the repository file concerned, if any
	Kind   error  // one of the Err* values above
	Status int    // the HTTP status, if the hub answered with one
	Detail string // what happened, for people
	Hint   string // what to do about it, if we know
	Err    error  // the underlying error, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("hub: ")
	b.WriteString(e.Ref.String())
	if e.File != "" {
		b.WriteString(": ")
		b.WriteString(e.File)
	}
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(strings.TrimRight(e.Detail, "."))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Hint != "" {
		b.WriteString(". ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap lets errors.Is match both the kind and the underlying error.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}
