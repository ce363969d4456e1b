package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/prefixcache"
	"github.com/duet-ai/duet/plugins/mlx-engine/sampling"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/stopstring"
)

// Tokenizer is what the loop needs of a tokenizer: incremental detokenization and token texts for logprobs.
type Tokenizer interface {
	// NewStream starts the detokenization of one generated sequence; special tokens produce no text, except,
	// for a sequence whose output is parsed, the markers its parser reads (e.g. <|python_tag|>).
	NewStream(parsed bool) TextStream
	// TokenText returns a token's own text and raw bytes, for logprobs.
	TokenText(id int32) (string, []byte)
}

// TextStream turns tokens into text deltas that never split a UTF-8 character.
type TextStream interface {
	Add(id int32) string
	Flush() string
}

// Constraint limits what a sequence may generate: a grammar compiled for a response format or a forced tool
// call. Each choice of a request has its own.
type Constraint interface {
	sampling.Masker // removes the tokens that may not come next; stop tokens stay only where the output may end
	// Accept advances past tok, a token Mask allowed.
	Accept(tok int32) error
	// Done reports that nothing may follow: the sequence ends as if at a stop token.
	Done() bool
	// Within says, before each Mask, how many tokens the sequence may still generate (the one about to be
	// sampled included): the constraint then keeps only tokens after which its output can still be
	// completed in time, so a strict output parses whenever max_tokens allows one.
	Within(left int)
	// Steered reports that the budget took out a token the constraint would otherwise have allowed: the
	// output was shaped by max_tokens, and the sequence reports finish reason "length".
	Steered() bool
}

// Output splits a sequence's text into content, reasoning and tool calls (a reasoning and tool-call parser).
// Each choice has its own.
type Output interface {
	// Add takes the next piece of text and returns what it adds to each part; it holds back what may still
	// turn out to be a marker.
	Add(text string) Delta
	// Flush ends the text: what was held back, and the complete tool calls. An error (an *engine.Error)
	// says the output breaks the request's contract, e.g. a tool call that cannot be used; the choice ends
	// with it.
	Flush() (Delta, []engine.ToolCall, error)
}

// Delta is what a piece of text adds to the parts of an output.
type Delta struct {
	Content, Reasoning string
	ToolCalls          []engine.ToolCallDelta
}

