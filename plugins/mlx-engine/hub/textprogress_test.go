package hub_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// script is a download as Resolve reports it: 3 files, 1.5 GiB, 12 MiB resumed, one retry, at a steady
// 40 MiB/s, then a second Resolve that finds everything cached, then a failure.
func script() []hub.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := hub.Event{Repo: "mlx-community/Llama-3.2-1B-Instruct-4bit", Revision: "main", Commit: "0123456789abcdef0123456789abcdef01234567"}
	ev := func(kind hub.EventKind, at time.Duration, mod func(*hub.Event)) hub.Event {
		e := base
		e.Kind, e.Time = kind, t0.Add(at)
		mod(&e)
		return e
	}
	const total, resumed, rate = 1536 << 20, 12 << 20, 40 << 20
	var out []hub.Event
	out = append(out, ev(hub.EventStart, 0, func(e *hub.Event) { e.Files, e.Cached, e.Total, e.Bytes = 3, 4, total, resumed }))
	for s := 1; s <= 38; s++ {
		moved := int64(s) * rate
		out = append(out, ev(hub.EventProgress, time.Duration(s)*time.Second, func(e *hub.Event) {
			e.Total, e.Bytes, e.Transferred = total, min(resumed+moved, total), moved
		}))
		switch s {
		case 3:
			out = append(out, ev(hub.EventFileDone, 3*time.Second, func(e *hub.Event) { e.File = "config.json"; e.Total, e.Bytes = total, resumed+3*rate }))
		case 17:
			out = append(out, ev(hub.EventRetry, 17*time.Second, func(e *hub.Event) {
				e.File, e.Attempt, e.Wait, e.Err = "model.safetensors", 1, time.Second, errors.New("unexpected EOF")
				e.Total, e.Bytes = total, resumed+17*rate
			}))
		}
	}
	out = append(out,
		ev(hub.EventFileDone, 38*time.Second, func(e *hub.Event) { e.File = "model.safetensors"; e.Total, e.Bytes = total, total }),
		ev(hub.EventFileDone, 38*time.Second, func(e *hub.Event) { e.File = "tokenizer.json"; e.Total, e.Bytes = total, total }),
		ev(hub.EventDone, 38*time.Second, func(e *hub.Event) {
			e.Total, e.Bytes, e.Transferred, e.Dir = total, total, total-resumed, "/cache/models--mlx-community--Llama-3.2-1B-Instruct-4bit/snapshots/0123456789abcdef0123456789abcdef01234567"
		}),
	)
	return out
}

func TestTextProgressGolden(t *testing.T) {
	t.Parallel()
	cached := hub.Event{Kind: hub.EventDone, Repo: "org/model", Revision: "v1", Dir: "/cache/models--org--model/snapshots/abc", Cached: 7}
	failed := hub.Event{Kind: hub.EventDone, Repo: "org/model", Revision: "main",
		Err: &hub.Error{Ref: hub.Ref{Repo: "org/model", Revision: "main"}, Kind: hub.ErrRepoNotFound, Status: 404, Hint: "Check the name"}}
	tests := []struct {
		name   string
		bar    bool
		events []hub.Event
	}{
		{"log", false, script()},
		{"bar", true, script()},
		{"cached", false, []hub.Event{cached}},
		{"failed", false, []hub.Event{failed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := hub.NewTextProgress(&buf)
			p.Bar = tt.bar
			for _, e := range tt.events {
				p.Report(e)
			}
			golden := filepath.Join("testdata", "progress_"+tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("output differs from %s (run with -update to accept):\n%s", golden, buf.Bytes())
			}
		})
	}
}
