package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 30 * time.Second

// maxBody bounds what the client reads of an answer: the cluster's state of a large cluster is a few MiB.
const maxBody = 64 << 20

// maxErrorBody bounds what the client reads of an error answer.
const maxErrorBody = 1 << 20

// Client calls one gateway's API. It is safe for concurrent use.
type Client struct {
	base     string
	http     *http.Client
	apiKey   string
	adminKey string
	timeout  time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sets the key sent with reads (and with writes when no admin key is set).
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithAdminKey sets the key sent with the admin API's writes and its admin-only reads (the keyring).
func WithAdminKey(key string) Option { return func(c *Client) { c.adminKey = key } }

// WithHTTPClient sets the HTTP client, for example one that trusts a gateway's TLS certificate.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout sets the timeout of calls whose context has no deadline (DefaultTimeout otherwise).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// New returns a client of the gateway at baseURL (scheme, host and port, such as http://127.0.0.1:8000).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: http.DefaultClient, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL is the gateway's URL the client calls.
func (c *Client) BaseURL() string { return c.base }

// Error is an answer other than 2xx, with the fields of the OpenAI error envelope
// ({"error": {"message", "type", "param", "code"}}) when the gateway sent one.
type Error struct {
	Method string
	URL    string
	Status int
	// Message is the envelope's message, else the body as text (its start).
	Message string
	Type    string
	Param   string
	Code    string
	// Body is the answer as it came (at most 1 MiB).
	Body []byte
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s: %d", e.Method, e.URL, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// AsError returns err's *Error, or nil when err is not (or does not wrap) one.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// StatusOf is the HTTP status of err's *Error; 0 when err is nil or no answer came.
func StatusOf(err error) int {
	if e := AsError(err); e != nil {
		return e.Status
	}
	return 0
}

// ReadError reads a non-2xx answer into an *Error (it reads and closes nothing else of resp). It is for
// callers that send their own requests to the gateway (a stream, say) and want its errors in this form.
func ReadError(resp *http.Response) *Error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode, Body: data}
	if resp.Request != nil {
		e.Method, e.URL = resp.Request.Method, resp.Request.URL.String()
	}
	decodeError(e, data)
	return e
}

// decodeError fills e from an OpenAI error envelope, or from /healthz's {"status", "error": text}, or with
// the start of the body as text.
func decodeError(e *Error, body []byte) {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   string `json:"param"`
			Code    any    `json:"code"`
		}
		var text string
		switch {
		case json.Unmarshal(env.Error, &obj) == nil && obj.Message != "":
			e.Message, e.Type, e.Param = obj.Message, obj.Type, obj.Param
			if obj.Code != nil {
				e.Code = fmt.Sprint(obj.Code)
			}
			return
		case json.Unmarshal(env.Error, &text) == nil && text != "":
			e.Message = text
			return
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	e.Message = s
}

// Unreachable is the error of a request to u that got no answer (err from http.Client.Do): the gateway is
// down, the address wrong, or the deadline passed. A cancelled context stays recognisable with errors.Is.
func Unreachable(method, u string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: no answer: %w", method, u, err)
	}
	return fmt.Errorf("%s %s: cannot reach duet there (is it running, and is the address right?): %w", method, u, err)
}

// Key says which key a call sends.
type Key int

const (
	// APIKey is the key of reads.
	APIKey Key = iota
	// AdminKey is the key of writes: the admin key, or the API key when no admin key is set.
	AdminKey
)

// Call sends a request to path (with its query, if any) with body as JSON (none when nil), and decodes a 2xx
// answer into out (when not nil). It returns the answer's status; an answer other than 2xx is an *Error. The
// typed methods are built on it; it serves the endpoints they do not cover.
func (c *Client) Call(ctx context.Context, key Key, method, path string, body, out any) (int, error) {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.Authorize(req, key)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, Unreachable(method, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, ReadError(resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if len(data) > maxBody {
		return resp.StatusCode, fmt.Errorf("%s %s: the answer is over %d MiB", method, u, maxBody>>20)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: the answer is not what the client expects: %w", method, u, err)
		}
	}
	return resp.StatusCode, nil
}

// Authorize sets the request's Authorization header to the key the call sends (none without keys).
func (c *Client) Authorize(req *http.Request, key Key) {
	k := c.apiKey
	if key == AdminKey && c.adminKey != "" {
		k = c.adminKey
	}
	if k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
}

// HTTPClient is the HTTP client the client sends with, for callers that stream from the same gateway.
func (c *Client) HTTPClient() *http.Client { return c.http }

func (c *Client) get(ctx context.Context, key Key, path string, out any) error {
	_, err := c.Call(ctx, key, http.MethodGet, path, nil, out)
	return err
}

func (c *Client) send(ctx context.Context, method, path string, body, out any) error {
	_, err := c.Call(ctx, AdminKey, method, path, body, out)
	return err
}
