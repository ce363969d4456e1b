package mlxengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	_ "github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu" // registers "cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/chattemplate"
	"github.com/duet-ai/duet/plugins/mlx-engine/grammar"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/runner"
	"github.com/duet-ai/duet/plugins/mlx-engine/sampling"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// EmbeddedModel is the model name that selects the generated default model.
const EmbeddedModel = "embedded"

// Engine is the MLX engine. Create it with New.
type Engine struct {
	log    *slog.Logger
	nextID atomic.Int64

	mu        sync.RWMutex
	instances map[string]*instance
}

var _ engine.Engine = (*Engine)(nil)

// New returns an engine with no instances.
func New(log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{log: log, instances: map[string]*instance{}}
}

// instance is one loaded model.
type instance struct {
	desc     engine.Description
	model    *model.Model
	bmodel   backend.Model
	tok      *tokenizer.Tokenizer
	template *chattemplate.Template // nil: the model has no chat template
	format   toolcall.Format        // how the model writes tool calls and reasoning
	runner   *runner.Runner
	log      *slog.Logger
	// Constrained decoding: compiled grammars, and the vocabulary index their masks need (built on first use).
	grammars  *grammar.Cache
	indexOnce sync.Once
	index     *grammar.Index
	indexErr  error
	eos       []int32
	cleanup   func() // removes a generated model directory
	pd        pdOptions
	kv        *kvwire.Server // nil unless the instance serves prefill
}

// slowModel is a model whose forward passes take factor times as long: each one sleeps (factor − 1) times
// what it took. It is the engine option slowdown, for tests and benchmarks that need nodes of different
// speeds on one machine (router-disagg's PD auto on a local cluster, in CI): a sleep, unlike a busy loop,
// leaves the machine's cores to the other node, so the two differ by the factor and not by contention.
type slowModel struct {
	backend.Model
	factor float64
}

func (m slowModel) Forward(batch []backend.Seq) error {
	start := time.Now()
	err := m.Model.Forward(batch)
	time.Sleep(time.Duration(float64(time.Since(start)) * (m.factor - 1)))
	return err
}

// Weights and Metrics pass the wrapped model's own on (the engine logs and reports them).
func (m slowModel) Weights() backend.Weights {
	var w backend.Weights
	if wh, ok := m.Model.(backend.WeightsHolder); ok {
		w = wh.Weights()
	}
	return w
}

func (m slowModel) Metrics() map[string]float64 {
	if mm, ok := m.Model.(interface{ Metrics() map[string]float64 }); ok {
		return mm.Metrics()
	}
	return nil
}

// options are the Load options the engine understands.
type options struct {
	backend      string
	modelID      string
	threads      int
	maxBatch     int
	maxQueue     int
	prefillChunk int
	// snapshotEvery is the snapshot grid of a model with linear layers (state_snapshot_every; 0: the default
	// from its layout, runner.SnapshotGrid).
	snapshotEvery    int
	prefixCacheBytes int64
	memoryLimit      int64
	weights          backend.Weights
	pd               pdOptions
	// slowdown (≥ 1, 1 off) stretches every forward pass to that many times its duration, for tests that
	// need two nodes of different speeds on one machine (see slowModel).
	slowdown float64
}

