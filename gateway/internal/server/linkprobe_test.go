package server

import (
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/node"
)

// TestLinkProbeServe: a gateway serves a probe as node.LinkProbeBytes streamed over real TCP on loopback, which
// node.TimeBody turns into a goodput; while one probe is being served another is refused with 503, and once its
// body is written the slot is free for the next.
func TestLinkProbeServe(t *testing.T) {
	t.Parallel()
	// The handlers alone on a fiber app (the whole server needs a cluster agent; the gateway's cluster tests
	// run them behind the hop's credential).
	s := &Server{log: slog.New(slog.DiscardHandler)}
	p := &linkProbes{}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: s.handleError})
	app.Get(node.LinkProbePath, p.probe)
	app.Get(node.LinkPingPath, p.ping)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })
	url := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 30 * time.Second}

	// While a probe is being served, another is refused.
	p.serving.Store(true)
	busy, err := client.Get(url + node.LinkProbePath)
	if err != nil {
		t.Fatal(err)
	}
	busy.Body.Close()
	if busy.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a probe while one is served: %d, want 503", busy.StatusCode)
	}
	p.serving.Store(false)

	for i := range 2 { // the second shows the first released the slot once written
		deadline := time.Now().Add(20 * time.Second)
		for p.serving.Load() {
			if time.Now().After(deadline) {
				t.Fatal("the probe's slot was not released after its body was written")
			}
			time.Sleep(5 * time.Millisecond)
		}
		resp, err := client.Get(url + node.LinkProbePath)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != node.LinkProbeBytes {
			t.Fatalf("probe %d: %d, %d bytes", i, resp.StatusCode, resp.ContentLength)
		}
		goodput, n, err := node.TimeBody(resp.Body, node.LinkProbeBytes)
		resp.Body.Close()
		if err != nil || n != node.LinkProbeBytes || !(goodput > 0) {
			t.Fatalf("timed %d bytes at %v B/s: %v", n, goodput, err)
		}
		t.Logf("loopback goodput %.0f MB/s", goodput/1e6)
	}
	ping, err := client.Get(url + node.LinkPingPath)
	if err != nil || ping.StatusCode != http.StatusOK {
		t.Fatalf("ping: %v %v", ping, err)
	}
	ping.Body.Close()
}
