package server

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/node"
)

// The serving side of the node's link probes (node/linkprobe.go says why they exist): a peer's prober
// downloads node.LinkProbeBytes of zeros from here, and pings for the round trip.

// linkProbeWriteTimeout bounds serving one probe, which holds the node's only probe slot: a caller that does
// not read cannot keep it from everyone for longer (the server's --write-timeout is a minute). A link too slow
// for the whole download in it still gets a figure from what arrived.
const linkProbeWriteTimeout = 5 * time.Second

// linkProbes serves the probes (GET node.LinkProbePath and node.LinkPingPath); serving is whether a probe is
// being served: one at a time.
type linkProbes struct {
	serving atomic.Bool
}

// routes registers the probe endpoints on the admin group (behind the API key or a hop's proof).
func (p *linkProbes) routes(admin fiber.Router) {
	admin.Get(strings.TrimPrefix(node.LinkProbePath, "/admin/v1"), p.probe)
	admin.Get(strings.TrimPrefix(node.LinkPingPath, "/admin/v1"), p.ping)
}

// probe serves a probe: node.LinkProbeBytes of zeros, streamed, one probe at a time (503 while one is
// served), within linkProbeWriteTimeout.
func (p *linkProbes) probe(c *fiber.Ctx) error {
	if !p.serving.CompareAndSwap(false, true) {
		return apicore.Unavailable("another link probe is being served; retry later")
	}
	if err := c.Context().SetWriteDeadline(time.Now().Add(linkProbeWriteTimeout)); err != nil {
		p.serving.Store(false)
		return apicore.Unavailable("the link probe cannot be served on this connection")
	}
	c.Set(fiber.HeaderContentType, "application/octet-stream")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Context().SetBodyStream(&probeBody{left: node.LinkProbeBytes, done: func() { p.serving.Store(false) }}, node.LinkProbeBytes)
	return nil
}

// ping answers a probe's round-trip request with nothing.
func (p *linkProbes) ping(c *fiber.Ctx) error {
	return c.SendStatus(fiber.StatusOK)
}

// probeBody is a probe's zeros; fasthttp closes it once written (or when the connection failed).
type probeBody struct {
	left int64
	once sync.Once
	done func()
}

func (b *probeBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.left))
	clear(p[:n])
	b.left -= int64(n)
	return n, nil
}

func (b *probeBody) Close() error {
	b.once.Do(b.done)
	return nil
}
