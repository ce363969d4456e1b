package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// The render stage without a binary: the stream's writer over a run, and the rendering of a whole answer.

// writes records each Write: one per batch.
type writes struct {
	batches [][]byte
	fail    bool
}

func (w *writes) Write(p []byte) (int, error) {
	if w.fail {
		return 0, errors.New("the client left")
	}
	w.batches = append(w.batches, bytes.Clone(p))
	return len(p), nil
}

// rendered is what the completions encoder writes for events, one at a time: a stream's bytes do not depend on
// how its events are batched.
func rendered(events []engine.Event) string {
	enc := openai.CompletionsDialect{}.Encoder(apicore.Meta{ID: "cmpl-x", Created: 1, Model: "echo"}, 1)
	var b []byte
	for _, ev := range events {
		if ev.Final != nil {
			b, _ = enc.Final(b, ev.Choice, ev.Final)
			continue
		}
		b = enc.Event(b, ev)
	}
	return string(b)
}

func TestStreamWriter(t *testing.T) {
	t.Parallel()
	const n = 50
	var events []engine.Event
	for i := range n {
		events = append(events, tokenEvent(i))
	}
	events = append(events, finalEvent(n))
	cases := []struct {
		name string
		// queued: the generation emits everything before the writer starts (a batch from the engine).
		queued bool
		read   bool // through Read rather than WriteTo
	}{
		{"WriteTo, events queued behind the first", true, false},
		{"WriteTo, events as they come", false, false},
		{"Read", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := newRun(cancel)
			produce := func() {
				for _, ev := range events {
					if err := r.push(ctx, ev); err != nil {
						r.close(err)
						return
					}
				}
				r.close(nil)
			}
			if c.queued {
				produce()
			} else {
				go produce()
			}
			evs, closed, _ := r.take(nil, nil)
			var done atomic.Int32
			w := &streamWriter{req: testRequest(), enc: openai.CompletionsDialect{}.Encoder(apicore.Meta{ID: "cmpl-x", Created: 1, Model: "echo"}, 1),
				run: r, first: evs[0], evs: evs, next: 1, closed: closed, ctx: ctx, heartbeat: time.Hour,
				done: func() { done.Add(1); cancel() }}
			var out writes
			if c.read {
				b, err := io.ReadAll(w)
				if err != nil {
					t.Fatal(err)
				}
				out.batches = [][]byte{b}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := w.WriteTo(&out); err != nil {
				t.Fatal(err)
			}
			got := string(bytes.Join(out.batches, nil))
			if want := rendered(events); got != want {
				t.Fatalf("the stream:\n%s\nwant:\n%s", got, want)
			}
			if !strings.HasSuffix(got, "data: [DONE]\n\n") {
				t.Errorf("the stream does not end with [DONE]")
			}
			if !c.read {
				// The first token goes out alone, before the writer looks for more.
				if first := rendered(events[:1]); string(out.batches[0]) != first {
					t.Errorf("first write %q, want the first event alone %q", out.batches[0], first)
				}
				if c.queued && len(out.batches) != 2 {
					t.Errorf("%d writes for events queued at once, want 2 (the first event, then the rest)", len(out.batches))
				}
			}
			if done.Load() != 1 {
				t.Errorf("cleanup ran %d times, want once", done.Load())
			}
			if err := w.Close(); err != nil || done.Load() != 1 {
				t.Errorf("a second Close: %v, cleanup ran %d times", err, done.Load())
			}
		})
	}
}

// A failed write is a client that left: the generation is cancelled and the writer cleans up once.
func TestStreamWriterClientGone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRun(cancel)
	go pushUntilCancelled(ctx, r)
	evs, closed, _ := r.take(nil, nil)
	var done atomic.Int32
	w := &streamWriter{req: testRequest(), enc: openai.CompletionsDialect{}.Encoder(apicore.Meta{ID: "cmpl-x"}, 1), run: r, first: evs[0],
		evs: evs, next: 1, closed: closed, ctx: ctx, heartbeat: time.Hour, done: func() { done.Add(1) }}
	if _, err := w.WriteTo(&writes{fail: true}); err == nil {
		t.Fatal("WriteTo succeeded on a failed writer")
	}
	<-r.finished // cancelled: it would never end otherwise
	if done.Load() != 1 {
		t.Errorf("cleanup ran %d times, want once", done.Load())
	}
}

// A response that is never written (the client left before its headers) still ends its run.
func TestStreamWriterClosedUnwritten(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRun(cancel)
	go pushUntilCancelled(ctx, r)
	evs, closed, _ := r.take(nil, nil)
	var done atomic.Int32
	w := &streamWriter{req: testRequest(), enc: openai.CompletionsDialect{}.Encoder(apicore.Meta{ID: "cmpl-x"}, 1), run: r, first: evs[0],
		evs: evs, next: 1, closed: closed, ctx: ctx, heartbeat: time.Hour, done: func() { done.Add(1) }}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	<-r.finished
	if done.Load() != 1 {
		t.Errorf("cleanup ran %d times, want once", done.Load())
	}
}

// testRequest is a request of a pipeline with no observers, for a stream's writer.
func testRequest() *request { return &request{p: &Pipeline{}, stream: true, streaming: true} }

// BenchmarkStreamWriter: a token through the stream's writer, from the run's queue to the connection, as
// SSE completion chunks (b.N tokens, then a final); ns/op and allocs/op are per token.
func BenchmarkStreamWriter(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRun(cancel)
	tok := engine.Event{Token: &engine.Token{ID: 7, Text: " word"}}
	go func() {
		for range b.N {
			if err := r.push(ctx, tok); err != nil {
				r.close(err)
				return
			}
		}
		r.close(nil)
	}()
	evs, closed, _ := r.take(nil, nil)
	req := testRequest()
	req.p.observe(&recentObserver{ring: &Recent{}}, false)
	w := &streamWriter{req: req, enc: openai.CompletionsDialect{Usage: true}.Encoder(apicore.Meta{ID: "cmpl-0123456789abcdef01234567", Created: 1, Model: "echo"}, 1),
		run: r, first: evs[0], evs: evs, next: 1, closed: closed, ctx: ctx, heartbeat: time.Hour, done: cancel}
	b.ReportAllocs()
	b.ResetTimer()
	_, _ = w.WriteTo(io.Discard)
}

// BenchmarkAnswer: a whole one-token chat answer rendered into the response.
func BenchmarkAnswer(b *testing.B) {
	app := fiber.New()
	meta := apicore.Meta{ID: "chatcmpl-0123456789abcdef01234567", Created: 1, Model: "echo", Fingerprint: "fp_0123456789ab",
		Route: &apicore.Route{EntryNode: "node-a", DecodeNode: "node-a", DecodeInstance: "echo-1", Reason: "least loaded"}}
	res := apicore.NewResults(1)
	res.Add(engine.Event{Token: &engine.Token{Text: "hi"}})
	res.Add(engine.Event{Final: &engine.Final{FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 1}}})
	fctx := &fasthttp.RequestCtx{}
	c := app.AcquireCtx(fctx)
	defer app.ReleaseCtx(c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sendAnswer(c, openai.ChatDialect{}, meta, res)
		c.Response().ResetBody()
	}
}
