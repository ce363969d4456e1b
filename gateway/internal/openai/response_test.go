package openai_test

import (
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

var meta = apitest.Meta("chatcmpl-abc", "fp_0123")

// remoteFinal ends a generation cut at its length limit, prefilled on another node.
func remoteFinal() *engine.Final {
	f := apitest.Final(engine.FinishLength, engine.Usage{PromptTokens: 5, CompletionTokens: 2, CachedTokens: 1})
	f.Timings.PrefillSource = engine.PrefillRemote
	f.Timings.Remote = &engine.RemotePrefill{Endpoint: "10.0.0.2:7000", InstanceID: "p0", Tokens: 4, Bytes: 4096, Transfer: time.Millisecond, Attempts: 1}
	return f
}

// toolResult is a choice that thought, then called a tool without text.
func toolResult() *apicore.Result {
	f := remoteFinal()
	f.FinishReason = engine.FinishToolCalls
	f.ToolCalls = []engine.ToolCall{{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}
	return apitest.Result(
		engine.Event{Token: &engine.Token{ID: 1, Reasoning: "The user wants the weather."}},
		engine.Event{Token: &engine.Token{ID: 2, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_abc", Name: "get_weather"}}}},
		engine.Event{Final: f})
}

func result() *apicore.Result {
	return apitest.Result(
		engine.Event{Progress: &engine.Progress{Done: 5, Total: 5}},
		engine.Event{Token: &engine.Token{ID: 1, Text: "Hé", Logprob: apitest.Logprob("Hé", -0.5, -3)}},
		engine.Event{Token: &engine.Token{ID: 2, Text: "llo\n", Logprob: apitest.Logprob("llo\n", -0.25, -3)}},
		engine.Event{Final: remoteFinal()})
}

// TestGolden renders each response shape and compares it with testdata/<name>.json, which also must be
// valid JSON. Run with -update to rewrite them after an intended change.
func TestGolden(t *testing.T) {
	t.Parallel()
	cases := map[string][]byte{
		"chat_completion":        openai.AppendChatCompletion(nil, meta, apicore.Results{result()}, true),
		"chat_completion_plain":  openai.AppendChatCompletion(nil, meta, apicore.Results{result()}, false),
		"chat_completion_routed": openai.AppendChatCompletion(nil, apitest.Routed(meta), apicore.Results{result()}, false),
		"chat_completion_tools":  openai.AppendChatCompletion(nil, meta, apicore.Results{toolResult()}, false),
		"chat_completion_n2":     openai.AppendChatCompletion(nil, meta, apicore.Results{result(), toolResult()}, false),
		"chat_chunk_call_start": openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{Index: 1, ToolCalls: []engine.ToolCallDelta{
			{Index: 0, ID: "call_abc", Name: "get_weather", Arguments: ""}}}),
		"chat_chunk_call_args":   openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"city":`}}}),
		"chat_chunk_reasoning":   openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{Role: true, Reasoning: "Let me think."}),
		"chat_chunk_role":        openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{Role: true, UsageNull: true}),
		"chat_chunk_content":     openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{Content: "hi \"there\"", Logprobs: result().Logprobs[:1]}),
		"chat_chunk_final":       openai.AppendChatChunk(nil, openai.ChunkMeta{Meta: meta}, openai.ChatChunk{Finish: remoteFinal(), UsageNull: true}),
		"usage_chunk":            openai.AppendUsageChunk(nil, "chat.completion.chunk", openai.ChunkMeta{Meta: meta}, remoteFinal().Usage),
		"completion":             openai.AppendCompletion(nil, meta, apicore.Results{result()}, true),
		"completion_chunk":       openai.AppendCompletionChunk(nil, openai.ChunkMeta{Meta: meta}, openai.CompletionChunk{Text: "llo", Logprobs: result().Logprobs[1:], TextOffset: 3}),
		"completion_chunk_final": openai.AppendCompletionChunk(nil, openai.ChunkMeta{Meta: meta}, openai.CompletionChunk{Finish: remoteFinal()}),
		"models":                 openai.AppendModelList(nil, []openai.Model{{ID: "a/b", Created: 1, OwnedBy: "duet"}, {ID: "c", Created: 2, OwnedBy: "duet"}}),
	}
	for name, got := range cases {
		t.Run(name, func(t *testing.T) {
			apitest.GoldenJSON(t, name+".json", got)
		})
	}
}
