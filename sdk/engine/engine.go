package engine

import (
	"context"
	"time"
)

// Engine is what an engine plugin implements. Every method may be called concurrently.
type Engine interface {
	// Load loads a model into a new instance and describes it. LoadRequest.Model is a local directory or a model
	// id the engine knows how to obtain.
	Load(ctx context.Context, req LoadRequest) (Description, error)
	// Unload frees an instance. Requests in flight on it end with FinishCancelled.
	Unload(ctx context.Context, instanceID string) error
	// Instances describes every loaded instance.
	Instances(ctx context.Context) ([]Description, error)
	// Generate runs one request and calls emit for each event, in order, from one goroutine at a time. The last
	// event is always a Final, also when the request fails after it started; Generate returns an error only
	// when the request could not start (bad request, unknown instance, engine busy). When ctx ends, the engine
	// stops promptly and emits a Final with FinishCancelled. An error returned by emit means the consumer is
	// gone: the engine stops and returns that error.
	Generate(ctx context.Context, req GenerateRequest, emit func(Event) error) error
	// Tokenize renders and tokenizes a prompt exactly as Generate would.
	Tokenize(ctx context.Context, req TokenizeRequest) (TokenizeResponse, error)
	// Stats reports load and memory figures; it must be cheap (the gateway polls it).
	Stats(ctx context.Context) (Stats, error)
	// Health returns nil when the engine can serve requests.
	Health(ctx context.Context) error
}

// LoadRequest asks for a model to be loaded into an instance.
type LoadRequest struct {
	// InstanceID names the instance; the engine picks one when it is empty.
	InstanceID string
	// Model is a local model directory or a model id (e.g. a Hugging Face repository "org/name").
	Model string
	// Options are engine-specific settings, documented by each engine (e.g. "backend", "kv_listen").
	Options map[string]string
	// KVHost is the host the gateway suggests for the instance's KV wire server (its own API's host, or an
	// unspecified address when it serves every interface), so that every instance can prefill for other
	// nodes. An engine that serves KV listens there on a port of its choosing unless its options say
	// otherwise; others ignore it. Empty: serve KV only when the options ask.
	KVHost string
}

// Description says what an instance serves and how other engines can reach its KV cache.
type Description struct {
	InstanceID   string
	ModelID      string
	Architecture string // e.g. "llama", "qwen3"
	Backend      string // e.g. "go", "mlx", "echo"
	// Fingerprint identifies the model's architecture and weights: instances with equal fingerprints exchange
	// KV exactly.
	Fingerprint string
	// KVCompat names what KV exchange needs besides the weights (architecture, RoPE, tokenizer): instances with
	// equal KVCompat but other fingerprints (the same base model at another quantization) exchange KV
	// approximately, when an operator links them. Empty: only exact exchange.
	KVCompat      string
	DType         string // compute dtype: "bfloat16", "float16", "float32"
	Quantization  string // e.g. "" (none), "affine-4bit-g64"
	Parameters    int64
	ContextLength int
	VocabSize     int
	// MaxBytesPerToken bounds the prompt bytes one token can stand for, 0 when nothing does: a prompt of n
	// bytes has at least n/MaxBytesPerToken tokens. The gateway refuses a prompt that cannot fit ContextLength
	// by this bound without sending it to the engine.
	MaxBytesPerToken int
	KV               KVLayout
	Capabilities     Capabilities
	// PrefillEndpoint is the host:port of the instance's KV wire server, or empty when it serves none.
	PrefillEndpoint string
}

// KVLayout is the shape of an instance's KV cache as it travels on the KV wire. Of its NumLayers layers (every
// layer, as the wire header's num_layers counts them), LinearLayers hold a fixed-size state per sequence
// instead of keys and values per token: a hybrid model's linear-attention layers. The others hold NumKVHeads×
// HeadDim keys and as many values per token, each element in DType. A transfer moves the states once, whatever
// the prompt's length: StateBytes over all linear layers.
type KVLayout struct {
	NumLayers    int
	NumKVHeads   int
	HeadDim      int
	DType        string // "bfloat16", "float16" or "float32"
	LinearLayers int
	StateBytes   int64
}

