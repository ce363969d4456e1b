package enginetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/duet-ai/duet/sdk/engine"
)

// RunEngine runs the suite against any Engine, e.g. a client the caller connected itself.
func RunEngine(t *testing.T, e engine.Engine, cfg Config) {
	t.Helper()
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*cfg.Timeout)
	defer cancel()

	if err := e.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	desc, err := e.Load(ctx, engine.LoadRequest{Model: cfg.Model, Options: cfg.LoadOptions})
	if err != nil {
		t.Fatalf("Load(%q): %v", cfg.Model, err)
	}
	s := &suite{e: e, cfg: cfg, desc: desc}
	checks := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Describe", s.describe},
		{"StreamShape", s.streamShape},
		{"GreedyIsDeterministic", s.greedyDeterministic},
		{"SeedIsDeterministic", s.seedDeterministic},
		{"MaxTokens", s.maxTokens},
		{"StopString", s.stopString},
		{"CompletionPrompt", s.completionPrompt},
		{"TokenPrompt", s.tokenPrompt},
		{"Logprobs", s.logprobs},
		{"TokenizeMatchesUsage", s.tokenizeMatchesUsage},
		{"Cancel", s.cancel},
		{"ConsumerGone", s.consumerGone},
		{"Concurrent", s.concurrent},
		{"Errors", s.errors},
		{"Stats", s.stats},
		{"Choices", s.choices},
		{"ForcedToolCall", s.forcedToolCall},
		{"ToolChoiceNone", s.toolChoiceNone},
		{"JSONSchema", s.jsonSchema},
		{"LogitBias", s.logitBias},
		{"Unload", s.unload}, // last: it unloads the instance
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if why, skip := cfg.Skip[c.name]; skip {
				t.Skip(why)
			}
			c.fn(t)
		})
	}
}

type suite struct {
	e    engine.Engine
	cfg  Config
	desc engine.Description
}

// result is a collected generation stream.
type result struct {
	events []engine.Event
	tokens []engine.Token
	text   string
	final  *engine.Final
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) chat(sampling engine.Sampling) engine.GenerateRequest {
	return engine.GenerateRequest{
		InstanceID: s.desc.InstanceID,
		Messages: []engine.Message{
			{Role: "system", Content: "You are a helpful assistant."},
			{Role: "user", Content: s.cfg.Prompt},
		},
		Sampling: sampling,
	}
}

// generate runs a request and checks the invariants every stream must keep.
func (s *suite) generate(t *testing.T, ctx context.Context, req engine.GenerateRequest) result {
	t.Helper()
	var r result
	var b strings.Builder
	err := s.e.Generate(ctx, req, func(ev engine.Event) error {
		set := 0
		for _, p := range []bool{ev.Progress != nil, ev.Token != nil, ev.Final != nil} {
			if p {
				set++
			}
		}
		if set != 1 {
			t.Errorf("event has %d fields set, want exactly 1: %+v", set, ev)
		}
		if r.final != nil {
			t.Errorf("event after the final event: %+v", ev)
		}
		r.events = append(r.events, ev)
		switch {
		case ev.Token != nil:
			r.tokens = append(r.tokens, *ev.Token)
			b.WriteString(ev.Token.Text)
		case ev.Final != nil:
			r.final = ev.Final
			b.WriteString(ev.Final.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if r.final == nil {
		t.Fatalf("stream ended without a final event")
	}
	r.text = b.String()
	if !utf8.ValidString(r.text) {
		t.Errorf("output is not valid UTF-8: %q", r.text)
	}
	switch r.final.FinishReason {
	case engine.FinishStop, engine.FinishLength, engine.FinishToolCalls, engine.FinishCancelled, engine.FinishError:
	default:
		t.Errorf("finish reason %q is not one of stop, length, tool_calls, cancelled, error", r.final.FinishReason)
	}
	if r.final.FinishReason != engine.FinishCancelled && r.final.Usage.CompletionTokens != len(r.tokens) {
		t.Errorf("usage says %d completion tokens, the stream had %d", r.final.Usage.CompletionTokens, len(r.tokens))
	}
	if r.final.Usage.CachedTokens > r.final.Usage.PromptTokens {
		t.Errorf("cached tokens %d > prompt tokens %d", r.final.Usage.CachedTokens, r.final.Usage.PromptTokens)
	}
	return r
}

func (s *suite) describe(t *testing.T) {
	d := s.desc
	if d.InstanceID == "" || d.ModelID == "" || d.Backend == "" || d.Architecture == "" {
		t.Errorf("description lacks identity: %+v", d)
	}
	if d.Fingerprint == "" {
		t.Errorf("description has no fingerprint")
	}
	if !d.Capabilities.Chat && !d.Capabilities.Completions {
		t.Errorf("instance can serve neither chat nor completions")
	}
	if d.Capabilities.PrefillServer && d.PrefillEndpoint == "" {
		t.Errorf("instance says it serves prefill but advertises no endpoint")
	}
	list, err := s.e.Instances(s.ctx(t))
	if err != nil {
		t.Fatalf("Instances: %v", err)
	}
	found := false
	for _, in := range list {
		if in.InstanceID == d.InstanceID {
			found = true
			if in.Fingerprint != d.Fingerprint || in.ModelID != d.ModelID {
				t.Errorf("Instances describes %q differently from Load: %+v vs %+v", d.InstanceID, in, d)
			}
		}
	}
	if !found {
		t.Errorf("Instances does not list %q", d.InstanceID)
	}
}

func (s *suite) streamShape(t *testing.T) {
	r := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens}))
	if len(r.tokens) == 0 && r.final.FinishReason != engine.FinishStop {
		t.Errorf("no tokens and finish reason %q", r.final.FinishReason)
	}
	if r.final.Usage.PromptTokens <= 0 {
		t.Errorf("usage has %d prompt tokens", r.final.Usage.PromptTokens)
	}
	if r.final.Timings.Total <= 0 {
		t.Errorf("timings have no total: %+v", r.final.Timings)
	}
	for _, ev := range r.events {
		if p := ev.Progress; p != nil && (p.Done < 0 || p.Done > p.Total) {
			t.Errorf("progress %d of %d", p.Done, p.Total)
		}
	}
}

func (s *suite) greedyDeterministic(t *testing.T) {
	a := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens}))
	b := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens}))
	if !sameTokens(a.tokens, b.tokens) || a.text != b.text {
		t.Errorf("greedy decoding differs between two runs:\n%q\n%q", a.text, b.text)
	}
}

func (s *suite) seedDeterministic(t *testing.T) {
	seed := int64(1234)
	req := s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens, Temperature: 0.9, TopP: 0.95, Seed: &seed})
	a := s.generate(t, s.ctx(t), req)
	b := s.generate(t, s.ctx(t), req)
	if !sameTokens(a.tokens, b.tokens) {
		t.Errorf("the same seed gave different outputs:\n%q\n%q", a.text, b.text)
	}
}

func (s *suite) maxTokens(t *testing.T) {
	for _, n := range []int{1, 3} {
		r := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: n, IgnoreEOS: true}))
		if len(r.tokens) > n {
			t.Errorf("max_tokens %d: got %d tokens", n, len(r.tokens))
		}
		if len(r.tokens) == n && r.final.FinishReason != engine.FinishLength && r.final.FinishReason != engine.FinishStop {
			t.Errorf("max_tokens %d reached with finish reason %q", n, r.final.FinishReason)
		}
	}
}

// stopString picks a piece of the greedy output as a stop string and checks that the output is cut right
// before its first occurrence, however the tokens split it.
func (s *suite) stopString(t *testing.T) {
	full := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens, IgnoreEOS: true}))
	runes := []rune(full.text)
	if len(runes) < 6 {
		t.Skipf("greedy output %q is too short to cut", full.text)
	}
	stop := string(runes[len(runes)/2 : len(runes)/2+3])
	want := full.text[:strings.Index(full.text, stop)]
	r := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens, IgnoreEOS: true, Stop: []string{stop}}))
	if r.text != want {
		t.Errorf("stop %q: got %q, want %q", stop, r.text, want)
	}
	if r.final.FinishReason != engine.FinishStop {
		t.Errorf("stop %q: finish reason %q, want stop", stop, r.final.FinishReason)
	}
}

