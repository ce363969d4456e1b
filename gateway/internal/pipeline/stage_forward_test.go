package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/router"
)

// fakeCluster is a cluster whose gateways answer at the addresses a test gives.
type fakeCluster struct {
	api    map[string]string // node: host:port
	speeds *cluster.Speeds
}

func (f fakeCluster) Snapshot() *cluster.Snapshot { return &cluster.Snapshot{} }
func (f fakeCluster) Speeds() *cluster.Speeds     { return f.speeds }
func (f fakeCluster) APIEndpoint(node string) (string, bool, bool) {
	a, ok := f.api[node]
	return a, false, ok
}

// TestForward: a request placed on another node goes to that node's gateway with the decision pinned, and its
// answer comes back as the owner gave it, whole or streamed; each gateway records it (the entry as forwarded,
// with the owner's usage and timings read from the answer; the owner as a hop), and the entry's observers
// see no tokens.
func TestForward(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream ", stream), func(t *testing.T) {
			t.Parallel()
			events := []engine.Event{apitest.Text("he"), apitest.Text("llo"),
				{Final: apitest.Final(engine.FinishStop, engine.Usage{PromptTokens: 3, CompletionTokens: 2})}}
			owner := newNodeFixture(t, "n2", events...)
			ownerURL := owner.serve(t)
			entry := newStageFixture(t)
			entry.router.decision = router.Decision{DecodeInstance: "n2-0", DecodeNode: "n2", Reason: "n2 is idle"}
			entry.p.cluster = fakeCluster{api: map[string]string{"n2": strings.TrimPrefix(ownerURL, "http://")}}
			entry.p.fwd = forward.NewClient(nil, nil)
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			if stream { // usage comes in a stream only when asked for
				body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			status, got := post(t, entry.serve(t), body)
			if status != 200 || !strings.Contains(got, `"he`) || !strings.Contains(got, `llo"`) {
				t.Fatalf("%d %s", status, got)
			}
			rec := entry.recorded(t)
			if rec.Status != 200 || !rec.Route.Forwarded || rec.Route.DecodeNode != "n2" || rec.Route.Reason != "n2 is idle" ||
				rec.Usage == nil || rec.Usage.CompletionTokens != 2 || rec.Timings == nil || rec.Hop {
				t.Errorf("the entry recorded %+v", rec)
			}
			if want := "decided remote n2; finished 200"; strings.Join(entry.life.got(), "; ") != want {
				t.Errorf("the entry's lifecycle %q, want %q", entry.life.got(), want)
			}
			if rec := owner.recorded(t); rec.Status != 200 || !rec.Hop || !rec.Route.Forwarded {
				t.Errorf("the owner recorded %+v", rec)
			}
		})
	}
}