// BytesPerToken is the size of one token's keys and values over the layers that hold them (not LinearLayers).
func (l KVLayout) BytesPerToken() int64 {
	size := int64(4)
	switch l.DType {
	case "bfloat16", "float16":
		size = 2
	}
	return 2 * int64(max(l.NumLayers-l.LinearLayers, 0)) * int64(l.NumKVHeads) * int64(l.HeadDim) * size
}

// TransferBytes is what the KV of a prompt of n tokens costs on the wire: n tokens' keys and values and,
// once, the linear layers' states.
func (l KVLayout) TransferBytes(n int) int64 {
	return int64(n)*l.BytesPerToken() + l.StateBytes
}

// Capabilities say which parts of GenerateRequest an instance honours.
type Capabilities struct {
	Chat           bool // Messages rendered with a chat template
	Completions    bool // Prompt as text
	TokenPrompts   bool // PromptTokens
	Logprobs       bool
	MaxTopLogprobs int
	PrefillServer  bool // serves its KV to other engines
	RemotePrefill  bool // can continue from KV fetched from PrefillEndpoints
	// Tools: the chat template renders GenerateRequest.Tools and tool messages, and the engine parses tool
	// calls out of the output (Token.ToolCalls, Final.ToolCalls).
	Tools bool
	// Grammar: the engine constrains decoding to ResponseFormat's JSON and to forced tool calls.
	Grammar bool
	// Reasoning: the engine sends a reasoning model's thinking as Token.Reasoning, not as content.
	Reasoning bool
	// MaxChoices is the largest GenerateRequest.N honoured (0 or 1: one choice).
	MaxChoices int
	// LogitBias: Sampling.LogitBias is applied.
	LogitBias bool
}

// Message is one chat message. Content is plain text: the gateway flattens OpenAI content parts.
type Message struct {
	Role    string // "system", "user", "assistant", "tool" (engines may accept others their templates know)
	Content string
	Name    string
	// ToolCalls are the calls an assistant message made; ToolCallID says which call a "tool" message answers.
	ToolCalls  []ToolCall
	ToolCallID string
	// Reasoning is an assistant message's thinking (OpenAI-compatible servers call it reasoning_content);
	// templates of reasoning models decide whether to show it.
	Reasoning string
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the function's arguments (an object schema), as the client sent it.
	Parameters []byte
	// Strict asks that the arguments match Parameters exactly: engines with Grammar constrain them.
	Strict bool
}

// ToolCall is one call of a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object
}

// ToolCallDelta is a piece of a tool call as it streams: the first piece of a call has its ID and Name, the
// following ones add to its Arguments.
type ToolCallDelta struct {
	Index     int // of the call among the choice's calls
	ID        string
	Name      string
	Arguments string
}

// Tool choice modes.
const (
	ToolChoiceAuto     = "auto"     // the model decides (the default when tools are given)
	ToolChoiceNone     = "none"     // no call: tools are shown to the template but the output is text
	ToolChoiceRequired = "required" // at least one call
	ToolChoiceFunction = "function" // a call of ToolChoice.Name
)

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	Mode string // one of the ToolChoice constants; empty: auto
	Name string // for ToolChoiceFunction
}

// Response formats.
const (
	FormatText       = "text"
	FormatJSONObject = "json_object" // any JSON object
	FormatJSONSchema = "json_schema" // a JSON value matching Schema
)

// ResponseFormat constrains a generation's text.
type ResponseFormat struct {
	Type   string // one of the Format constants; empty: text
	Name   string
	Schema []byte // for FormatJSONSchema
	Strict bool
}

