package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Client sends hops to owners' gateways. It keeps connections to them alive between requests.
type Client struct {
	http *http.Client
	key  []byte
	now  func() time.Time
	idle time.Duration
}

// Dial and handshake bounds of one hop. The response is bounded by the idle timeout (SetIdleTimeout): the
// owner sends something at least every third of it while it works (see HeaderKeepalive), so a frozen or
// vanished owner is noticed in seconds, and a long generation is never cut.
const (
	dialTimeout      = 5 * time.Second
	handshakeTimeout = 5 * time.Second
)

// NewClient returns a client that proves hops with key (nil: an unauthenticated cluster, where hops carry the
// client's own API key instead) and trusts owners' TLS certificates as tlsConfig says.
func NewClient(key []byte, tlsConfig *tls.Config) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: handshakeTimeout,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		// Streams pass through as they come: no transparent gzip in between.
		DisableCompression: true,
	}
	return &Client{http: &http.Client{Transport: tr}, key: key, now: time.Now}
}

// SetIdleTimeout bounds how long a hop waits for any sign of life from the owner: its response's headers, a
// keep-alive (an informational 102 before the headers), or body bytes. 0: no bound but the caller's context.
func (c *Client) SetIdleTimeout(d time.Duration) { c.idle = d }

// IdleTimeout is the bound SetIdleTimeout set.
func (c *Client) IdleTimeout() time.Duration { return c.idle }

// ErrIdle is the error of a hop whose owner sent nothing for the idle timeout: frozen, asleep or cut off.
var ErrIdle = errors.New("the owner sent nothing within the hop idle timeout")

// KeepaliveEvery is how often an owner sends a sign of life for a hop that asked for one every ms
// milliseconds (the value of HeaderKeepalive), bounded so that a hop cannot make it spin or fall silent.
func KeepaliveEvery(header string) (time.Duration, bool) {
	ms, err := strconv.ParseInt(header, 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return min(max(time.Duration(ms)*time.Millisecond, minKeepalive), maxKeepalive), true
}

const (
	minKeepalive = 100 * time.Millisecond
	maxKeepalive = 10 * time.Second
)

// idleWatch cancels a hop's context when the owner has been silent for the idle timeout.
type idleWatch struct {
	d      time.Duration
	timer  *time.Timer
	fired  atomic.Bool
	cancel context.CancelFunc
}

func watchIdle(ctx context.Context, d time.Duration) (context.Context, *idleWatch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &idleWatch{d: d, cancel: cancel}
	w.timer = time.AfterFunc(d, func() {
		w.fired.Store(true)
		cancel()
	})
	return ctx, w
}

func (w *idleWatch) touch() { w.timer.Reset(w.d) }

func (w *idleWatch) stop() {
	w.timer.Stop()
	w.cancel()
}

// explain turns the cancellation the watch caused into ErrIdle.
func (w *idleWatch) explain(err error) error {
	if err != nil && w.fired.Load() {
		return fmt.Errorf("%w (%s)", ErrIdle, w.d)
	}
	return err
}

// idleBody is a hop's response body under its idle watch: each read that brings bytes restarts the watch,
// and Close ends it.
type idleBody struct {
	io.ReadCloser
	w *idleWatch
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.touch()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.w.explain(err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	err := b.ReadCloser.Close()
	b.w.stop()
	return err
}

// Target is an owner's API.
type Target struct {
	HostPort string
	TLS      bool
}

// Request is one hop.
type Request struct {
	Method, Path string
	Body         []byte
	RequestID    string
	Route        Route
	// Header holds the client's headers worth passing on: Content-Type, Accept, Anthropic-Version, the trace
	// context (Traceparent, Tracestate), and Authorization in a cluster without a secret.
	Header http.Header
	// BodyDone, if set, is called once the body has been sent or the hop failed: the caller may reuse its
	// bytes from then on.
	BodyDone func()
}

// onClose is a request body that says when the transport is done with it.
type onClose struct {
	*bytes.Reader
	once sync.Once
	done func()
}

func (b *onClose) Close() error {
	b.once.Do(b.done)
	return nil
}

// Send forwards r to t. The caller reads and closes the response's body; cancelling ctx aborts the hop, which
// the owner sees as its client leaving. With an idle timeout, an owner silent for that long fails the hop with
// ErrIdle: Send's error before the headers, a read's after.
func (c *Client) Send(ctx context.Context, t Target, r Request) (*http.Response, error) {
	var idle *idleWatch
	if c.idle > 0 {
		ctx, idle = watchIdle(ctx, c.idle)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(int, textproto.MIMEHeader) error {
				idle.touch()
				return nil
			},
		})
	}
	scheme := "http://"
	if t.TLS {
		scheme = "https://"
	}
	done := r.BodyDone
	if done == nil {
		done = func() {}
	}
	body := &onClose{Reader: bytes.NewReader(r.Body), done: done}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+t.HostPort+r.Path, body)
	if err != nil {
		body.Close()
		if idle != nil {
			idle.stop()
		}
		return nil, err
	}
	req.ContentLength = int64(len(r.Body))
	// Traceparent and Tracestate carry the entry's trace span (W3C Trace Context), so the owner's joins it.
	for _, h := range []string{"Content-Type", "Accept", "Anthropic-Version", "Traceparent", "Tracestate"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	route := r.Route.Encode()
	req.Header.Set("X-Request-Id", r.RequestID)
	req.Header.Set(HeaderHop, strconv.Itoa(MaxHops))
	req.Header.Set(HeaderRoute, route)
	if c.idle > 0 {
		req.Header.Set(HeaderKeepalive, strconv.FormatInt(max(c.idle/3, time.Millisecond).Milliseconds(), 10))
	}
	if c.key != nil {
		req.Header.Set(HeaderAuth, Proof(c.key, r.Method, r.Path, r.RequestID, route, r.Body, c.now()))
	} else {
		for _, h := range []string{"Authorization", "X-Api-Key"} {
			if v := r.Header.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		body.Close() // the transport closes it too; this covers a failure before it got it
		if idle != nil {
			idle.stop()
			err = idle.explain(err)
		}
		return nil, err
	}
	if idle != nil {
		idle.touch()
		resp.Body = &idleBody{ReadCloser: resp.Body, w: idle}
	}
	return resp, nil
}

// CloseIdle closes idle connections (at shutdown).
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }
