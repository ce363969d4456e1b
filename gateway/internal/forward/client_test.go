package forward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestIdleTimeout: a hop gives up on an owner that sends nothing for the idle timeout, before its headers
// (Send fails) or during its body (a read fails), and never on one that sends a sign of life in time: an
// informational 102 before the headers, body bytes after them, for several times the timeout.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	const every = 100 * time.Millisecond
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/processing", func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get(HeaderKeepalive); got != "333" {
			t.Errorf("%s: %q, want a third of the idle timeout", HeaderKeepalive, got)
		}
		for range 3 * int(idle/every) {
			w.WriteHeader(http.StatusProcessing)
			time.Sleep(every)
		}
		io.WriteString(w, "done")
	})
	mux.HandleFunc("/stalls", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/trickle", func(w http.ResponseWriter, r *http.Request) {
		for range 3 * int(idle/every) {
			io.WriteString(w, ".")
			w.(http.Flusher).Flush()
			time.Sleep(every)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before the server closes: it waits for its handlers
	c := NewClient(nil, nil)
	c.SetIdleTimeout(idle)
	target := Target{HostPort: strings.TrimPrefix(srv.URL, "http://")}
	send := func(path string) (*http.Response, error) {
		return c.Send(context.Background(), target, Request{Method: "GET", Path: path, RequestID: "r"})
	}

	if _, err := send("/silent"); !errors.Is(err, ErrIdle) {
		t.Errorf("a silent owner: %v, want ErrIdle", err)
	}
	resp, err := send("/processing")
	if err != nil {
		t.Fatalf("an owner sending 102s: %v", err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "done" {
		t.Errorf("an owner sending 102s: %q %v", b, err)
	}
	resp.Body.Close()
	resp, err = send("/stalls")
	if err != nil {
		t.Fatalf("an owner that stalls after its headers: %v", err)
	}
	if b, err := io.ReadAll(resp.Body); !errors.Is(err, ErrIdle) || string(b) != "first" {
		t.Errorf("an owner that stalls after its headers: %q %v, want the first bytes, then ErrIdle", b, err)
	}
	resp.Body.Close()
	resp, err = send("/trickle")
	if err != nil {
		t.Fatalf("an owner trickling its body: %v", err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 3*int(idle/every) {
		t.Errorf("an owner trickling its body: %d bytes, %v", len(b), err)
	}
	resp.Body.Close()
}

// TestKeepaliveEvery: the interval an owner keeps a hop alive at is the hop's ask, within bounds.
func TestKeepaliveEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"5000", 5 * time.Second, true},
		{"1", minKeepalive, true},
		{"999999999", maxKeepalive, true},
		{"0", 0, false},
		{"-5", 0, false},
		{"", 0, false},
		{"1s", 0, false},
	} {
		if got, ok := KeepaliveEvery(tc.header); got != tc.want || ok != tc.ok {
			t.Errorf("%q: %s %v, want %s %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}
