// Package echo is a deterministic toy engine built on sdk/engine alone: the reference for writing an engine
// plugin, and the engine gateway tests and benchmarks use when they measure the gateway rather than a model.
//
// A token is a word with its leading whitespace. Token ids are a hash of the word's text, remembered in a
// per-engine vocabulary so they decode back.
package echo

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/stopstring"
)

// Engine is the echo engine. The zero value is not usable; call New.
type Engine struct {
	mu        sync.RWMutex
	instances map[string]*instance
	vocab     sync.Map // int32 -> string
	nextID    atomic.Int64
}

type instance struct {
	desc         engine.Description
	tokenDelay   time.Duration
	prefillDelay time.Duration
	inFlight     atomic.Int64
	ctx          context.Context // cancelled by Unload
	cancel       context.CancelFunc
}

var _ engine.Engine = (*Engine)(nil)

// New returns an echo engine with no instances.
func New() *Engine {
	return &Engine{instances: map[string]*instance{}}
}

// Load creates an instance that "serves" the model name it is given.
func (e *Engine) Load(_ context.Context, req engine.LoadRequest) (engine.Description, error) {
	if req.Model == "" {
		return engine.Description{}, engine.InvalidParam("model", "model is required")
	}
	in := &instance{}
	contextLength := 1 << 20
	for key, val := range req.Options {
		if key == "context_length" {
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "echo engine: option context_length: %q is not a positive integer", val)
			}
			contextLength = n
			continue
		}
		d, err := time.ParseDuration(val)
		switch {
		case key != "token_delay" && key != "prefill_delay":
			return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "echo engine: unknown option %q", key)
		case err != nil || d < 0:
			return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "echo engine: option %s: %q is not a duration", key, val)
		case key == "token_delay":
			in.tokenDelay = d
		default:
			in.prefillDelay = d
		}
	}
	id := req.InstanceID
	if id == "" {
		id = fmt.Sprintf("echo-%d", e.nextID.Add(1))
	}
	h := fnv.New64a()
	h.Write([]byte("echo\x00" + req.Model))
	in.desc = engine.Description{
		InstanceID:    id,
		ModelID:       req.Model,
		Architecture:  "echo",
		Backend:       "echo",
		Fingerprint:   fmt.Sprintf("echo-%016x", h.Sum64()),
		DType:         "float32",
		ContextLength: contextLength,
		VocabSize:     1 << 31,
		Capabilities: engine.Capabilities{
			Chat: true, Completions: true, TokenPrompts: true, Logprobs: true, MaxTopLogprobs: 20,
			Tools: true, Grammar: true, Reasoning: true, MaxChoices: 128,
		},
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.instances[id]; dup {
		in.cancel()
		return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "instance %q already exists", id)
	}
	e.instances[id] = in
	return in.desc, nil
}

// Unload removes an instance; its requests in flight end cancelled.
func (e *Engine) Unload(_ context.Context, id string) error {
	e.mu.Lock()
	in, ok := e.instances[id]
	delete(e.instances, id)
	e.mu.Unlock()
	if !ok {
		return engine.Errorf(engine.CodeNotFound, "no instance %q", id)
	}
	in.cancel()
	return nil
}

// Instances describes the loaded instances.
func (e *Engine) Instances(context.Context) ([]engine.Description, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]engine.Description, 0, len(e.instances))
	for _, in := range e.instances {
		out = append(out, in.desc)
	}
	return out, nil
}

func (e *Engine) instance(id string) (*instance, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	in, ok := e.instances[id]
	if !ok {
		return nil, engine.Errorf(engine.CodeNotFound, "no instance %q", id)
	}
	return in, nil
}

// Tokenize splits the rendered prompt into word tokens.
func (e *Engine) Tokenize(_ context.Context, req engine.TokenizeRequest) (engine.TokenizeResponse, error) {
	if _, err := e.instance(req.InstanceID); err != nil {
		return engine.TokenizeResponse{}, err
	}
	text := req.Prompt
	if len(req.Messages) > 0 {
		text = render(req.Messages)
	}
	return engine.TokenizeResponse{Text: text, Tokens: e.encode(text)}, nil
}

// Stats reports requests in flight per instance.
func (e *Engine) Stats(context.Context) (engine.Stats, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var st engine.Stats
	for id, in := range e.instances {
		st.Instances = append(st.Instances, engine.InstanceStats{InstanceID: id, InFlight: int(in.inFlight.Load())})
	}
	return st, nil
}

// Health is always fine.
func (e *Engine) Health(context.Context) error { return nil }