// GenerateRequest is one generation. Exactly one of Messages, Prompt and PromptTokens is set.
type GenerateRequest struct {
	RequestID  string
	InstanceID string
	Messages   []Message
	Prompt     string
	// PromptTokens is a prompt given as token ids (OpenAI completions accept them).
	PromptTokens []int32
	Sampling     Sampling
	// PrefillEndpoints are KV wire servers, in order of preference, that may prefill the prompt for this
	// request. Engines without RemotePrefill ignore them.
	PrefillEndpoints []PrefillEndpoint
	// Tools the model may call, and whether and which it must (chat requests; Capabilities.Tools).
	Tools      []Tool
	ToolChoice ToolChoice
	// ParallelToolCalls allows more than one call in an answer.
	ParallelToolCalls bool
	// ResponseFormat constrains the output (Capabilities.Grammar).
	ResponseFormat ResponseFormat
	// TemplateVars are further variables of the chat template, e.g. "enable_thinking": false. Values are JSON
	// values (strings, numbers, bools, nil, []any, map[string]any).
	TemplateVars map[string]any
	// N is how many choices to generate from the one prompt (0 or 1: one). They share the prompt's prefill;
	// each has its own stream of draws (seeded from Sampling.Seed and its index). Events say their choice.
	N int
}

// Sampling controls how tokens are chosen. The zero value is greedy decoding up to the engine's default limit.
type Sampling struct {
	MaxTokens   int     // 0: as many as the context allows
	Temperature float64 // 0: greedy
	TopP        float64 // 0 or 1: off
	TopK        int     // 0: off
	MinP        float64 // 0: off
	// Seed makes sampling reproducible: the same request with the same seed yields the same tokens.
	Seed              *int64
	Stop              []string // stop strings; matched across token boundaries and not included in the output
	StopTokenIDs      []int32
	IgnoreEOS         bool
	Logprobs          bool
	TopLogprobs       int // alternatives per token, when Logprobs
	PresencePenalty   float64
	FrequencyPenalty  float64
	RepetitionPenalty float64 // 0 or 1: off
	// LogitBias is added to the logits of the given tokens before sampling (OpenAI's logit_bias, in [-100,
	// 100]; -100 bans a token, 100 all but forces it).
	LogitBias map[int32]float64
}

// PrefillEndpoint is a KV wire server that can prefill for a decode instance.
type PrefillEndpoint struct {
	InstanceID string
	Address    string // host:port
	Node       string
	// Approximate accepts KV from a model with the same KVCompat but another Fingerprint (the same base
	// model at another quantization, linked by an operator). Zero value: exact KV only.
	Approximate bool
}

// Event is one step of a generation stream. Exactly one of Progress, Token and Final is set.
type Event struct {
	// Choice is the index of the choice the event belongs to, when GenerateRequest.N > 1.
	Choice   int
	Progress *Progress
	Token    *Token
	Final    *Final
}

// Progress reports prompt processing, for long prompts.
type Progress struct {
	Done, Total int // prompt tokens processed so far, of Total
}

// Token is one generated token.
type Token struct {
	ID int32
	// Text is what this token adds to the output's content. It can be empty while the engine holds back bytes
	// of an incomplete UTF-8 character, a possible stop string or a possible tool-call marker.
	Text string
	// Reasoning is what it adds to the reasoning (a reasoning model's thinking), ToolCalls what it adds to tool
	// calls (Capabilities.Reasoning, Capabilities.Tools).
	Reasoning string
	ToolCalls []ToolCallDelta
	Logprob   *Logprob // set when the request asked for logprobs
}

// Logprob is the log probability of a chosen token and its top alternatives.
type Logprob struct {
	Token   string // the token's own text (may be a piece of a character: see Bytes)
	Bytes   []byte
	Logprob float64
	Top     []TopLogprob
}

// TopLogprob is one alternative token.
type TopLogprob struct {
	ID      int32
	Token   string
	Bytes   []byte
	Logprob float64
}