func (s *suite) completionPrompt(t *testing.T) {
	if !s.desc.Capabilities.Completions {
		t.Skip("instance does not serve completions")
	}
	r := s.generate(t, s.ctx(t), engine.GenerateRequest{
		InstanceID: s.desc.InstanceID, Prompt: s.cfg.Prompt, Sampling: engine.Sampling{MaxTokens: s.cfg.MaxTokens},
	})
	if r.final.FinishReason == engine.FinishError {
		t.Errorf("completion failed: %s", r.final.Error)
	}
}

func (s *suite) tokenPrompt(t *testing.T) {
	if !s.desc.Capabilities.TokenPrompts {
		t.Skip("instance does not take token prompts")
	}
	tok, err := s.e.Tokenize(s.ctx(t), engine.TokenizeRequest{InstanceID: s.desc.InstanceID, Prompt: s.cfg.Prompt, AddSpecialTokens: true})
	if err != nil {
		t.Fatalf("Tokenize: %v", err)
	}
	byTokens := s.generate(t, s.ctx(t), engine.GenerateRequest{
		InstanceID: s.desc.InstanceID, PromptTokens: tok.Tokens, Sampling: engine.Sampling{MaxTokens: s.cfg.MaxTokens},
	})
	if byTokens.final.Usage.PromptTokens != len(tok.Tokens) {
		t.Errorf("token prompt of %d tokens counted as %d", len(tok.Tokens), byTokens.final.Usage.PromptTokens)
	}
	if s.desc.Capabilities.Completions {
		byText := s.generate(t, s.ctx(t), engine.GenerateRequest{
			InstanceID: s.desc.InstanceID, Prompt: s.cfg.Prompt, Sampling: engine.Sampling{MaxTokens: s.cfg.MaxTokens},
		})
		if !sameTokens(byText.tokens, byTokens.tokens) {
			t.Errorf("the prompt as text and as its tokens continue differently:\n%q\n%q", byText.text, byTokens.text)
		}
	}
}

func (s *suite) logprobs(t *testing.T) {
	if !s.desc.Capabilities.Logprobs {
		t.Skip("instance does not report logprobs")
	}
	top := min(3, s.desc.Capabilities.MaxTopLogprobs)
	r := s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens, Logprobs: true, TopLogprobs: top}))
	for i, tok := range r.tokens {
		lp := tok.Logprob
		if lp == nil {
			t.Fatalf("token %d has no logprob", i)
		}
		if lp.Logprob > 1e-6 {
			t.Errorf("token %d: logprob %g > 0", i, lp.Logprob)
		}
		if len(lp.Top) != top {
			t.Errorf("token %d: %d alternatives, want %d", i, len(lp.Top), top)
		}
		for j := 1; j < len(lp.Top); j++ {
			if lp.Top[j].Logprob > lp.Top[j-1].Logprob+1e-9 {
				t.Errorf("token %d: alternatives not sorted by logprob", i)
			}
		}
	}
}