// render is the echo engine's chat template: the messages, one per line, as "role: content".
func render(ms []engine.Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " call: %s %s", c.Name, c.Arguments)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// split cuts text into words, each with the whitespace before it.
func split(text string) []string {
	var words []string
	start := 0
	inSpace := true
	for i, r := range text {
		space := unicode.IsSpace(r)
		if !space && inSpace && i > start && strings.TrimSpace(text[start:i]) != "" {
			words = append(words, text[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(text) {
		words = append(words, text[start:])
	}
	return words
}

func (e *Engine) tokenID(word string) int32 {
	h := fnv.New32a()
	h.Write([]byte(word))
	id := int32(h.Sum32() & 0x7fffffff)
	e.vocab.LoadOrStore(id, word)
	return id
}

func (e *Engine) encode(text string) []int32 {
	words := split(text)
	ids := make([]int32, len(words))
	for i, w := range words {
		ids[i] = e.tokenID(w)
	}
	return ids
}

func (e *Engine) word(id int32) string {
	if w, ok := e.vocab.Load(id); ok {
		return w.(string)
	}
	return fmt.Sprintf(" <%d>", id)
}

// Generate echoes. See the package documentation.
func (e *Engine) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Event) error) error {
	arrived := time.Now()
	in, err := e.instance(req.InstanceID)
	if err != nil {
		return err
	}
	var prompt []int32
	var reply []string
	switch {
	case len(req.Messages) > 0:
		prompt = e.encode(render(req.Messages))
		for _, m := range req.Messages {
			if m.Role == "user" {
				reply = split(m.Content)
			}
		}
	case len(req.PromptTokens) > 0:
		prompt = req.PromptTokens
		for _, id := range prompt {
			reply = append(reply, e.word(id))
		}
	case req.Prompt != "":
		prompt = e.encode(req.Prompt)
		reply = split(req.Prompt)
	default:
		return engine.InvalidParam("messages", "the request has no prompt")
	}
	s := req.Sampling
	if s.MaxTokens < 0 {
		return engine.InvalidParam("max_tokens", "max_tokens must not be negative")
	}
	if len(reply) == 0 {
		reply = []string{"."}
	}
	in.inFlight.Add(1)
	defer in.inFlight.Add(-1)

	if err := sleep(ctx, in.ctx, time.Duration(len(prompt))*in.prefillDelay); err != nil {
		return emit(final(engine.FinishCancelled, len(prompt), 0, arrived, arrived))
	}
	if err := emit(engine.Event{Progress: &engine.Progress{Done: len(prompt), Total: len(prompt)}}); err != nil {
		return err
	}

	n := max(req.N, 1)
	cs := make([]*choice, n)
	for i := range cs {
		sc, err := makeScript(req, reply)
		if err != nil {
			return err
		}
		cs[i] = newChoice(i, sc, s)
	}
	var firstToken time.Time
	for step, open := 0, n; open > 0; step++ {
		if step > 0 {
			if err := sleep(ctx, in.ctx, in.tokenDelay); err != nil {
				return endAll(emit, cs, engine.FinishCancelled, len(prompt), arrived, firstToken)
			}
		} else if ctx.Err() != nil || in.ctx.Err() != nil {
			return endAll(emit, cs, engine.FinishCancelled, len(prompt), arrived, firstToken)
		}
		if step == 0 {
			firstToken = time.Now()
		}
		for _, c := range cs {
			if c.done {
				continue
			}
			ev, reason := c.next(e)
			if ev != nil {
				if err := emit(engine.Event{Choice: c.index, Token: ev}); err != nil {
					return err
				}
			}
			if reason != "" {
				c.done = true
				open--
				if err := emit(c.final(reason, len(prompt), arrived, firstToken)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// choice is one choice of a generation as it streams.
type choice struct {
	index   int
	sc      script
	s       engine.Sampling
	rng     *rand.Rand
	stops   *stopstring.Matcher
	limit   int // tokens it may emit
	n       int // tokens emitted
	done    bool
	stopped bool // by a stop string
}

func newChoice(i int, sc script, s engine.Sampling) *choice {
	c := &choice{index: i, sc: sc, s: s, stops: stopstring.New(s.Stop), limit: s.MaxTokens}
	if c.limit == 0 || (sc.finite || len(sc.calls) > 0) && c.limit > sc.length() {
		c.limit = sc.length()
	}
	if s.Temperature > 0 && !sc.finite && len(sc.calls) == 0 {
		seed := uint64(time.Now().UnixNano())
		if s.Seed != nil {
			seed = uint64(*s.Seed + int64(i))
		}
		c.rng = rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	}
	return c
}

// next makes the choice's next token, and says why it ends when it does.
func (c *choice) next(e *Engine) (*engine.Token, engine.FinishReason) {
	if c.n >= c.limit {
		return nil, c.endReason()
	}
	n := c.n
	c.n++
	if n < len(c.sc.reasoning) {
		w := c.sc.reasoning[n]
		return &engine.Token{ID: e.tokenID(w), Reasoning: w}, c.endIfLast()
	}
	n -= len(c.sc.reasoning)
	if len(c.sc.calls) > 0 {
		p := c.sc.pieces[n]
		return &engine.Token{ID: e.tokenID(p.Name + p.Arguments), ToolCalls: []engine.ToolCallDelta{p}}, c.endIfLast()
	}
	reply := c.sc.reply
	word := reply[n%len(reply)]
	if c.rng != nil {
		word = reply[c.rng.IntN(len(reply))]
	}
	if c.n < c.limit && !strings.HasSuffix(word, " ") && (c.rng != nil || n%len(reply) == len(reply)-1) {
		word += " " // more words follow: keep them apart
	}
	id := e.tokenID(word)
	if slicesContains(c.s.StopTokenIDs, id) {
		c.n--
		return nil, engine.FinishStop
	}
	text, stopped := c.stops.Add(word)
	tok := &engine.Token{ID: id, Text: text}
	if c.s.Logprobs {
		tok.Logprob = fakeLogprob(word, id, c.s.TopLogprobs)
	}
	if stopped {
		c.stopped = true
		return tok, engine.FinishStop
	}
	return tok, c.endIfLast()
}

func (c *choice) endIfLast() engine.FinishReason {
	if c.n >= c.limit {
		return c.endReason()
	}
	return ""
}

func (c *choice) endReason() engine.FinishReason {
	switch {
	case len(c.sc.calls) > 0 && c.limit == c.sc.length():
		return engine.FinishToolCalls
	case c.s.MaxTokens == 0, c.sc.finite && c.limit == c.sc.length():
		return engine.FinishStop
	}
	return engine.FinishLength
}

func (c *choice) final(reason engine.FinishReason, prompt int, arrived, firstToken time.Time) engine.Event {
	ev := final(reason, prompt, c.n, arrived, firstToken)
	ev.Choice = c.index
	if !c.stopped {
		ev.Final.Text = c.stops.Flush()
	}
	if reason == engine.FinishToolCalls {
		ev.Final.ToolCalls = c.sc.calls
	}
	return ev
}

// endAll ends the choices still open.
func endAll(emit func(engine.Event) error, cs []*choice, reason engine.FinishReason, prompt int, arrived, firstToken time.Time) error {
	for _, c := range cs {
		if !c.done {
			ev := final(reason, prompt, c.n, arrived, firstToken)
			ev.Choice = c.index
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
	return nil
}

func final(reason engine.FinishReason, prompt, completion int, arrived, firstToken time.Time) engine.Event {
	now := time.Now()
	t := engine.Timings{Total: now.Sub(arrived), PrefillSource: engine.PrefillLocal}
	if !firstToken.IsZero() {
		t.FirstToken = firstToken.Sub(arrived)
		t.Prefill = t.FirstToken
		t.Decode = now.Sub(firstToken)
	}
	return engine.Event{Final: &engine.Final{
		FinishReason: reason,
		Usage:        engine.Usage{PromptTokens: prompt, CompletionTokens: completion},
		Timings:      t,
	}}
}

// fakeLogprob makes up deterministic log probabilities: the chosen word gets the highest one.
func fakeLogprob(word string, id int32, top int) *engine.Logprob {
	lp := &engine.Logprob{Token: word, Bytes: []byte(word), Logprob: -0.125}
	for i := 0; i < top; i++ {
		alt := word
		altID := id
		if i > 0 {
			alt = fmt.Sprintf("%s~%d", word, i)
			altID = int32((uint32(id) + uint32(i)) & 0x7fffffff)
		}
		lp.Top = append(lp.Top, engine.TopLogprob{ID: altID, Token: alt, Bytes: []byte(alt), Logprob: -0.125 - math.Log1p(float64(i))})
	}
	return lp
}

func sleep(ctx, instance context.Context, d time.Duration) error {
	if d <= 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		return instance.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-instance.Done():
		return instance.Err()
	}
}

func slicesContains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
