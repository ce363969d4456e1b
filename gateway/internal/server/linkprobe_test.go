package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gofiber/fiber/v2"
)

// TestLinkProbeServe: a gateway serves a probe as linkProbeBytes streamed over real TCP on loopback, which
// timeBody turns into a goodput; while one probe is being served another is refused with 503, and once its
// body is written the slot is free for the next.
func TestLinkProbeServe(t *testing.T) {
	t.Parallel()
	// The handlers alone on a fiber app (the whole server needs a cluster agent; the gateway's cluster tests
	// run them behind the hop's credential).
	s := &Server{log: slog.New(slog.DiscardHandler)}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: s.handleError})
	app.Get(linkProbePath, s.linkProbe)
	app.Get(linkPingPath, s.linkPing)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })
	url := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 30 * time.Second}

	// While a probe is being served, another is refused.
	s.probe.serving.Store(true)
	busy, err := client.Get(url + linkProbePath)
	if err != nil {
		t.Fatal(err)
	}
	busy.Body.Close()
	if busy.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a probe while one is served: %d, want 503", busy.StatusCode)
	}
	s.probe.serving.Store(false)

	for i := range 2 { // the second shows the first released the slot once written
		deadline := time.Now().Add(20 * time.Second)
		for s.probe.serving.Load() {
			if time.Now().After(deadline) {
				t.Fatal("the probe's slot was not released after its body was written")
			}
			time.Sleep(5 * time.Millisecond)
		}
		resp, err := client.Get(url + linkProbePath)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != linkProbeBytes {
			t.Fatalf("probe %d: %d, %d bytes", i, resp.StatusCode, resp.ContentLength)
		}
		goodput, n, err := timeBody(resp.Body, linkProbeBytes)
		resp.Body.Close()
		if err != nil || n != linkProbeBytes || !(goodput > 0) {
			t.Fatalf("timed %d bytes at %v B/s: %v", n, goodput, err)
		}
		t.Logf("loopback goodput %.0f MB/s", goodput/1e6)
	}
	ping, err := client.Get(url + linkPingPath)
	if err != nil || ping.StatusCode != http.StatusOK {
		t.Fatalf("ping: %v %v", ping, err)
	}
	ping.Body.Close()
}

// TestTimeBody: what a probe's download gives: the bytes after the first read over the time from it to the
// last; a download cut short counts if enough arrived after its first bytes, and one that is too small, or
// fails early, is an error.
func TestTimeBody(t *testing.T) {
	t.Parallel()
	slow := func(n int) io.Reader { // 64 KiB every 2 ms
		return &pacedReader{r: bytes.NewReader(make([]byte, n)), every: 2 * time.Millisecond}
	}
	cut := func(n int) io.Reader {
		return io.MultiReader(slow(n), iotest.ErrReader(errors.New("deadline exceeded")))
	}
	for _, tc := range []struct {
		name   string
		r      io.Reader
		wantN  int64
		wantOK bool
	}{
		{"whole", slow(1 << 20), 1 << 20, true},
		{"limit", slow(2 << 20), 1 << 20, true},
		{"cut short after enough", cut(512 << 10), 512 << 10, true},
		{"cut short too early", cut(64 << 10), 64 << 10, false},
		{"too small", slow(32 << 10), 32 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, n, err := timeBody(tc.r, 1<<20)
			if n != tc.wantN || (err == nil) != tc.wantOK || (tc.wantOK && !(g > 0)) {
				t.Fatalf("%v B/s over %d bytes, %v", g, n, err)
			}
			// 64 KiB per 2 ms is at most 32 MB/s (sleeps only stretch it).
			if tc.wantOK && g > 33e6 {
				t.Errorf("goodput %v B/s, above the pace's bound", g)
			}
		})
	}
}

// pacedReader reads at most 64 KiB at a time, sleeping before each read but the first.
type pacedReader struct {
	r       io.Reader
	every   time.Duration
	started bool
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.started {
		time.Sleep(p.every)
	}
	p.started = true
	return p.r.Read(b[:min(len(b), 64<<10)])
}