func (s *suite) tokenizeMatchesUsage(t *testing.T) {
	req := s.chat(engine.Sampling{MaxTokens: 1})
	tok, err := s.e.Tokenize(s.ctx(t), engine.TokenizeRequest{InstanceID: s.desc.InstanceID, Messages: req.Messages, AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("Tokenize: %v", err)
	}
	if len(tok.Tokens) == 0 {
		t.Fatalf("Tokenize returned no tokens")
	}
	r := s.generate(t, s.ctx(t), req)
	if r.final.Usage.PromptTokens != len(tok.Tokens) {
		t.Errorf("Tokenize gives %d tokens, Generate counts %d prompt tokens", len(tok.Tokens), r.final.Usage.PromptTokens)
	}
}

// cancel cancels a long generation after its first token: Generate must return promptly.
func (s *suite) cancel(t *testing.T) {
	ctx, cancel := context.WithCancel(s.ctx(t))
	defer cancel()
	var once sync.Once
	var cancelledAt time.Time
	var final *engine.Final
	err := s.e.Generate(ctx, s.chat(engine.Sampling{MaxTokens: s.long(), IgnoreEOS: true}), func(ev engine.Event) error {
		if ev.Token != nil {
			once.Do(func() { cancelledAt = time.Now(); cancel() })
		}
		if ev.Final != nil {
			final = ev.Final
		}
		return nil
	})
	if cancelledAt.IsZero() {
		t.Fatalf("no token before the stream ended (err %v)", err)
	}
	if waited := time.Since(cancelledAt); waited > 2*time.Second {
		t.Errorf("Generate returned %v after cancellation", waited)
	}
	if err == nil && (final == nil || final.FinishReason != engine.FinishCancelled) {
		t.Errorf("cancelled generation ended without error and with final %+v", final)
	}
}

// consumerGone returns an error from emit: the engine must stop and return it.
func (s *suite) consumerGone(t *testing.T) {
	gone := errors.New("client went away")
	n := 0
	done := make(chan error, 1)
	go func() {
		done <- s.e.Generate(s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.long(), IgnoreEOS: true}), func(ev engine.Event) error {
			if ev.Token != nil {
				n++
				return gone
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("Generate returned nil after emit failed")
		}
	case <-time.After(s.cfg.Timeout):
		t.Fatalf("Generate did not return after emit failed")
	}
}

func (s *suite) concurrent(t *testing.T) {
	const n = 4
	var wg sync.WaitGroup
	outs := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = s.generate(t, s.ctx(t), s.chat(engine.Sampling{MaxTokens: s.cfg.MaxTokens}))
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !sameTokens(outs[0].tokens, outs[i].tokens) {
			t.Errorf("concurrent greedy requests differ: %q vs %q", outs[0].text, outs[i].text)
		}
	}
}

func (s *suite) errors(t *testing.T) {
	cases := []struct {
		name string
		req  engine.GenerateRequest
		want engine.Code
	}{
		{"UnknownInstance", engine.GenerateRequest{InstanceID: "no-such-instance", Prompt: "hi"}, engine.CodeNotFound},
		{"NoPrompt", engine.GenerateRequest{InstanceID: s.desc.InstanceID}, engine.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.e.Generate(s.ctx(t), c.req, func(engine.Event) error { return nil })
			if got := engine.CodeOf(err); got != c.want {
				t.Errorf("got %v (code %q), want code %q", err, got, c.want)
			}
		})
	}
	if _, err := s.e.Tokenize(s.ctx(t), engine.TokenizeRequest{InstanceID: "no-such-instance", Prompt: "hi"}); engine.CodeOf(err) != engine.CodeNotFound {
		t.Errorf("Tokenize on an unknown instance: %v", err)
	}
	if _, err := s.e.Load(s.ctx(t), engine.LoadRequest{}); err == nil {
		t.Errorf("Load with no model succeeded")
	}
}

func (s *suite) stats(t *testing.T) {
	st, err := s.e.Stats(s.ctx(t))
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for _, in := range st.Instances {
		if in.InstanceID == s.desc.InstanceID {
			if in.InFlight < 0 || in.Queued < 0 {
				t.Errorf("negative load: %+v", in)
			}
			return
		}
	}
	t.Errorf("Stats has no entry for %q", s.desc.InstanceID)
}

func (s *suite) unload(t *testing.T) {
	if err := s.e.Unload(s.ctx(t), s.desc.InstanceID); err != nil {
		t.Fatalf("Unload: %v", err)
	}
	err := s.e.Generate(s.ctx(t), s.chat(engine.Sampling{MaxTokens: 1}), func(engine.Event) error { return nil })
	if engine.CodeOf(err) != engine.CodeNotFound {
		t.Errorf("Generate after Unload: %v, want not found", err)
	}
	if err := s.e.Unload(s.ctx(t), s.desc.InstanceID); engine.CodeOf(err) != engine.CodeNotFound {
		t.Errorf("second Unload: %v, want not found", err)
	}
}

// long is a max_tokens that keeps a generation going far longer than a check waits, within the context.
func (s *suite) long() int {
	if s.desc.ContextLength > 0 {
		return s.desc.ContextLength / 2
	}
	return 1 << 20
}

func sameTokens(a, b []engine.Token) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Text != b[i].Text {
			return false
		}
	}
	return true
}
