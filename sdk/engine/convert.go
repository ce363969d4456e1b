package engine

import (
	"encoding/json"
	"time"

	pb "github.com/duet-ai/duet/sdk/internal/proto/enginev1"
)

// This file converts between the plain Go values of this package and their protobuf twins. Each pair of
// functions is the only place that knows a message's field mapping.

func loadRequestToProto(r LoadRequest) *pb.LoadRequest {
	return &pb.LoadRequest{InstanceId: r.InstanceID, Model: r.Model, Options: r.Options, KvHost: r.KVHost}
}

func loadRequestFromProto(r *pb.LoadRequest) LoadRequest {
	return LoadRequest{InstanceID: r.GetInstanceId(), Model: r.GetModel(), Options: r.GetOptions(), KVHost: r.GetKvHost()}
}

func descriptionToProto(d Description) *pb.Description {
	return &pb.Description{
		InstanceId:       d.InstanceID,
		ModelId:          d.ModelID,
		Architecture:     d.Architecture,
		Backend:          d.Backend,
		Fingerprint:      d.Fingerprint,
		KvCompat:         d.KVCompat,
		Dtype:            d.DType,
		Quantization:     d.Quantization,
		Parameters:       d.Parameters,
		ContextLength:    int64(d.ContextLength),
		VocabSize:        int64(d.VocabSize),
		MaxBytesPerToken: int64(d.MaxBytesPerToken),
		Kv: &pb.KVLayout{
			NumLayers:    int64(d.KV.NumLayers),
			NumKvHeads:   int64(d.KV.NumKVHeads),
			HeadDim:      int64(d.KV.HeadDim),
			Dtype:        d.KV.DType,
			LinearLayers: int64(d.KV.LinearLayers),
			StateBytes:   d.KV.StateBytes,
		},
		Capabilities: &pb.Capabilities{
			Chat:           d.Capabilities.Chat,
			Completions:    d.Capabilities.Completions,
			TokenPrompts:   d.Capabilities.TokenPrompts,
			Logprobs:       d.Capabilities.Logprobs,
			MaxTopLogprobs: int64(d.Capabilities.MaxTopLogprobs),
			PrefillServer:  d.Capabilities.PrefillServer,
			RemotePrefill:  d.Capabilities.RemotePrefill,
			Tools:          d.Capabilities.Tools,
			Grammar:        d.Capabilities.Grammar,
			Reasoning:      d.Capabilities.Reasoning,
			MaxChoices:     int64(d.Capabilities.MaxChoices),
			LogitBias:      d.Capabilities.LogitBias,
		},
		PrefillEndpoint: d.PrefillEndpoint,
	}
}

func descriptionFromProto(d *pb.Description) Description {
	kv, c := d.GetKv(), d.GetCapabilities()
	return Description{
		InstanceID:       d.GetInstanceId(),
		ModelID:          d.GetModelId(),
		Architecture:     d.GetArchitecture(),
		Backend:          d.GetBackend(),
		Fingerprint:      d.GetFingerprint(),
		KVCompat:         d.GetKvCompat(),
		DType:            d.GetDtype(),
		Quantization:     d.GetQuantization(),
		Parameters:       d.GetParameters(),
		ContextLength:    int(d.GetContextLength()),
		VocabSize:        int(d.GetVocabSize()),
		MaxBytesPerToken: int(d.GetMaxBytesPerToken()),
		KV: KVLayout{
			NumLayers:    int(kv.GetNumLayers()),
			NumKVHeads:   int(kv.GetNumKvHeads()),
			HeadDim:      int(kv.GetHeadDim()),
			DType:        kv.GetDtype(),
			LinearLayers: int(kv.GetLinearLayers()),
			StateBytes:   kv.GetStateBytes(),
		},
		Capabilities: Capabilities{
			Chat:           c.GetChat(),
			Completions:    c.GetCompletions(),
			TokenPrompts:   c.GetTokenPrompts(),
			Logprobs:       c.GetLogprobs(),
			MaxTopLogprobs: int(c.GetMaxTopLogprobs()),
			PrefillServer:  c.GetPrefillServer(),
			RemotePrefill:  c.GetRemotePrefill(),
			Tools:          c.GetTools(),
			Grammar:        c.GetGrammar(),
			Reasoning:      c.GetReasoning(),
			MaxChoices:     int(c.GetMaxChoices()),
			LogitBias:      c.GetLogitBias(),
		},
		PrefillEndpoint: d.GetPrefillEndpoint(),
	}
}