// FinishReason says why a generation ended.
type FinishReason string

// Finish reasons.
const (
	FinishStop      FinishReason = "stop"       // EOS, a stop token or a stop string
	FinishLength    FinishReason = "length"     // MaxTokens or the context length
	FinishToolCalls FinishReason = "tool_calls" // the model called tools
	FinishCancelled FinishReason = "cancelled"  // the caller cancelled or the instance was unloaded
	FinishError     FinishReason = "error"      // the engine failed; Final.Error says why
)

// Final ends every generation stream.
type Final struct {
	FinishReason FinishReason
	// Error and ErrorCode describe the failure when FinishReason is FinishError.
	Error     string
	ErrorCode Code
	// Text is output held back until the end (e.g. the start of a stop string that never completed);
	// Reasoning likewise for the reasoning.
	Text      string
	Reasoning string
	// ToolCalls are the choice's complete tool calls, also when they streamed as ToolCallDeltas.
	ToolCalls []ToolCall
	// Usage counts this choice's completion tokens (and the prompt, shared by all choices).
	Usage   Usage
	Timings Timings
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens are prompt tokens served from a prefix cache instead of being computed.
	CachedTokens int
}

// Prefill sources, for Timings.PrefillSource.
const (
	PrefillLocal  = "local"
	PrefillRemote = "remote"
	PrefillCache  = "cache" // the whole prompt but its last token came from the prefix cache
)

// Timings say where the time of a request went.
type Timings struct {
	Queue      time.Duration // waiting for the engine to start the request
	Prefill    time.Duration // prompt processing, local or remote
	FirstToken time.Duration // from arrival to the first token
	Decode     time.Duration // from the first token to the last
	Total      time.Duration
	// PrefillSource is PrefillLocal, PrefillRemote or PrefillCache.
	PrefillSource string
	// Remote is set when a remote prefill was attempted, also when it failed and the engine fell back.
	Remote *RemotePrefill
}

// RemotePrefill describes a prefill fetched over the KV wire.
type RemotePrefill struct {
	Endpoint   string
	InstanceID string
	Tokens     int
	Bytes      int64
	Wait       time.Duration // until the first KV bytes arrived
	Transfer   time.Duration // from the request until the last byte
	Ingest     time.Duration // time spent writing received KV into the cache
	Attempts   int
	// FallbackReason is set when every endpoint failed and the engine prefilled locally.
	FallbackReason string
	// Approximate: the KV came from another quantization of the model (same KVCompat, other Fingerprint),
	// so the tokens may differ from a local prefill's.
	Approximate bool
}

// TokenizeRequest asks how a prompt tokenizes. Exactly one of Messages and Prompt is set.
type TokenizeRequest struct {
	InstanceID          string
	Messages            []Message
	Prompt              string
	AddGenerationPrompt bool
	AddSpecialTokens    bool
	// Tools and TemplateVars are rendered with Messages as GenerateRequest's are, so the tokens are those
	// the generation would see.
	Tools        []Tool
	TemplateVars map[string]any
}

// TokenizeResponse is the rendered prompt and its tokens.
type TokenizeResponse struct {
	Tokens []int32
	Text   string
}

// Stats are an engine's load and memory figures.
type Stats struct {
	Instances []InstanceStats
	// Metrics are engine-wide figures by name (e.g. "mlx_peak_memory_bytes").
	Metrics map[string]float64
}

// InstanceStats are one instance's figures.
type InstanceStats struct {
	InstanceID      string
	InFlight        int
	Queued          int
	KVBytes         int64
	KVCapacityBytes int64
	PrefixCache     PrefixCacheStats
	Metrics         map[string]float64
}

// PrefixCacheStats describe an instance's prefix cache.
type PrefixCacheStats struct {
	Hits, Misses  int64
	HitTokens     int64
	Entries       int64
	Bytes         int64
	CapacityBytes int64
	Evictions     int64
}
