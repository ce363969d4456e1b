package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Client sends hops to owners' gateways. It keeps connections to them alive between requests.
type Client struct {
	http *http.Client
	key  []byte
	now  func() time.Time
}

// Dial and handshake bounds of one hop; the response itself is bounded by the request's own deadline, since
// an owner answers a non-streamed request only when the generation is done.
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
// the owner sees as its client leaving.
func (c *Client) Send(ctx context.Context, t Target, r Request) (*http.Response, error) {
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
	}
	return resp, err
}

// CloseIdle closes idle connections (at shutdown).
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }
