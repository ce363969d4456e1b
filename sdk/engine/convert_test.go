package engine

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// The conversions are the plugin protocol's field mapping: every field must survive a round trip.

func TestGenerateRequestRoundTrip(t *testing.T) {
	t.Parallel()
	seed := int64(-7)
	cases := map[string]GenerateRequest{
		"chat": {
			RequestID: "r", InstanceID: "i",
			Messages: []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u", Name: "n"}},
			Sampling: Sampling{
				MaxTokens: 5, Temperature: 0.7, TopP: 0.9, TopK: 40, MinP: 0.05, Seed: &seed, Stop: []string{"a", "b"},
				StopTokenIDs: []int32{1, 2}, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3, PresencePenalty: 0.1,
				FrequencyPenalty: -0.2, RepetitionPenalty: 1.1,
			},
			PrefillEndpoints: []PrefillEndpoint{{InstanceID: "p", Address: "10.0.0.1:7000", Node: "n2"}, {Address: "10.0.0.2:7000", Approximate: true}},
		},
		"tokens without seed": {InstanceID: "i", PromptTokens: []int32{5, 6, 7}},
		"tools and formats": {InstanceID: "i", N: 3, ParallelToolCalls: true,
			Messages: []Message{
				{Role: "assistant", Reasoning: "thinking", ToolCalls: []ToolCall{{ID: "call_1", Name: "f", Arguments: `{"x":1}`}}},
				{Role: "tool", ToolCallID: "call_1", Content: "42"},
			},
			Tools:          []Tool{{Name: "f", Description: "does f", Parameters: []byte(`{"type":"object"}`), Strict: true}},
			ToolChoice:     ToolChoice{Mode: ToolChoiceFunction, Name: "f"},
			ResponseFormat: ResponseFormat{Type: FormatJSONSchema, Name: "s", Schema: []byte(`{"type":"object"}`), Strict: true},
			TemplateVars:   map[string]any{"enable_thinking": false, "date_string": "1 Dec 2026"},
			Sampling:       Sampling{LogitBias: map[int32]float64{5: -100, 7: 2.5}},
		},
		// Counts beyond int32 cross unchanged: the boundary never narrows (it once turned 2^32+4 into 4).
		"counts past int32": {InstanceID: "i", Prompt: "p", Sampling: Sampling{
			MaxTokens: 1<<32 + 4, TopK: 1<<31 + 1, TopLogprobs: 1 << 40}},
		"text": {InstanceID: "i", Prompt: "once upon a time"},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			out := generateRequestFromProto(generateRequestToProto(in))
			if !reflect.DeepEqual(in, out) {
				t.Errorf("round trip:\n in %+v\nout %+v", in, out)
			}
		})
	}
}

func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]Event{
		"progress":            {Progress: &Progress{Done: 3, Total: 9}},
		"progress past int32": {Progress: &Progress{Done: 1 << 33, Total: 1<<33 + 1}},
		"token of choice 2":   {Choice: 2, Token: &Token{ID: 3, Reasoning: "hmm", ToolCalls: []ToolCallDelta{{Index: 1, ID: "call_2", Name: "g", Arguments: `{"a"`}}}},
		"final with calls": {Choice: 1, Final: &Final{FinishReason: FinishToolCalls, Reasoning: "done thinking",
			ToolCalls: []ToolCall{{ID: "call_1", Name: "f", Arguments: `{}`}}}},
		"token": {Token: &Token{ID: 42, Text: "hé"}},
		"token with logprobs": {Token: &Token{ID: 1, Text: "a", Logprob: &Logprob{
			Token: "a", Bytes: []byte("a"), Logprob: -0.5,
			Top: []TopLogprob{{ID: 1, Token: "a", Bytes: []byte("a"), Logprob: -0.5}, {ID: 2, Token: "b", Bytes: []byte{0xe2}, Logprob: -2}},
		}}},
		"final": {Final: &Final{
			FinishReason: FinishError, Error: "boom", ErrorCode: CodeInternal, Text: "held",
			Usage: Usage{PromptTokens: 10, CompletionTokens: 2, CachedTokens: 4},
			Timings: Timings{
				Queue: time.Millisecond, Prefill: 2 * time.Millisecond, FirstToken: 3, Decode: 4, Total: 5, PrefillSource: PrefillRemote,
				Remote: &RemotePrefill{Endpoint: "e", InstanceID: "p", Tokens: 9, Bytes: 1 << 20, Wait: 1, Transfer: 2, Ingest: 3, Attempts: 2, FallbackReason: "busy", Approximate: true},
			},
		}},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			out := eventFromProto(eventToProto(in))
			if !reflect.DeepEqual(in, out) {
				t.Errorf("round trip:\n in %+v\nout %+v", in, out)
			}
		})
	}
}

func TestDescriptionStatsRoundTrip(t *testing.T) {
	t.Parallel()
	d := Description{
		InstanceID: "i", ModelID: "m", Architecture: "llama", Backend: "go", Fingerprint: "f", DType: "bfloat16",
		Quantization: "affine-4bit-g64", Parameters: 123, ContextLength: 4096, VocabSize: 32000, MaxBytesPerToken: 48, KVCompat: "kv1:llama-0011",
		KV: KVLayout{NumLayers: 4, NumKVHeads: 4, HeadDim: 64, DType: "bfloat16", LinearLayers: 3, StateBytes: 1 << 20},
		Capabilities: Capabilities{Chat: true, Completions: true, TokenPrompts: true, Logprobs: true, MaxTopLogprobs: 20, PrefillServer: true, RemotePrefill: true,
			Tools: true, Grammar: true, Reasoning: true, MaxChoices: 8, LogitBias: true},
		PrefillEndpoint: "127.0.0.1:7000",
	}
	if out := descriptionFromProto(descriptionToProto(d)); !reflect.DeepEqual(d, out) {
		t.Errorf("description round trip:\n in %+v\nout %+v", d, out)
	}
	s := Stats{
		Metrics: map[string]float64{"x": 1},
		Instances: []InstanceStats{{
			InstanceID: "i", InFlight: 2, Queued: 1, KVBytes: 10, KVCapacityBytes: 20, Metrics: map[string]float64{"y": 2},
			PrefixCache: PrefixCacheStats{Hits: 1, Misses: 2, HitTokens: 3, Entries: 4, Bytes: 5, CapacityBytes: 6, Evictions: 7},
		}},
	}
	if out := statsFromProto(statsToProto(s)); !reflect.DeepEqual(s, out) {
		t.Errorf("stats round trip:\n in %+v\nout %+v", s, out)
	}
}

func TestErrorsCrossTheBoundary(t *testing.T) {
	t.Parallel()
	for _, code := range []Code{CodeInvalidArgument, CodeContextLength, CodeNotFound, CodeResourceExhausted, CodeUnavailable, CodeInternal} {
		in := &Error{Code: code, Message: "msg " + string(code), Param: "max_tokens"}
		out := fromStatus(t.Context(), toStatus(in))
		var e *Error
		if !errors.As(out, &e) || !reflect.DeepEqual(e, in) {
			t.Errorf("%s: got %#v", code, out)
		}
	}
	if got := CodeOf(fromStatus(t.Context(), toStatus(errors.New("plain")))); got != CodeInternal {
		t.Errorf("a plain error became %q", got)
	}
}

func TestKVBytesPerToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		l        KVLayout
		perToken int64
		prompt   int64 // TransferBytes(1000)
	}{
		// 32 layers, 8 KV heads of 128, bf16: 128 KiB per token.
		{"Llama-3.1-8B", KVLayout{NumLayers: 32, NumKVHeads: 8, HeadDim: 128, DType: "bfloat16"}, 128 << 10, 1000 * 128 << 10},
		{"float32", KVLayout{NumLayers: 2, NumKVHeads: 1, HeadDim: 4, DType: "float32"}, 64, 64000},
		// Qwen3-Next-80B-A3B: 48 layers, 36 of them Gated DeltaNet, whose states are a 3×8192 bf16 conv window
		// and 32×128×128 float32 each; the 12 attention layers have 2 KV heads of 256.
		{"Qwen3-Next", KVLayout{NumLayers: 48, NumKVHeads: 2, HeadDim: 256, DType: "bfloat16", LinearLayers: 36,
			StateBytes: 36 * (3*8192*2 + 32*128*128*4)}, 24 << 10, 1000*24<<10 + 77266944},
		{"only linear layers", KVLayout{NumLayers: 4, DType: "bfloat16", LinearLayers: 4, StateBytes: 5000}, 0, 5000},
	} {
		if got := c.l.BytesPerToken(); got != c.perToken {
			t.Errorf("%s: %d bytes per token, want %d", c.name, got, c.perToken)
		}
		if got := c.l.TransferBytes(1000); got != c.prompt {
			t.Errorf("%s: a prompt of 1000 tokens moves %d bytes, want %d", c.name, got, c.prompt)
		}
	}
}

func TestLoadRequestRoundTrip(t *testing.T) {
	t.Parallel()
	in := LoadRequest{InstanceID: "n1-0", Model: "org/m", Options: map[string]string{"backend": "cpu"}, KVHost: "10.0.0.1"}
	if out := loadRequestFromProto(loadRequestToProto(in)); !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n in %+v\nout %+v", in, out)
	}
}
