package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// userAgent identifies duet to the hub, as huggingface_hub's "huggingface_hub/x.y" does.
const userAgent = "duet-hub/1 (+https://github.com/duet-ai/duet)"

// maxAPIBody caps a model-info answer; the largest real ones (thousands of files) are a few MiB.
const maxAPIBody = 64 << 20

// errStalled marks a request that received nothing for the idle timeout.
var errStalled = errors.New("transfer stalled")

// newClient builds the HTTP client: ours with dial and TLS deadlines, or a copy of the caller's, in both cases
// with a redirect policy that keeps the token away from other hosts (the storage an LFS file redirects to
// needs none, and must not see it).
func newClient(s settings) *http.Client {
	var c http.Client
	if s.Client != nil {
		c = *s.Client
	} else {
		dialer := &net.Dialer{Timeout: s.ConnectTimeout, KeepAlive: 30 * time.Second}
		c.Transport = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   s.ConnectTimeout,
			ResponseHeaderTimeout: s.IdleTimeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   s.Concurrency + 2,
			IdleConnTimeout:       90 * time.Second,
		}
	}
	inner := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if req.URL.Host != via[0].URL.Host {
			req.Header.Del("Authorization")
		}
		if inner != nil {
			return inner(req, via)
		}
		return nil
	}
	return &c
}

// watchdog cancels a request that makes no progress for d: no response headers, or no body bytes between
// two reads. Each byte read pushes the deadline back, so a slow but moving transfer is never cut.
type watchdog struct {
	d      time.Duration
	timer  *time.Timer
	fired  atomic.Bool
	cancel context.CancelFunc
}

func newWatchdog(ctx context.Context, d time.Duration) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{d: d, cancel: cancel}
	w.timer = time.AfterFunc(d, func() {
		w.fired.Store(true)
		cancel()
	})
	return ctx, w
}

func (w *watchdog) kick() { w.timer.Reset(w.d) }

func (w *watchdog) release() {
	w.timer.Stop()
	w.cancel()
}

// explain turns the cancellation the watchdog caused into errStalled.
func (w *watchdog) explain(err error) error {
	if err != nil && w.fired.Load() {
		return fmt.Errorf("%w: nothing received for %s", errStalled, w.d)
	}
	return err
}

// watchedBody is a response body whose reads feed the watchdog; Close releases it.
type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.kick()
	}
	return n, b.w.explain(err)
}

func (b *watchedBody) Close() error {
	err := b.ReadCloser.Close()
	b.w.release()
	return err
}

// send performs one request under a watchdog. The caller closes the response body.
func (d *downloader) send(ctx context.Context, client *http.Client, method, rawURL string, header http.Header) (*http.Response, error) {
	ctx, w := newWatchdog(ctx, d.s.IdleTimeout)
	req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
	if err != nil {
		w.release()
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", userAgent)
	if d.s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.s.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		w.release()
		return nil, w.explain(err)
	}
	w.kick()
	resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}

// transient marks an error worth retrying; after is the server's Retry-After, if it gave one.
type transient struct {
	err   error
	after time.Duration
}

func (t *transient) Error() string { return t.err.Error() }
func (t *transient) Unwrap() error { return t.err }

// isTransient reports whether err may go away on retry: network errors, stalls, truncated bodies and the
// HTTP statuses that mean "later". Errors the caller's context caused are never transient.
func isTransient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var t *transient
	if errors.As(err, &t) {
		return true
	}
	var he *Error
	var le *localError
	if errors.As(err, &he) || errors.As(err, &le) {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	// What is left came from the transport or the body: refused and reset connections, timeouts, EOFs.
	return true
}

// localError wraps failures of the local file system, which retrying the request does not fix.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// statusError turns an HTTP error answer into an error: transient for 408, 429 and 5xx, otherwise an *Error
// of the right kind, with the hub's X-Error-Code and X-Error-Message read as huggingface_hub reads them.
func (d *downloader) statusError(resp *http.Response, file string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := sanitize(resp.Header.Get("X-Error-Message"))
	if msg == "" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg = sanitize(string(body))
	}
	st := resp.StatusCode
	if st == http.StatusRequestTimeout || st == http.StatusTooManyRequests || st >= 500 {
		err := fmt.Errorf("%s answered %s", resp.Request.URL.Host, resp.Status)
		if msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return &transient{err: err, after: retryAfter(resp.Header.Get("Retry-After"))}
	}
	e := &Error{Ref: d.ref, File: file, Status: st, Detail: msg}
	tokenHint := "set HF_TOKEN to a token from https://huggingface.co/settings/tokens (or run `huggingface-cli login`, which writes $HF_HOME/token)"
	switch {
	case code == "GatedRepo":
		e.Kind = ErrAuth
		if d.s.Token == "" {
			e.Hint = "The model is gated: accept its terms at " + d.repoPage() + ", then " + tokenHint
		} else {
			e.Hint = "The model is gated and this token has no access: accept its terms at " + d.repoPage() +
				" with the account the token belongs to"
		}
	case code == "RevisionNotFound":
		e.Kind = ErrRevisionNotFound
		e.Hint = fmt.Sprintf("Check the branch, tag or commit after '@' (%q)", d.ref.Revision)
	case code == "EntryNotFound":
		e.Kind = ErrFileNotFound
	case code == "RepoNotFound" || st == http.StatusNotFound && file == "":
		e.Kind = ErrRepoNotFound
		if d.s.Token == "" {
			e.Hint = "Check the name; if the repository is private, " + tokenHint
		} else {
			e.Hint = "Check the name, and that the token can read the repository if it is private"
		}
	case st == http.StatusNotFound:
		e.Kind = ErrFileNotFound
	case st == http.StatusUnauthorized:
		e.Kind = ErrAuth
		if d.s.Token == "" {
			e.Hint = "The hub wants a token: " + tokenHint
		} else {
			e.Hint = "The hub rejected the token (invalid or expired): check HF_TOKEN"
		}
	case st == http.StatusForbidden:
		e.Kind = ErrAuth
		e.Hint = "The token lacks permission for this repository"
	default:
		e.Kind = ErrProtocol
	}
	return e
}

func (d *downloader) repoPage() string { return d.s.Endpoint + "/" + d.ref.Repo }

// retryAfter reads a Retry-After header in seconds (the date form is not worth the trouble here).
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, 5*time.Minute)
}

// sanitize keeps a server-provided message printable and short.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// backoff waits before retry number attempt (1-based): Backoff doubled each time, at most 30s, at least what
// the server asked for. It returns early with the context's error.
func (d *downloader) backoff(ctx context.Context, attempt int, err error) (time.Duration, error) {
	wait := d.s.Backoff << min(attempt-1, 16)
	wait = min(wait, 30*time.Second)
	var t *transient
	if errors.As(err, &t) && t.after > wait {
		wait = t.after
	}
	return wait, sleep(ctx, wait)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// apiURL is the model-info endpoint for a revision, with blob metadata (sizes, git and LFS hashes).
func (d *downloader) apiURL(rev string) string {
	return d.s.Endpoint + "/api/models/" + d.ref.Repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
}

// resolveURL is where a file of a commit is downloaded from; LFS files redirect from there to storage.
func (d *downloader) resolveURL(commit, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return d.s.Endpoint + "/" + d.ref.Repo + "/resolve/" + url.PathEscape(commit) + "/" + strings.Join(segs, "/")
}