func messagesToProto(ms []Message) []*pb.Message {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*pb.Message, len(ms))
	for i, m := range ms {
		out[i] = &pb.Message{Role: m.Role, Content: m.Content, Name: m.Name, ToolCalls: toolCallsToProto(m.ToolCalls),
			ToolCallId: m.ToolCallID, Reasoning: m.Reasoning}
	}
	return out
}

func toolCallsToProto(cs []ToolCall) []*pb.ToolCall {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*pb.ToolCall, len(cs))
	for i, c := range cs {
		out[i] = &pb.ToolCall{Id: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

func toolCallsFromProto(cs []*pb.ToolCall) []ToolCall {
	if len(cs) == 0 {
		return nil
	}
	out := make([]ToolCall, len(cs))
	for i, c := range cs {
		out[i] = ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArguments()}
	}
	return out
}

func toolCallDeltasToProto(ds []ToolCallDelta) []*pb.ToolCallDelta {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*pb.ToolCallDelta, len(ds))
	for i, d := range ds {
		out[i] = &pb.ToolCallDelta{Index: int64(d.Index), Id: d.ID, Name: d.Name, Arguments: d.Arguments}
	}
	return out
}

func toolCallDeltasFromProto(ds []*pb.ToolCallDelta) []ToolCallDelta {
	if len(ds) == 0 {
		return nil
	}
	out := make([]ToolCallDelta, len(ds))
	for i, d := range ds {
		out[i] = ToolCallDelta{Index: int(d.GetIndex()), ID: d.GetId(), Name: d.GetName(), Arguments: d.GetArguments()}
	}
	return out
}

func messagesFromProto(ms []*pb.Message) []Message {
	if len(ms) == 0 {
		return nil
	}
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = Message{Role: m.GetRole(), Content: m.GetContent(), Name: m.GetName(), ToolCalls: toolCallsFromProto(m.GetToolCalls()),
			ToolCallID: m.GetToolCallId(), Reasoning: m.GetReasoning()}
	}
	return out
}

func generateRequestToProto(r GenerateRequest) *pb.GenerateRequest {
	s := r.Sampling
	out := &pb.GenerateRequest{
		RequestId:    r.RequestID,
		InstanceId:   r.InstanceID,
		Messages:     messagesToProto(r.Messages),
		Prompt:       r.Prompt,
		PromptTokens: r.PromptTokens,
		Sampling: &pb.Sampling{
			MaxTokens:         int64(s.MaxTokens),
			Temperature:       s.Temperature,
			TopP:              s.TopP,
			TopK:              int64(s.TopK),
			MinP:              s.MinP,
			Seed:              s.Seed,
			Stop:              s.Stop,
			StopTokenIds:      s.StopTokenIDs,
			IgnoreEos:         s.IgnoreEOS,
			Logprobs:          s.Logprobs,
			TopLogprobs:       int64(s.TopLogprobs),
			PresencePenalty:   s.PresencePenalty,
			FrequencyPenalty:  s.FrequencyPenalty,
			RepetitionPenalty: s.RepetitionPenalty,
			LogitBias:         s.LogitBias,
		},
		ToolChoice:        &pb.ToolChoice{Mode: r.ToolChoice.Mode, Name: r.ToolChoice.Name},
		ParallelToolCalls: r.ParallelToolCalls,
		ResponseFormat: &pb.ResponseFormat{Type: r.ResponseFormat.Type, Name: r.ResponseFormat.Name,
			Schema: r.ResponseFormat.Schema, Strict: r.ResponseFormat.Strict},
		N: int64(r.N),
	}
	out.Tools = toolsToProto(r.Tools)
	out.TemplateVars = templateVarsToProto(r.TemplateVars)
	for _, e := range r.PrefillEndpoints {
		out.PrefillEndpoints = append(out.PrefillEndpoints, &pb.PrefillEndpoint{InstanceId: e.InstanceID, Address: e.Address, Node: e.Node, Approximate: e.Approximate})
	}
	return out
}