func parseOptions(in map[string]string) (options, error) {
	o := options{backend: "auto", prefixCacheBytes: 1 << 30, slowdown: 1}
	pd, in, err := parsePD(in)
	if err != nil {
		return o, err
	}
	o.pd = pd
	for k, v := range in {
		var err error
		switch k {
		case "backend":
			o.backend = v
		case "model_id":
			o.modelID = v
		case "threads":
			o.threads, err = strconv.Atoi(v)
		case "max_batch":
			o.maxBatch, err = strconv.Atoi(v)
		case "max_queue":
			o.maxQueue, err = strconv.Atoi(v)
		case "prefill_chunk":
			o.prefillChunk, err = strconv.Atoi(v)
		case "state_snapshot_every":
			o.snapshotEvery, err = strconv.Atoi(v)
			if err == nil && (o.snapshotEvery <= 0 || o.snapshotEvery%64 != 0) {
				err = errors.New("want a positive multiple of 64 (the router's hash block)")
			}
		case "prefix_cache_mb":
			var mb int
			mb, err = strconv.Atoi(v)
			o.prefixCacheBytes = int64(mb) << 20
		case "memory_limit_mb":
			var mb int
			mb, err = strconv.Atoi(v)
			o.memoryLimit = int64(mb) << 20
		case "weights":
			o.weights, err = backend.ParseWeights(v)
		case "slowdown":
			o.slowdown, err = strconv.ParseFloat(v, 64)
			if err == nil && !(o.slowdown >= 1 && o.slowdown <= 100) {
				err = errors.New("want a factor from 1 to 100")
			}
		default:
			return o, engine.InvalidParam("options", "unknown option %q (known: backend, model_id, threads, max_batch, max_queue, prefill_chunk, state_snapshot_every, prefix_cache_mb, memory_limit_mb, weights, slowdown, kv_listen, kv_advertise, cluster_secret_file, remote_prefill_threshold, remote_prefill_required, remote_prefill_timeout, kv_frame_timeout, kv_pickup_timeout, kv_checksum)", k)
		}
		if err != nil {
			return o, engine.InvalidParam("options", "option %s=%q: %v", k, v, err)
		}
	}
	return o, nil
}

// pickBackend resolves "auto" to the best backend of this build.
func pickBackend(name string) (backend.Backend, error) {
	if name == "auto" {
		name = "cpu"
		for _, n := range backend.Names() {
			if n == "mlx" {
				name = "mlx"
			}
		}
	}
	b, err := backend.Lookup(name)
	if err != nil && name == "mlx" {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "the MLX backend is not in this build: build duet with -tags mlx against an installed mlx-c (see plugins/mlx-engine/README.md), or use backend=cpu")
	}
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "%v", err)
	}
	return b, nil
}

// Load loads a model into a new instance.
func (e *Engine) Load(ctx context.Context, req engine.LoadRequest) (engine.Description, error) {
	if req.Model == "" {
		return engine.Description{}, engine.InvalidParam("model", "model is required")
	}
	opts, err := parseOptions(req.Options)
	if err != nil {
		return engine.Description{}, err
	}
	b, err := pickBackend(opts.backend)
	if err != nil {
		return engine.Description{}, err
	}
	id := req.InstanceID
	if id == "" {
		id = fmt.Sprintf("mlx-%d", e.nextID.Add(1))
	}
	e.mu.RLock()
	_, dup := e.instances[id]
	e.mu.RUnlock()
	if dup {
		return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "instance %q already exists", id)
	}

	start := time.Now()
	dir, modelID, cleanup, err := resolveModel(ctx, req.Model, e.log)
	if err != nil {
		return engine.Description{}, err
	}
	if opts.modelID != "" {
		modelID = opts.modelID
	}
	in, err := e.open(dir, b, opts)
	if err != nil {
		if cleanup != nil {
			cleanup()
		}
		return engine.Description{}, err
	}
	in.cleanup = cleanup
	in.desc.InstanceID, in.desc.ModelID = id, modelID
	in.pd = opts.pd
	if opts.pd.listen == "" && req.KVHost != "" {
		// Every instance can prefill for other nodes, on the host the gateway suggests.
		opts.pd.listen = net.JoinHostPort(req.KVHost, "0")
	}
	if opts.pd.listen != "" {
		if err := in.startKVServer(opts.pd); err != nil {
			in.close()
			return engine.Description{}, err
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.instances[id]; dup {
		in.close()
		return engine.Description{}, engine.Errorf(engine.CodeInvalidArgument, "instance %q already exists", id)
	}
	e.instances[id] = in
	attrs := []any{"instance", id, "model", modelID, "dir", dir, "backend", b.Name(),
		"params", in.desc.Parameters, "dtype", in.desc.DType, "took", time.Since(start).Round(time.Millisecond)}
	if wh, ok := in.bmodel.(backend.WeightsHolder); ok {
		attrs = append(attrs, "weights", wh.Weights())
	}
	e.log.Info("model loaded", attrs...)
	return in.desc, nil
}

// open loads the model files of dir onto backend b.
func (e *Engine) open(dir string, b backend.Backend, opts options) (*instance, error) {
	m, err := model.Load(dir)
	if err != nil {
		return nil, engine.Errorf(engine.CodeInvalidArgument, "load model %s: %v", dir, err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		m.Close()
		return nil, engine.Errorf(engine.CodeInvalidArgument, "load tokenizer of %s: %v", dir, err)
	}
	tmpl, err := chattemplate.Load(dir)
	if err != nil {
		if !errors.Is(err, chattemplate.ErrNoTemplate) {
			m.Close()
			return nil, engine.Errorf(engine.CodeInvalidArgument, "chat template of %s: %v", dir, err)
		}
		tmpl = nil
	}
	threads := opts.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	bm, err := b.Load(m, backend.Options{Threads: threads, MemoryLimit: opts.memoryLimit, Weights: opts.weights})
	if err != nil {
		m.Close()
		return nil, engine.Errorf(engine.CodeInternal, "load model onto backend %s: %v", b.Name(), err)
	}
	if opts.slowdown > 1 {
		bm = slowModel{Model: bm, factor: opts.slowdown}
	}
	layout := bm.KVLayout()
	if len(layout.Layers) == 0 {
		return nil, engine.Errorf(engine.CodeInternal, "backend %s reports a KV layout without layers", b.Name())
	}
	in := &instance{model: m, bmodel: bm, tok: tok, template: tmpl, eos: tok.EOS(), log: e.log, grammars: grammar.NewCache(grammarCacheSize)}
	if tmpl != nil {
		var added []string
		for _, a := range tok.AddedTokens() {
			added = append(added, a.Content)
		}
		in.format = toolcall.Detect(tmpl.Source(), added)
		in.eos = appendTurnEnds(in.eos, tok, tmpl.Source(), in.format)
	}
	markers := map[int32]bool{}
	for _, m := range in.format.Markers() {
		if id, ok := tok.TokenID(m); ok && tok.IsSpecial(id) {
			markers[id] = true
		}
	}
	in.runner = runner.New(runner.Config{
		Model: bm, Tokenizer: tokenizerAdapter{t: tok, markers: markers},
		MaxBatch: opts.maxBatch, MaxQueue: opts.maxQueue, PrefillChunk: opts.prefillChunk,
		PrefixCacheBytes: opts.prefixCacheBytes, StateSnapshotEvery: opts.snapshotEvery, Logger: e.log,
	})
	quant := ""
	if q := m.Config.Quantization; q != nil {
		quant = fmt.Sprintf("%s-%dbit-g%d", q.Mode, q.Bits, q.GroupSize)
	}
	in.desc = engine.Description{
		Architecture:     string(m.Config.Family),
		Backend:          b.Name(),
		Fingerprint:      m.Fingerprint(),
		KVCompat:         m.KVCompat(tok.Identity()),
		DType:            string(m.DType),
		Quantization:     quant,
		Parameters:       m.NumParams(),
		ContextLength:    bm.MaxContext(),
		VocabSize:        bm.VocabSize(),
		MaxBytesPerToken: tok.MaxBytesPerToken(),
		KV:               describeKV(layout),
		Capabilities: engine.Capabilities{
			Chat: tmpl != nil, Completions: true, TokenPrompts: true, Logprobs: true, MaxTopLogprobs: 20,
			RemotePrefill: true, MaxChoices: in.runner.MaxBatch(), LogitBias: true,
			Tools: in.format.Calls != toolcall.CallsNone, Reasoning: in.format.Reasoning != toolcall.ReasoningNone,
			Grammar: true,
		},
	}
	return in, nil
}

func (in *instance) close() {
	in.stopKVServer()
	in.runner.Close()
	in.bmodel.Close()
	in.model.Close()
	if in.cleanup != nil {
		in.cleanup()
	}
}

// Unload stops an instance; its requests end cancelled.
func (e *Engine) Unload(_ context.Context, id string) error {
	e.mu.Lock()
	in, ok := e.instances[id]
	delete(e.instances, id)
	e.mu.Unlock()
	if !ok {
		return engine.Errorf(engine.CodeNotFound, "no instance %q", id)
	}
	in.close()
	return nil
}

// Close unloads every instance.
func (e *Engine) Close() {
	e.mu.Lock()
	ins := e.instances
	e.instances = map[string]*instance{}
	e.mu.Unlock()
	for _, in := range ins {
		in.close()
	}
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

// promptInput is a request's prompt: chat messages (with the tools and variables their template renders), a
// text or tokens.
type promptInput struct {
	messages            []engine.Message
	tools               []engine.Tool
	vars                map[string]any
	text                string
	tokens              []int32
	addGenerationPrompt bool
}

// prompt renders and tokenizes a request's prompt, exactly as Generate and Tokenize do. A prompt that cannot
// fit the context is refused as soon as that is certain: from its length in bytes when the tokenizer bounds
// the bytes per token, else once tokenizing it passes the context. Either way a prompt of many megabytes
// costs about what the context holds, not its whole length.
func (in *instance) prompt(p promptInput) ([]int32, string, error) {
	maxCtx := in.runner.MaxContext()
	if mb := in.tok.MaxBytesPerToken(); mb > 0 && len(p.tokens) == 0 {
		size := len(p.text)
		for _, m := range p.messages {
			size += len(m.Content) + len(m.Reasoning) // a chat template writes every message it is given
			for _, c := range m.ToolCalls {
				size += len(c.Arguments)
			}
		}
		if least := (size + mb - 1) / mb; least >= maxCtx {
			return nil, "", contextExceeded(maxCtx, least)
		}
	}
	encode := func(s string, special bool) ([]int32, error) {
		ids, complete := in.tok.EncodeLimit(s, special, maxCtx)
		if !complete {
			return nil, contextExceeded(maxCtx, len(ids))
		}
		return ids, nil
	}
	switch {
	case len(p.messages) > 0:
		if in.template == nil {
			return nil, "", engine.InvalidParam("messages", "model %s has no chat template; use /v1/completions", in.desc.ModelID)
		}
		input, err := templateInput(p.messages, p.tools, p.vars, in.format)
		if err != nil {
			return nil, "", err
		}
		input.AddGenerationPrompt = p.addGenerationPrompt
		rendered, err := in.template.Render(input)
		if err != nil {
			var raise *chattemplate.RaiseError
			if errors.As(err, &raise) {
				return nil, "", engine.InvalidParam("messages", "the model's chat template rejected the conversation: %s", raise.Message)
			}
			return nil, "", engine.Errorf(engine.CodeInternal, "render the chat template: %v", err)
		}
		// Templates write the BOS token themselves.
		ids, err := encode(rendered, false)
		return ids, rendered, err
	case len(p.tokens) > 0:
		return p.tokens, in.tok.Decode(p.tokens, false), nil
	case p.text != "":
		ids, err := encode(p.text, true)
		return ids, p.text, err
	}
	return nil, "", engine.InvalidParam("messages", "the request has no prompt")
}

// contextExceeded is the error of a prompt known to hold at least least tokens, no fewer than the context.
func contextExceeded(maxCtx, least int) error {
	return &engine.Error{Code: engine.CodeContextLength, Param: "messages", Message: fmt.Sprintf(
		"This model's maximum context length is %d tokens, but the prompt has at least %d tokens.", maxCtx, least)}
}

// Tokenize renders and tokenizes a prompt.
func (e *Engine) Tokenize(_ context.Context, req engine.TokenizeRequest) (engine.TokenizeResponse, error) {
	in, err := e.instance(req.InstanceID)
	if err != nil {
		return engine.TokenizeResponse{}, err
	}
	if len(req.Messages) == 0 && !req.AddSpecialTokens && req.Prompt != "" {
		ids, complete := in.tok.EncodeLimit(req.Prompt, false, in.runner.MaxContext())
		if !complete {
			return engine.TokenizeResponse{}, contextExceeded(in.runner.MaxContext(), len(ids))
		}
		return engine.TokenizeResponse{Tokens: ids, Text: req.Prompt}, nil
	}
	toks, text, err := in.prompt(promptInput{messages: req.Messages, tools: req.Tools, vars: req.TemplateVars,
		text: req.Prompt, addGenerationPrompt: req.AddGenerationPrompt})
	if err != nil {
		return engine.TokenizeResponse{}, err
	}
	return engine.TokenizeResponse{Tokens: toks, Text: text}, nil
}

// Generate runs one request on its instance's loop.
func (e *Engine) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Event) error) error {
	arrived := time.Now()
	in, err := e.instance(req.InstanceID)
	if err != nil {
		return err
	}
	prompt, rendered, err := in.prompt(promptInput{messages: req.Messages, tools: req.Tools, vars: req.TemplateVars,
		text: req.Prompt, tokens: req.PromptTokens, addGenerationPrompt: true})
	if err != nil {
		return err
	}
	g, err := in.grammarFor(req)
	if err != nil {
		return err
	}
	var newConstraint func() (runner.Constraint, error)
	if g != nil {
		if newConstraint, err = in.constraint(g); err != nil {
			return err
		}
		if in.format.OpensReasoning(rendered) {
			// The template opened a reasoning block (DeepSeek-R1 does): the constrained output is the answer,
			// so the block is closed first, as templates do when thinking is off.
			_, closing := in.format.Reasoning.Markers()
			rendered += closing + "\n\n"
			ids, complete := in.tok.EncodeLimit(rendered, false, in.runner.MaxContext())
			if !complete {
				return contextExceeded(in.runner.MaxContext(), len(ids))
			}
			prompt = ids
		}
	}
	newOutput, err := in.outputParser(req, rendered)
	if err != nil {
		return err
	}
	s := req.Sampling
	stopTokens := append([]int32(nil), s.StopTokenIDs...)
	if !s.IgnoreEOS {
		stopTokens = append(stopTokens, in.eos...)
	}
	return in.runner.Generate(ctx, runner.Request{
		ID:     req.RequestID,
		Prompt: prompt,
		Sampling: sampling.Params{
			Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP, Seed: s.Seed,
			RepetitionPenalty: s.RepetitionPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
			Logprobs: s.Logprobs, TopLogprobs: s.TopLogprobs, LogitBias: logitBias(s.LogitBias),
		},
		N:             req.N,
		NewOutput:     newOutput,
		NewConstraint: newConstraint,
		MaxTokens:     s.MaxTokens,
		Stop:          s.Stop,
		StopTokens:    stopTokens,
		Arrived:       arrived,
		Remote:        in.remote(req.PrefillEndpoints),
	}, emit)
}

// outputParser returns what makes each choice's output parser: for chat requests to a model whose family
// writes tool calls or reasoning in a syntax the engine knows, nil otherwise.
func (in *instance) outputParser(req engine.GenerateRequest, rendered string) (func() runner.Output, error) {
	if len(req.Messages) == 0 || in.format == (toolcall.Format{}) {
		return nil, nil
	}
	opts := toolcall.Options{StartInReasoning: in.format.OpensReasoning(rendered)}
	if req.ToolChoice.Mode != engine.ToolChoiceNone {
		for _, t := range req.Tools {
			opts.Tools = append(opts.Tools, toolcall.Tool{Name: t.Name, Parameters: t.Parameters})
		}
	}
	first, err := toolcall.NewParser(in.format, opts) // the tools are checked here, once
	if err != nil {
		return nil, engine.InvalidParam("tools", "%v", err)
	}
	return func() runner.Output {
		p := first
		if first == nil {
			p, _ = toolcall.NewParser(in.format, opts)
		}
		first = nil
		return &parsedOutput{p: p, log: in.log, request: req.RequestID}
	}, nil
}

// logitBias converts the contract's bias to the sampler's.
func logitBias(in map[int32]float64) map[int32]float32 {
	if len(in) == 0 {
		return nil
	}
	out := make(map[int32]float32, len(in))
	for t, b := range in {
		out[t] = float32(b)
	}
	return out
}

// Stats reports each instance's load, KV memory and prefix cache.
func (e *Engine) Stats(context.Context) (engine.Stats, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	st := engine.Stats{Metrics: runtimeMetrics()}
	for id, in := range e.instances {
		rs := in.runner.Stats()
		pc := rs.PrefixCache
		var metrics map[string]float64
		if mm, ok := in.bmodel.(interface{ Metrics() map[string]float64 }); ok {
			metrics = mm.Metrics() // backend memory figures, e.g. MLX's active, peak and cache bytes
		}
		st.Instances = append(st.Instances, engine.InstanceStats{
			InstanceID: id, InFlight: rs.Active, Queued: rs.Waiting, KVBytes: rs.KVBytes, KVCapacityBytes: rs.KVCapacityBytes,
			Metrics: metrics,
			PrefixCache: engine.PrefixCacheStats{
				Hits: pc.Hits, Misses: pc.Misses, HitTokens: pc.HitTokens, Entries: pc.Entries, Bytes: pc.Bytes,
				CapacityBytes: pc.CapacityBytes, Evictions: pc.Evictions,
			},
		})
	}
	return st, nil
}

// Health is nil while the engine can serve.
func (e *Engine) Health(context.Context) error { return nil }

// tokenizerAdapter gives the runner what it needs of a tokenizer.
type tokenizerAdapter struct {
	t       *tokenizer.Tokenizer
	markers map[int32]bool // special tokens an output parser reads
}

func (a tokenizerAdapter) NewStream(parsed bool) runner.TextStream {
	if parsed {
		return a.t.NewStreamKeeping(a.markers)
	}
	return a.t.NewStream(true)
}

func (a tokenizerAdapter) TokenText(id int32) (string, []byte) {
	b := a.t.TokenBytes(id)
	return strings.ToValidUTF8(string(b), "\ufffd"), b
}

// modelIDFor names a local model directory: its base name.
func modelIDFor(dir string) string { return filepath.Base(filepath.Clean(dir)) }

var runtimeSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/total:bytes"},
	{Name: "/sched/goroutines:goroutines"},
}

// runtimeMetrics are the engine process's own figures: Go heap, memory from the OS, goroutines.
func runtimeMetrics() map[string]float64 {
	s := make([]metrics.Sample, len(runtimeSamples))
	copy(s, runtimeSamples)
	metrics.Read(s)
	out := map[string]float64{}
	names := []string{"go_heap_objects_bytes", "go_memory_total_bytes", "go_goroutines"}
	for i, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			out[names[i]] = float64(v.Value.Uint64())
		}
	}
	return out
}

// describeKV is the layout in the engine description's per-model terms: every attention layer's shape is the
// first one's (the layers of every supported family share one), and a sliding layer counts as a full one, which
// is what a link's bytes-per-token estimate wants for prompts shorter than the window. A linear-attention layer
// (most of a hybrid's) holds no keys or values per token but a fixed state per sequence: it counts among
// LinearLayers, its state in StateBytes, so that BytesPerToken counts the attention layers alone.
func describeKV(l backend.KVLayout) engine.KVLayout {
	d := engine.KVLayout{NumLayers: l.NumLayers(), DType: string(l.DType), StateBytes: int64(l.StateBytes())}
	for _, ly := range l.Layers {
		switch {
		case ly.Kind == backend.KVLinear:
			d.LinearLayers++
		case d.NumKVHeads == 0:
			d.NumKVHeads, d.HeadDim = ly.KVHeads, ly.HeadDim
		}
	}
	return d
}
