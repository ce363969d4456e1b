package openai_test

import (
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// streamed is what an encoder of d writes for a generation of n choices, event by event, and whether the
// stream said it was over after its last event (and not before).
func streamed(t *testing.T, d apicore.Dialect, n int, events []engine.Event) []byte {
	t.Helper()
	enc := d.Encoder(meta, n)
	b := enc.Start(nil)
	for i, ev := range events {
		if ev.Final == nil {
			b = enc.Event(b, ev)
			continue
		}
		var over bool
		b, over = enc.Final(b, ev.Choice, ev.Final)
		if last := i == len(events)-1; over != last {
			t.Fatalf("event %d: over %v, want %v", i, over, last)
		}
	}
	return b
}

// TestStreamGolden: the SSE streams of chat completions and completions, whole, as a client reads them: the
// role first (chat), held-back and progress events left out, a final per choice, the usage chunk when asked
// for, then [DONE] once every choice ended.
func TestStreamGolden(t *testing.T) {
	t.Parallel()
	lp := apitest.Logprob("Hi", -0.25, -2)
	final := func(choice int, text string) engine.Event {
		f := apitest.Final(engine.FinishStop, engine.Usage{PromptTokens: 5, CompletionTokens: 2})
		f.Text = text
		return engine.Event{Choice: choice, Final: f}
	}
	cases := []struct {
		name   string
		d      apicore.Dialect
		n      int
		events []engine.Event
		withHB bool
	}{
		{"chat_stream_n2_usage.txt", openai.ChatDialect{Usage: true}, 2, []engine.Event{
			{Choice: 0, Token: &engine.Token{Text: "Hi", Logprob: lp}},
			{Choice: 1, Token: &engine.Token{Reasoning: "hm"}},
			{Choice: 1, Progress: &engine.Progress{}},
			{Choice: 1, Token: &engine.Token{}},
			final(0, ""),
			{Choice: 1, Token: &engine.Token{Text: "Yo"}},
			final(1, " there"),
		}, false},
		{"chat_stream_logprobs.txt", openai.ChatDialect{Logprobs: true}, 1, []engine.Event{
			{Token: &engine.Token{Text: "Hi", Logprob: lp}},
			final(0, ""),
		}, true},
		{"completions_stream_usage.txt", openai.CompletionsDialect{Usage: true, Logprobs: true}, 1, []engine.Event{
			{Token: &engine.Token{Text: "Hi", Logprob: lp}},
			{Token: &engine.Token{Text: " you"}},
			final(0, "!"),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := streamed(t, c.d, c.n, c.events)
			if c.withHB {
				got = c.d.Encoder(meta, 1).Heartbeat(got)
			}
			apitest.Golden(t, c.name, got)
		})
	}
}

// TestStreamFail: an error that ends a stream is a data: line of OpenAI's envelope.
func TestStreamFail(t *testing.T) {
	t.Parallel()
	for _, d := range []apicore.Dialect{openai.ChatDialect{}, openai.CompletionsDialect{}} {
		got := string(d.Encoder(meta, 1).Fail(nil, apicore.Unavailable("gone")))
		want := "data: " + string(apicore.Unavailable("gone").AppendEnvelope(nil)) + "\n\n"
		if got != want {
			t.Errorf("%T: %q, want %q", d, got, want)
		}
	}
}

// BenchmarkEncoderEvent: one token as an SSE chunk, chat and completions.
func BenchmarkEncoderEvent(b *testing.B) {
	meta := apicore.Meta{ID: "chatcmpl-0123456789abcdef01234567", Created: 1, Model: "echo", Fingerprint: "fp_0123456789ab"}
	tok := engine.Event{Token: &engine.Token{ID: 7, Text: " word"}}
	for _, c := range []struct {
		name string
		d    apicore.Dialect
	}{{"chat", openai.ChatDialect{Usage: true}}, {"completions", openai.CompletionsDialect{Usage: true}}} {
		b.Run(c.name, func(b *testing.B) {
			enc := c.d.Encoder(meta, 1)
			buf := enc.Event(nil, tok)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				buf = enc.Event(buf[:0], tok)
			}
		})
	}
}