func generateRequestFromProto(r *pb.GenerateRequest) GenerateRequest {
	s := r.GetSampling()
	out := GenerateRequest{
		RequestID:    r.GetRequestId(),
		InstanceID:   r.GetInstanceId(),
		Messages:     messagesFromProto(r.GetMessages()),
		Prompt:       r.GetPrompt(),
		PromptTokens: r.GetPromptTokens(),
		Sampling: Sampling{
			MaxTokens:         int(s.GetMaxTokens()),
			Temperature:       s.GetTemperature(),
			TopP:              s.GetTopP(),
			TopK:              int(s.GetTopK()),
			MinP:              s.GetMinP(),
			Stop:              s.GetStop(),
			StopTokenIDs:      s.GetStopTokenIds(),
			IgnoreEOS:         s.GetIgnoreEos(),
			Logprobs:          s.GetLogprobs(),
			TopLogprobs:       int(s.GetTopLogprobs()),
			PresencePenalty:   s.GetPresencePenalty(),
			FrequencyPenalty:  s.GetFrequencyPenalty(),
			RepetitionPenalty: s.GetRepetitionPenalty(),
			LogitBias:         s.GetLogitBias(),
		},
		ToolChoice:        ToolChoice{Mode: r.GetToolChoice().GetMode(), Name: r.GetToolChoice().GetName()},
		ParallelToolCalls: r.GetParallelToolCalls(),
		N:                 int(r.GetN()),
	}
	if f := r.GetResponseFormat(); f != nil {
		out.ResponseFormat = ResponseFormat{Type: f.GetType(), Name: f.GetName(), Schema: f.GetSchema(), Strict: f.GetStrict()}
	}
	out.Tools = toolsFromProto(r.GetTools())
	out.TemplateVars = templateVarsFromProto(r.GetTemplateVars())
	if s != nil && s.Seed != nil {
		seed := s.GetSeed()
		out.Sampling.Seed = &seed
	}
	for _, e := range r.GetPrefillEndpoints() {
		out.PrefillEndpoints = append(out.PrefillEndpoints, PrefillEndpoint{InstanceID: e.GetInstanceId(), Address: e.GetAddress(), Node: e.GetNode(), Approximate: e.GetApproximate()})
	}
	return out
}

func eventToProto(ev Event) *pb.Event {
	e := eventKindToProto(ev)
	e.Choice = int64(ev.Choice)
	return e
}

func eventKindToProto(ev Event) *pb.Event {
	switch {
	case ev.Token != nil:
		t := &pb.Token{Id: ev.Token.ID, Text: ev.Token.Text, Reasoning: ev.Token.Reasoning, ToolCalls: toolCallDeltasToProto(ev.Token.ToolCalls)}
		if lp := ev.Token.Logprob; lp != nil {
			t.Logprob = &pb.Logprob{Token: lp.Token, Bytes: lp.Bytes, Logprob: lp.Logprob}
			for _, alt := range lp.Top {
				t.Logprob.Top = append(t.Logprob.Top, &pb.TopLogprob{Id: alt.ID, Token: alt.Token, Bytes: alt.Bytes, Logprob: alt.Logprob})
			}
		}
		return &pb.Event{Kind: &pb.Event_Token{Token: t}}
	case ev.Progress != nil:
		return &pb.Event{Kind: &pb.Event_Progress{Progress: &pb.Progress{Done: int64(ev.Progress.Done), Total: int64(ev.Progress.Total)}}}
	case ev.Final != nil:
		f := ev.Final
		return &pb.Event{Kind: &pb.Event_Final{Final: &pb.Final{
			FinishReason: string(f.FinishReason),
			Error:        f.Error,
			ErrorCode:    string(f.ErrorCode),
			Text:         f.Text,
			Reasoning:    f.Reasoning,
			ToolCalls:    toolCallsToProto(f.ToolCalls),
			Usage: &pb.Usage{
				PromptTokens:     int64(f.Usage.PromptTokens),
				CompletionTokens: int64(f.Usage.CompletionTokens),
				CachedTokens:     int64(f.Usage.CachedTokens),
			},
			Timings: timingsToProto(f.Timings),
		}}}
	}
	return &pb.Event{}
}

func eventFromProto(ev *pb.Event) Event {
	e := eventKindFromProto(ev)
	e.Choice = int(ev.GetChoice())
	return e
}

func eventKindFromProto(ev *pb.Event) Event {
	switch k := ev.GetKind().(type) {
	case *pb.Event_Token:
		t := &Token{ID: k.Token.GetId(), Text: k.Token.GetText(), Reasoning: k.Token.GetReasoning(), ToolCalls: toolCallDeltasFromProto(k.Token.GetToolCalls())}
		if lp := k.Token.GetLogprob(); lp != nil {
			t.Logprob = &Logprob{Token: lp.GetToken(), Bytes: lp.GetBytes(), Logprob: lp.GetLogprob()}
			for _, alt := range lp.GetTop() {
				t.Logprob.Top = append(t.Logprob.Top, TopLogprob{ID: alt.GetId(), Token: alt.GetToken(), Bytes: alt.GetBytes(), Logprob: alt.GetLogprob()})
			}
		}
		return Event{Token: t}
	case *pb.Event_Progress:
		return Event{Progress: &Progress{Done: int(k.Progress.GetDone()), Total: int(k.Progress.GetTotal())}}
	case *pb.Event_Final:
		f, u := k.Final, k.Final.GetUsage()
		return Event{Final: &Final{
			FinishReason: FinishReason(f.GetFinishReason()),
			Error:        f.GetError(),
			ErrorCode:    Code(f.GetErrorCode()),
			Text:         f.GetText(),
			Reasoning:    f.GetReasoning(),
			ToolCalls:    toolCallsFromProto(f.GetToolCalls()),
			Usage: Usage{
				PromptTokens:     int(u.GetPromptTokens()),
				CompletionTokens: int(u.GetCompletionTokens()),
				CachedTokens:     int(u.GetCachedTokens()),
			},
			Timings: timingsFromProto(f.GetTimings()),
		}}
	}
	return Event{}
}

func timingsToProto(t Timings) *pb.Timings {
	out := &pb.Timings{
		QueueNs:       int64(t.Queue),
		PrefillNs:     int64(t.Prefill),
		FirstTokenNs:  int64(t.FirstToken),
		DecodeNs:      int64(t.Decode),
		TotalNs:       int64(t.Total),
		PrefillSource: t.PrefillSource,
	}
	if r := t.Remote; r != nil {
		out.Remote = &pb.RemotePrefill{
			Endpoint:       r.Endpoint,
			InstanceId:     r.InstanceID,
			Tokens:         int64(r.Tokens),
			Bytes:          r.Bytes,
			WaitNs:         int64(r.Wait),
			TransferNs:     int64(r.Transfer),
			IngestNs:       int64(r.Ingest),
			Attempts:       int64(r.Attempts),
			FallbackReason: r.FallbackReason,
			Approximate:    r.Approximate,
		}
	}
	return out
}

func timingsFromProto(t *pb.Timings) Timings {
	out := Timings{
		Queue:         time.Duration(t.GetQueueNs()),
		Prefill:       time.Duration(t.GetPrefillNs()),
		FirstToken:    time.Duration(t.GetFirstTokenNs()),
		Decode:        time.Duration(t.GetDecodeNs()),
		Total:         time.Duration(t.GetTotalNs()),
		PrefillSource: t.GetPrefillSource(),
	}
	if r := t.GetRemote(); r != nil {
		out.Remote = &RemotePrefill{
			Endpoint:       r.GetEndpoint(),
			InstanceID:     r.GetInstanceId(),
			Tokens:         int(r.GetTokens()),
			Bytes:          r.GetBytes(),
			Wait:           time.Duration(r.GetWaitNs()),
			Transfer:       time.Duration(r.GetTransferNs()),
			Ingest:         time.Duration(r.GetIngestNs()),
			Attempts:       int(r.GetAttempts()),
			FallbackReason: r.GetFallbackReason(),
			Approximate:    r.GetApproximate(),
		}
	}
	return out
}