// Config configures a Runner. Zero values pick the defaults.
type Config struct {
	Model     backend.Model
	Tokenizer Tokenizer
	// MaxBatch is how many sequences are admitted at once (prefilling or decoding); default 16.
	MaxBatch int
	// MaxQueue is how many requests may wait for admission before new ones are refused as busy; default 256.
	MaxQueue int
	// PrefillChunk is the prompt tokens one step prefills while other sequences decode (it bounds how much a
	// long prompt delays their tokens); PrefillChunkIdle is the chunk when nothing decodes. Defaults 256, 2048.
	PrefillChunk, PrefillChunkIdle int
	// PrefixCacheBytes bounds the prefix cache; 0 disables it.
	PrefixCacheBytes int64
	// StateSnapshotEvery is the grid, in positions, on which a model with linear layers keeps snapshots of their
	// state while it prefills, so that the prefix cache can cut there (a multiple of 64); 0 picks SnapshotGrid's
	// default. Models without linear layers ignore it.
	StateSnapshotEvery int
	Logger             *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 16
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 256
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = 256
	}
	if c.PrefillChunkIdle <= 0 {
		c.PrefillChunkIdle = 2048
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Request is one generation.
type Request struct {
	ID     string
	Prompt []int32
	// Sampling chooses tokens; its Logprobs/TopLogprobs decide what token events carry.
	Sampling sampling.Params
	// MaxTokens bounds the output; 0 means as many as the context allows. A value that cannot fit next to the
	// prompt is an error.
	MaxTokens int
	Stop      []string
	// StopTokens end the generation without being emitted (EOS, unless the request ignores it).
	StopTokens []int32
	Arrived    time.Time
	// Remote, when set, lets another engine prefill the prompt over the KV wire.
	Remote *Remote
	// N is how many choices to generate (0 or 1: one). They share the prompt's KV: the first choice prefills
	// it and the others start from a copy. Choice i > 0 draws with Sampling.Seed + i.
	N int
	// NewConstraint, when set, makes each choice's constraint; NewOutput each choice's output parser.
	NewConstraint func() (Constraint, error)
	NewOutput     func() Output
}

// Runner is the compute loop of one model instance.
type Runner struct {
	cfg    Config
	model  backend.Model
	tok    Tokenizer
	vocab  int
	maxCtx int
	prefix *prefixcache.Cache[backend.Cache]
	// minWindow is the smallest window of the model's sliding layers (0: none): a prompt longer than it gets a
	// snapshot of its KV in the prefix cache, since the generation's entry no longer holds the prompt's windows.
	minWindow int
	// grid is the snapshot grid of a model with linear layers (0: none): prefill chunks end on it, and the
	// states there and at a prompt's end are kept as snapshots.
	grid int

	submit  chan *seq
	exports chan *seq     // KV wire prefill jobs, buffered: Dispatch must not block
	wake    chan struct{} // a fetch finished
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once

	waitingN atomic.Int64
	activeN  atomic.Int64
	kvBytes  atomic.Int64

	// Owned by the loop.
	waiting []*seq
	active  []*seq
	rr      int // round robin over prefilling sequences
	batch   []backend.Seq
	pace    pacer
}

// New starts the loop of a model instance. Close stops it.
func New(cfg Config) *Runner {
	cfg.defaults()
	r := &Runner{
		cfg: cfg, model: cfg.Model, tok: cfg.Tokenizer,
		vocab: cfg.Model.VocabSize(), maxCtx: cfg.Model.MaxContext(),
		prefix:  prefixcache.New[backend.Cache](cfg.PrefixCacheBytes),
		submit:  make(chan *seq),
		exports: make(chan *seq, cfg.MaxQueue),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	r.prefix.SetRestorable(restorable)
	for _, ly := range cfg.Model.KVLayout().Layers {
		if ly.Kind == backend.KVSliding && (r.minWindow == 0 || ly.Window < r.minWindow) {
			r.minWindow = ly.Window
		}
	}
	if l := cfg.Model.KVLayout(); l.HasLinear() {
		r.grid = cfg.StateSnapshotEvery
		if r.grid <= 0 {
			r.grid = SnapshotGrid(l)
		}
	}
	go r.loop()
	return r
}

// SnapshotGrid is the default snapshot grid of a layout with linear layers: the smallest power of two of at least
// 256 positions whose attention KV weighs as much as one snapshot of the states, capped at 8192, so that the
// snapshots of a long prompt never outweigh its KV (Qwen3-Next-80B-A3B: 73.7 MiB of state against 24 KiB of KV
// per position gives 4096). It is a multiple of 64, the router's hash block, so its affinity hashes describe
// positions the prefix cache can hit.
func SnapshotGrid(l backend.KVLayout) int {
	const least, most = 256, 8192
	perPos := l.PositionBytes()
	if perPos == 0 {
		return most
	}
	want := (l.StateBytes() + perPos - 1) / perPos
	g := least
	for g < want && g < most {
		g *= 2
	}
	return g
}

// prefillChunk is how many prompt positions the next prefill step of a sequence at prefilled computes, at most
// size, and whether it keeps a snapshot of the linear layers' states: with a grid, a chunk that would cross a
// grid point ends there, and the states at grid points and at the prompt's end (the position a next turn of a
// chat shares) are snapshots. Without one (grid 0) the chunk is only bounded by the prompt.
func prefillChunk(prefilled, total, size, grid int) (chunk int, snapshot bool) {
	chunk = min(size, total-prefilled)
	if grid <= 0 {
		return chunk, false
	}
	if next := (prefilled/grid+1)*grid - prefilled; next < chunk {
		chunk = next
	}
	end := prefilled + chunk
	return chunk, end%grid == 0 || end == total
}

// Close stops the loop: requests in flight end cancelled and every cache is released. The model itself is
// the caller's to close, afterwards.
func (r *Runner) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.stopped
}

// MaxBatch is the most sequences a step runs, and so the most choices one request can have.
func (r *Runner) MaxBatch() int { return r.cfg.MaxBatch }

// MaxContext is the most positions a sequence can hold.
func (r *Runner) MaxContext() int { return r.maxCtx }

// Stats are the runner's load figures.
type Stats struct {
	Active, Waiting int
	// KVBytes is the KV cache memory the instance holds: the caches of its sequences (generating, prefilling
	// for a peer, or waiting for a remote prefill) and the prefix cache's entries, as the backend counts them.
	KVBytes int64
	// KVCapacityBytes is the most it may hold: MaxBatch caches of the whole context, from the model's KV
	// layout, and the prefix cache's bound.
	KVCapacityBytes int64
	PrefixCache     prefixcache.Stats
}

// Stats reports load; it is cheap and safe to call at any time.
func (r *Runner) Stats() Stats {
	pc := r.prefix.Stats()
	l := r.model.KVLayout()
	perPos := int64(l.PositionBytes())
	return Stats{
		Active: int(r.activeN.Load()), Waiting: int(r.waitingN.Load()), KVBytes: r.kvBytes.Load(),
		KVCapacityBytes: int64(r.cfg.MaxBatch)*int64(r.maxCtx)*perPos + pc.CapacityBytes,
		PrefixCache:     pc,
	}
}

// seq is one request inside the loop.
type seq struct {
	req    Request
	ctx    context.Context
	cancel context.CancelFunc
	q      *eventQueue

	cache     backend.Cache
	cached    int // prompt positions that came from the prefix cache
	prefilled int // prompt positions in the cache
	decoding  bool
	last      int32 // the token to feed next, while decoding
	generated []int32
	maxTokens int

	choice     int
	siblings   int // choices still to fork from this one once its prompt is prefilled
	sampler    *sampling.Sampler
	text       TextStream
	stops      *stopstring.Matcher
	stopped    bool // by a stop string: what the matcher held back is not output
	constraint Constraint
	out        Output
	logits     []float32

	admitted, prefillDone, firstToken time.Time

	// Remote prefill (decode side): fetching while a goroutine pulls KV from a peer; the outcome arrives on
	// fetched, and remote describes it for the final event.
	fetching bool
	fetched  chan fetchResult
	remote   *engine.RemotePrefill
	// fetchBytes is the cache's Bytes while fetching, kept by the fetch goroutine, which alone touches the
	// cache then: what publish counts for the sequence.
	fetchBytes atomic.Int64

	// KV export (prefill side): set for a KV wire job, which prefills and streams its KV but samples nothing.
	export *export
}

// Generate runs req and calls emit for each event from the calling goroutine; see engine.Engine.Generate for
// the contract. It returns an error only when the request cannot start.
func (r *Runner) Generate(ctx context.Context, req Request, emit func(engine.Event) error) error {
	if err := r.validate(&req); err != nil {
		return err
	}
	if r.waitingN.Load() >= int64(r.cfg.MaxQueue) {
		return engine.Errorf(engine.CodeResourceExhausted, "the engine has %d requests waiting; retry later", r.cfg.MaxQueue)
	}
	if req.Arrived.IsZero() {
		req.Arrived = time.Now()
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &seq{req: req, ctx: sctx, cancel: cancel, q: newEventQueue()}
	select {
	case r.submit <- s:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stop:
		return engine.Errorf(engine.CodeUnavailable, "the model instance is shutting down")
	}
	var buf []engine.Event
	var emitErr error
	for open := max(req.N, 1); ; {
		<-s.q.notify
		buf = s.q.take(buf)
		for _, ev := range buf {
			if emitErr == nil {
				if err := emit(ev); err != nil {
					emitErr = err
					cancel() // the loop ends the sequences at their next step
				}
			}
			if ev.Final != nil {
				if open--; open == 0 {
					return emitErr
				}
			}
		}
	}
}

func (r *Runner) validate(req *Request) error {
	n := len(req.Prompt)
	switch {
	case n == 0:
		return engine.InvalidParam("messages", "the prompt is empty")
	case n >= r.maxCtx:
		return &engine.Error{Code: engine.CodeContextLength, Param: "messages", Message: fmt.Sprintf(
			"This model's maximum context length is %d tokens, but the prompt has %d tokens.", r.maxCtx, n)}
	case req.MaxTokens < 0:
		return engine.InvalidParam("max_tokens", "max_tokens must not be negative")
	case req.N < 0 || req.N > r.cfg.MaxBatch:
		return engine.InvalidParam("n", "n must be between 1 and %d", r.cfg.MaxBatch)
	case req.MaxTokens > 0 && n+req.MaxTokens > r.maxCtx:
		return &engine.Error{Code: engine.CodeContextLength, Param: "max_tokens", Message: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion).",
			r.maxCtx, n+req.MaxTokens, n, req.MaxTokens)}
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= r.vocab {
			return engine.InvalidParam("prompt", "token %d of the prompt (%d) is not in the vocabulary of %d tokens", i, t, r.vocab)
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		return engine.InvalidParam("", "%v", err)
	}
	for t := range req.Sampling.LogitBias {
		if t < 0 || int(t) >= r.vocab {
			return engine.InvalidParam("logit_bias", "token %d is not in the vocabulary of %d tokens", t, r.vocab)
		}
	}
	return nil
}

func (r *Runner) loop() {
	defer close(r.stopped)
	// idle wakes a loop that waits with work outstanding (fetches, a full batch) to look at cancellations.
	idle := time.NewTicker(50 * time.Millisecond)
	defer idle.Stop()
	for {
		if !r.computable() {
			select {
			case s := <-r.submit:
				r.enqueue(s)
			case s := <-r.exports:
				r.enqueue(s)
			case <-r.wake:
			case <-idle.C:
			case <-r.stop:
				r.shutdown()
				return
			}
		}
		for more := true; more; {
			select {
			case s := <-r.submit:
				r.enqueue(s)
			case s := <-r.exports:
				r.enqueue(s)
			case <-r.stop:
				r.shutdown()
				return
			default:
				more = false
			}
		}
		r.reap()
		r.collectFetches()
		r.admit()
		if r.computable() {
			r.step()
		}
		r.publish()
	}
}

// computable reports whether a step has work: a sequence that is not waiting for a fetch, or one that can be
// admitted.
func (r *Runner) computable() bool {
	for _, s := range r.active {
		if !s.fetching {
			return true
		}
	}
	return len(r.waiting) > 0 && len(r.active) < r.cfg.MaxBatch
}

func (r *Runner) wakeLoop() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// collectFetches moves sequences whose remote prefill ended back into the batch: on success with every
// position but the last, on failure from their cached prefix (or out, if remote prefill was required).
func (r *Runner) collectFetches() {
	for _, s := range slices.Clone(r.active) {
		if !s.fetching {
			continue
		}
		select {
		case res := <-s.fetched:
			s.fetching = false
			s.remote = res.info
			switch {
			case res.err == nil:
				s.prefilled = len(s.req.Prompt) - 1
			case s.req.Remote.Required && s.ctx.Err() == nil:
				r.finish(s, engine.FinishError, engine.Errorf(engine.CodeUnavailable, "remote prefill failed: %v", res.err))
			case s.ctx.Err() == nil:
				r.cfg.Logger.Warn("remote prefill failed; prefilling locally", "request_id", s.req.ID, "error", res.err)
			}
		default:
		}
	}
}

func (r *Runner) enqueue(s *seq) {
	r.waiting = append(r.waiting, s)
	r.waitingN.Add(1)
}

func (r *Runner) publish() {
	// The prefix cache holds most of an idle instance's KV: without it an instance that served anything
	// reported 0 B between requests, which is when a stats poll usually finds it.
	kv := r.prefix.Stats().Bytes
	for _, s := range r.active {
		if s.fetching {
			kv += s.fetchBytes.Load()
		} else {
			kv += s.cache.Bytes()
		}
	}
	r.kvBytes.Store(kv)
	r.activeN.Store(int64(len(r.active)))
	r.waitingN.Store(int64(len(r.waiting)))
}

// reap ends the sequences whose requests were cancelled, waiting or active.
func (r *Runner) reap() {
	var cancelled []*seq
	r.waiting = slices.DeleteFunc(r.waiting, func(s *seq) bool {
		if s.ctx.Err() != nil {
			cancelled = append(cancelled, s)
			return true
		}
		return false
	})
	for _, s := range cancelled { // out of the queue first, so the stats published with its final event hold true
		r.endAny(s, engine.FinishCancelled)
	}
	for _, s := range slices.Clone(r.active) {
		if s.ctx.Err() != nil && !s.fetching { // a fetching sequence ends once its fetch has let go of the cache
			r.endAny(s, engine.FinishCancelled)
		}
	}
}

// admit moves waiting requests into the batch while there is room: a KV cache for each, started from the
// longest cached prefix.
func (r *Runner) admit() {
	for len(r.active) < r.cfg.MaxBatch && len(r.waiting) > 0 {
		s := r.waiting[0]
		if len(r.active) > 0 && len(r.active)+max(s.req.N, 1) > r.cfg.MaxBatch {
			return // room for all of its choices first: they fork from its prefill
		}
		r.waiting = r.waiting[1:]
		s.admitted = time.Now()
		if s.export != nil {
			if err := r.prepareExport(s); err != nil {
				r.failExport(s, err)
				continue
			}
			r.active = append(r.active, s)
			r.exportProgress(s) // positions from the prefix cache go out now; a full hit ends the job here
			continue
		}
		if err := r.prepare(s); err != nil {
			r.finish(s, engine.FinishError, err)
			continue
		}
		r.active = append(r.active, s)
		if rm := s.req.Remote; rm != nil && len(rm.Endpoints) > 0 && len(s.req.Prompt)-1-s.cached >= max(rm.Threshold, 1) {
			s.fetching = true
			s.fetchBytes.Store(s.cache.Bytes())
			s.fetched = make(chan fetchResult, 1)
			go r.fetch(s, rm)
		}
	}
}

// restorable is the prefix cache's test of an entry: a cache whose sliding-window layers have evicted what a
// query at n sees is no hit at n.
func restorable(c backend.Cache, n int) bool { return c.Restorable(n) }

func (r *Runner) prepare(s *seq) error {
	prompt := s.req.Prompt
	if h, n := r.prefix.Lookup(prompt, len(prompt)-1); h != nil {
		c, err := h.Value().Clone(n)
		h.Release()
		if err == nil {
			s.cache, s.cached, s.prefilled = c, n, n
		}
	}
	if s.cache == nil {
		c, err := r.model.NewCache()
		if err != nil {
			return fmt.Errorf("allocate a KV cache: %w", err)
		}
		s.cache = c
	}
	s.maxTokens = s.req.MaxTokens
	if s.maxTokens == 0 {
		s.maxTokens = r.maxCtx - len(prompt)
	}
	s.siblings = max(s.req.N, 1) - 1
	if err := r.startChoice(s); err != nil {
		s.cache.Release()
		s.cache = nil
		return err
	}
	return nil
}

// startChoice gives a sequence what each choice has of its own: draws, detokenizer, stop matcher,
// constraint, output parser and logits.
func (r *Runner) startChoice(s *seq) error {
	p := s.req.Sampling
	if p.Seed != nil && s.choice > 0 {
		seed := *p.Seed + int64(s.choice)
		p.Seed = &seed
	}
	s.sampler = sampling.New(p, s.req.Prompt)
	if s.req.NewConstraint != nil {
		c, err := s.req.NewConstraint()
		if err != nil {
			return err
		}
		s.constraint = c
		s.sampler.Constrain(c)
	}
	if s.req.NewOutput != nil {
		s.out = s.req.NewOutput()
	}
	s.text = r.tok.NewStream(s.out != nil)
	s.stops = stopstring.New(s.req.Stop)
	s.logits = make([]float32, r.vocab)
	return nil
}

// fork starts the other choices of s, whose prompt is now prefilled: each from a copy of its KV and its
// logits, so the prompt is computed once.
func (r *Runner) fork(s *seq) {
	for s.siblings > 0 {
		s.siblings--
		c := &seq{req: s.req, ctx: s.ctx, cancel: s.cancel, q: s.q, choice: max(s.req.N, 1) - 1 - s.siblings,
			cached: s.cached, prefilled: s.prefilled, decoding: true, maxTokens: s.maxTokens,
			admitted: s.admitted, prefillDone: s.prefillDone, remote: s.remote}
		kv, err := s.cache.Clone(s.cache.Len())
		if err == nil {
			c.cache = kv
			err = r.startChoice(c)
		}
		r.active = append(r.active, c)
		if err != nil {
			r.finish(c, engine.FinishError, fmt.Errorf("start choice %d: %w", c.choice, err))
			continue
		}
		copy(c.logits, s.logits)
		r.sample(c)
	}
}

// step runs one forward pass: a decode step for every generating sequence and one prefill chunk for one
// prefilling sequence, in the same batch so the weights are read once.
func (r *Runner) step() {
	r.batch = r.batch[:0]
	var decoding []*seq
	var prefill *seq
	var chunk int
	for _, s := range r.active {
		if s.decoding && !s.fetching {
			r.batch = append(r.batch, backend.Seq{Cache: s.cache, Tokens: []int32{s.last}, Logits: s.logits})
			decoding = append(decoding, s)
		}
	}
	if p := r.nextPrefill(); p != nil {
		size := r.cfg.PrefillChunkIdle
		if len(decoding) > 0 {
			size = r.pace.chunk(r.cfg.PrefillChunk)
		}
		var snapshot bool
		chunk, snapshot = prefillChunk(p.prefilled, len(p.req.Prompt), size, r.grid)
		bs := backend.Seq{Cache: p.cache, Tokens: p.req.Prompt[p.prefilled : p.prefilled+chunk], Snapshot: snapshot}
		if p.prefilled+chunk == len(p.req.Prompt) && p.export == nil {
			bs.Logits = p.logits
		}
		r.batch = append(r.batch, bs)
		prefill = p
	}
	if len(r.batch) == 0 {
		return
	}
	began := time.Now()
	err := r.model.Forward(r.batch)
	r.pace.observe(time.Since(began), len(decoding), chunk)
	if err != nil {
		r.cfg.Logger.Error("forward pass failed", "error", err)
		for _, s := range decoding {
			r.finish(s, engine.FinishError, err)
		}
		if prefill != nil {
			if prefill.export != nil {
				r.failExport(prefill, err)
			} else {
				r.finish(prefill, engine.FinishError, err)
			}
		}
		return
	}
	for _, s := range decoding {
		r.sample(s)
	}
	if p := prefill; p != nil && p.export != nil {
		p.prefilled += chunk
		r.exportProgress(p)
	} else if p != nil {
		p.prefilled += chunk
		p.q.push(engine.Event{Progress: &engine.Progress{Done: p.prefilled, Total: len(p.req.Prompt)}})
		if p.prefilled == len(p.req.Prompt) {
			r.snapshotPrompt(p)
			p.prefillDone = time.Now()
			p.decoding = true
			r.fork(p) // before p samples, which changes its logits
			r.sample(p)
		}
	}
}

// snapshotPrompt puts a copy of a prefilled prompt's KV into the prefix cache when the model has sliding
// windows and the prompt is longer than the smallest: by the end of the generation those layers hold only the
// last tokens, so a next turn that shares the prompt but not all of the answer (a template that rewrites the
// answer, a regenerated reply) would otherwise miss. The copy costs the full layers' bytes once, within the
// prefix cache's bound, and is dropped when the generation's entry can stand in for it.
func (r *Runner) snapshotPrompt(s *seq) {
	if r.minWindow == 0 || len(s.req.Prompt) <= r.minWindow || r.cfg.PrefixCacheBytes <= 0 {
		return
	}
	if c, err := s.cache.Clone(len(s.req.Prompt)); err == nil {
		r.prefix.Insert(slices.Clone(s.req.Prompt), c)
	}
}

// nextPrefill picks the prefilling sequence whose turn it is.
func (r *Runner) nextPrefill() *seq {
	n := len(r.active)
	for i := range n {
		s := r.active[(r.rr+i)%n]
		if !s.decoding && !s.fetching {
			r.rr = (r.rr + i + 1) % n
			return s
		}
	}
	return nil
}

// sample picks the next token of s from its logits and emits it, or ends the sequence.
func (r *Runner) sample(s *seq) {
	if s.constraint != nil {
		s.constraint.Within(s.maxTokens - len(s.generated))
	}
	choice := s.sampler.Sample(s.logits)
	tok := choice.Token
	if tok < 0 {
		err := engine.Errorf(engine.CodeInternal, "no token is possible next: the model's logits are not finite")
		if s.constraint != nil {
			err = engine.Errorf(engine.CodeInternal, "no token of the vocabulary can continue the constrained output")
		}
		r.finish(s, engine.FinishError, err)
		return
	}
	if slices.Contains(s.req.StopTokens, tok) {
		r.finish(s, r.stopReason(s), nil)
		return
	}
	if s.constraint != nil {
		if err := s.constraint.Accept(tok); err != nil {
			r.finish(s, engine.FinishError, engine.Errorf(engine.CodeInternal, "constrained decoding: %v", err))
			return
		}
	}
	s.sampler.Accept(tok)
	s.generated = append(s.generated, tok)
	if s.firstToken.IsZero() {
		s.firstToken = time.Now()
	}
	text, stopped := s.stops.Add(s.text.Add(tok))
	ev := &engine.Token{ID: tok, Text: text}
	if s.out != nil {
		d := s.out.Add(text)
		ev.Text, ev.Reasoning, ev.ToolCalls = d.Content, d.Reasoning, d.ToolCalls
	}
	if s.req.Sampling.Logprobs {
		ev.Logprob = r.logprob(choice)
	}
	s.q.push(engine.Event{Choice: s.choice, Token: ev})
	switch {
	case stopped:
		s.stopped = true
		r.finish(s, engine.FinishStop, nil)
	case s.constraint != nil && s.constraint.Done():
		r.finish(s, r.stopReason(s), nil)
	case len(s.generated) >= s.maxTokens || s.cache.Len()+1 > r.maxCtx:
		r.finish(s, engine.FinishLength, nil)
	default:
		s.last = tok
	}
}

// stopReason is why a sequence that came to its end ended: "stop", or "length" when its constraint had to
// steer the output to fit max_tokens (it would have gone on, or taken a longer way, without the budget).
func (r *Runner) stopReason(s *seq) engine.FinishReason {
	if s.constraint != nil && s.constraint.Steered() {
		return engine.FinishLength
	}
	return engine.FinishStop
}

func (r *Runner) logprob(c sampling.Choice) *engine.Logprob {
	text, raw := r.tok.TokenText(c.Token)
	lp := &engine.Logprob{Token: text, Bytes: raw, Logprob: c.Logprob}
	for _, a := range c.Top {
		t, b := r.tok.TokenText(a.Token)
		lp.Top = append(lp.Top, engine.TopLogprob{ID: a.Token, Token: t, Bytes: b, Logprob: a.Logprob})
	}
	return lp
}

// endAny ends a sequence of either kind.
func (r *Runner) endAny(s *seq, reason engine.FinishReason) {
	if s.export != nil {
		r.failExport(s, errShuttingDown)
		return
	}
	r.finish(s, reason, nil)
}

// finish ends a sequence: its final event, and its cache to the prefix cache (or freed, after an error).
func (r *Runner) finish(s *seq, reason engine.FinishReason, err error) {
	r.active = slices.DeleteFunc(r.active, func(x *seq) bool { return x == s })
	now := time.Now()
	f := &engine.Final{
		FinishReason: reason,
		Usage:        engine.Usage{PromptTokens: len(s.req.Prompt), CompletionTokens: len(s.generated), CachedTokens: s.cached},
		Timings:      engine.Timings{Total: now.Sub(s.req.Arrived), PrefillSource: engine.PrefillLocal},
	}
	if !s.admitted.IsZero() {
		f.Timings.Queue = s.admitted.Sub(s.req.Arrived)
	}
	if !s.prefillDone.IsZero() {
		f.Timings.Prefill = s.prefillDone.Sub(s.admitted)
		if s.cached == len(s.req.Prompt)-1 {
			f.Timings.PrefillSource = engine.PrefillCache
		}
	}
	if s.remote != nil {
		f.Timings.Remote = s.remote
		if s.remote.FallbackReason == "" {
			f.Timings.PrefillSource = engine.PrefillRemote
		}
	}
	if !s.firstToken.IsZero() {
		f.Timings.FirstToken = s.firstToken.Sub(s.req.Arrived)
		f.Timings.Decode = now.Sub(s.firstToken)
	}
	if (reason == engine.FinishLength || reason == engine.FinishStop) && !s.stopped && s.text != nil {
		// Release what the detokenizer and the stop matcher held back: the output ended without a stop string.
		rest, stopped := s.stops.Add(s.text.Flush())
		if stopped {
			f.FinishReason = engine.FinishStop
		} else {
			rest += s.stops.Flush()
		}
		f.Text = rest
	}
	if s.out != nil && err == nil && reason != engine.FinishCancelled {
		d := s.out.Add(f.Text)
		tail, calls, outErr := s.out.Flush()
		f.Text, f.Reasoning, f.ToolCalls = d.Content+tail.Content, d.Reasoning+tail.Reasoning, calls
		if len(calls) > 0 && f.FinishReason == engine.FinishStop {
			f.FinishReason = engine.FinishToolCalls
		}
		if outErr != nil {
			f.FinishReason, f.Error, f.ErrorCode = engine.FinishError, outErr.Error(), engine.CodeOf(outErr)
		}
	}
	if err != nil {
		f.FinishReason, f.Error, f.ErrorCode = engine.FinishError, err.Error(), engine.CodeOf(err)
		var ee *engine.Error
		if !errors.As(err, &ee) {
			f.ErrorCode = engine.CodeInternal
		}
	}
	if s.cache != nil {
		if err != nil {
			s.cache.Release()
		} else {
			tokens := append(slices.Clone(s.req.Prompt), s.generated...)
			r.prefix.Insert(tokens[:s.cache.Len()], s.cache)
		}
		s.cache = nil
	}
	// The stats say the sequence is gone before its caller can know it ended: a client that reads them after
	// its final event must not see its KV still held.
	r.publish()
	s.q.push(engine.Event{Choice: s.choice, Final: f})
	for s.siblings > 0 { // it ended before its prompt was prefilled: so do the choices it would have forked
		s.siblings--
		g := *f
		s.q.push(engine.Event{Choice: max(s.req.N, 1) - 1 - s.siblings, Final: &g})
	}
}

func (r *Runner) shutdown() {
	for _, s := range slices.Clone(r.active) {
		if s.fetching {
			s.cancel()
			<-s.fetched // the fetch lets go of the cache
			s.fetching = false
		}
		r.endAny(s, engine.FinishCancelled)
	}
	waiting := r.waiting
	r.waiting = nil
	for _, s := range waiting {
		r.endAny(s, engine.FinishCancelled)
	}
	for {
		select {
		case s := <-r.exports:
			r.endAny(s, engine.FinishCancelled)
			continue
		default:
		}
		break
	}
	r.prefix.Clear()
	r.publish()
}