func tokenizeRequestToProto(r TokenizeRequest) *pb.TokenizeRequest {
	return &pb.TokenizeRequest{
		InstanceId:          r.InstanceID,
		Messages:            messagesToProto(r.Messages),
		Prompt:              r.Prompt,
		AddGenerationPrompt: r.AddGenerationPrompt,
		AddSpecialTokens:    r.AddSpecialTokens,
		Tools:               toolsToProto(r.Tools),
		TemplateVars:        templateVarsToProto(r.TemplateVars),
	}
}

func tokenizeRequestFromProto(r *pb.TokenizeRequest) TokenizeRequest {
	return TokenizeRequest{
		InstanceID:          r.GetInstanceId(),
		Messages:            messagesFromProto(r.GetMessages()),
		Prompt:              r.GetPrompt(),
		AddGenerationPrompt: r.GetAddGenerationPrompt(),
		AddSpecialTokens:    r.GetAddSpecialTokens(),
		Tools:               toolsFromProto(r.GetTools()),
		TemplateVars:        templateVarsFromProto(r.GetTemplateVars()),
	}
}

func toolsToProto(tools []Tool) []*pb.Tool {
	var out []*pb.Tool
	for _, t := range tools {
		out = append(out, &pb.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict})
	}
	return out
}

func toolsFromProto(tools []*pb.Tool) []Tool {
	var out []Tool
	for _, t := range tools {
		out = append(out, Tool{Name: t.GetName(), Description: t.GetDescription(), Parameters: t.GetParameters(), Strict: t.GetStrict()})
	}
	return out
}

// templateVarsToProto encodes template variables as a JSON object. They are JSON values by contract; a
// value that does not encode drops them, as a template never could have read it.
func templateVarsToProto(vars map[string]any) []byte {
	if len(vars) == 0 {
		return nil
	}
	b, _ := json.Marshal(vars)
	return b
}

func templateVarsFromProto(b []byte) map[string]any {
	if len(b) == 0 {
		return nil
	}
	var vars map[string]any
	_ = json.Unmarshal(b, &vars)
	return vars
}

func statsToProto(s Stats) *pb.StatsResponse {
	out := &pb.StatsResponse{Metrics: s.Metrics}
	for _, in := range s.Instances {
		pc := in.PrefixCache
		out.Instances = append(out.Instances, &pb.InstanceStats{
			InstanceId:      in.InstanceID,
			InFlight:        int64(in.InFlight),
			Queued:          int64(in.Queued),
			KvBytes:         in.KVBytes,
			KvCapacityBytes: in.KVCapacityBytes,
			PrefixCache: &pb.PrefixCacheStats{
				Hits: pc.Hits, Misses: pc.Misses, HitTokens: pc.HitTokens, Entries: pc.Entries,
				Bytes: pc.Bytes, CapacityBytes: pc.CapacityBytes, Evictions: pc.Evictions,
			},
			Metrics: in.Metrics,
		})
	}
	return out
}

func statsFromProto(s *pb.StatsResponse) Stats {
	out := Stats{Metrics: s.GetMetrics()}
	for _, in := range s.GetInstances() {
		pc := in.GetPrefixCache()
		out.Instances = append(out.Instances, InstanceStats{
			InstanceID:      in.GetInstanceId(),
			InFlight:        int(in.GetInFlight()),
			Queued:          int(in.GetQueued()),
			KVBytes:         in.GetKvBytes(),
			KVCapacityBytes: in.GetKvCapacityBytes(),
			PrefixCache: PrefixCacheStats{
				Hits: pc.GetHits(), Misses: pc.GetMisses(), HitTokens: pc.GetHitTokens(), Entries: pc.GetEntries(),
				Bytes: pc.GetBytes(), CapacityBytes: pc.GetCapacityBytes(), Evictions: pc.GetEvictions(),
			},
			Metrics: in.GetMetrics(),
		})
	}
	return out
}
