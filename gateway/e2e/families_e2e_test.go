package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// familyAnswer is what TestDisaggregatedFamilies reads from a chat completion.
type familyAnswer struct {
	Content string
	Tokens  [][]byte // the generated tokens' bytes, from logprobs
	Logprob []float64
	Usage   struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	Timings struct {
		PrefillSource string `json:"prefill_source"`
		Remote        *struct {
			Endpoint       string  `json:"endpoint"`
			Tokens         int     `json:"tokens"`
			FallbackReason *string `json:"fallback_reason"`
			Exact          bool    `json:"exact"`
		} `json:"remote_prefill"`
	}
}

// familyChat sends a greedy chat completion with logprobs to g.
func familyChat(t *testing.T, g *gateway, modelID string, messages []map[string]string) familyAnswer {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": modelID, "temperature": 0, "max_tokens": 16, "logprobs": true, "messages": messages})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(g.url+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message  struct{ Content string } `json:"message"`
			Logprobs struct {
				Content []struct {
					Bytes   []int   `json:"bytes"`
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		familyAnswer
		Error *struct{ Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
		t.Fatalf("chat on %s: status %d, %v, error %+v", g.url, resp.StatusCode, err, out.Error)
	}
	a := out.familyAnswer
	a.Content = out.Choices[0].Message.Content
	for _, lp := range out.Choices[0].Logprobs.Content {
		b := make([]byte, len(lp.Bytes))
		for i, v := range lp.Bytes {
			b[i] = byte(v)
		}
		a.Tokens = append(a.Tokens, b)
		a.Logprob = append(a.Logprob, lp.Logprob)
	}
	return a
}

// TestDisaggregatedFamilies is TestDisaggregatedPrefill for the families whose blocks differ from Llama's:
// for each, two gateways on a tiny generated model, one whose engine serves KV and keeps no prefix cache (its
// local answers are computed from nothing), and one that sends prompts of 32 uncached tokens or more there.
// The prompts are many sliding windows long (the tiny windows are 8 tokens). A first turn is prefilled
// remotely from position 0; a second turn that repeats it is found in the decoding engine's prefix cache, so
// only the rest comes over the wire, from start_pos > 0. Both answers equal the prefill gateway's local ones,
// token for token.
func TestDisaggregatedFamilies(t *testing.T) {
	gemma := modelgen.TinyFamily(model.Gemma3)
	gemma.DType, gemma.Layout = dtype.BFloat16, modelgen.LayoutMLX
	gemma.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	oss := modelgen.TinyFamily(model.GptOSS)
	oss.DType, oss.ExpertsMXFP4 = dtype.BFloat16, true
	moe := modelgen.TinyFamily(model.Qwen3MoE)
	moe.DType, moe.Layout = dtype.BFloat16, modelgen.LayoutMLX
	moe.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	// The hybrids: Gated DeltaNet layers send their state as arrays_state, the full layers their KV.
	next := modelgen.TinyFamily(model.Qwen3Next)
	next.DType = dtype.BFloat16
	q35 := modelgen.TinyFamily(model.Qwen35MoE)
	q35.DType, q35.Layout = dtype.BFloat16, modelgen.LayoutMLX
	q35.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}

	first := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 8)
	second := strings.Repeat("At dawn the fishing boats came home with their nets full of silver herring. ", 8)
	turn1 := []map[string]string{{"role": "user", "content": first}}
	turn2 := append(slices.Clone(turn1),
		map[string]string{"role": "assistant", "content": "The keeper wrote the count in his log."},
		map[string]string{"role": "user", "content": second})

	for _, c := range []struct {
		name string
		opts modelgen.Options
	}{
		{"gemma3-q4-mlx", gemma},
		{"gpt_oss-mxfp4", oss},
		{"qwen3_moe-q4-mlx", moe},
		{"qwen3_next-bf16", next},
		{"qwen3_5_moe-q4-mlx", q35},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), c.name)
			if err := modelgen.Generate(dir, c.opts); err != nil {
				t.Fatal(err)
			}
			kvAddr := freeAddr(t)
			prefill := startDuet(t, "--model", dir, "--engine-opt", "kv_listen="+kvAddr+",prefix_cache_mb=0")
			decode := startDuet(t, "--model", dir, "--prefill", kvAddr, "--engine-opt", "remote_prefill_threshold=32")

			check := func(what string, messages []map[string]string) familyAnswer {
				t.Helper()
				want := familyChat(t, prefill, dir, messages)
				got := familyChat(t, decode, dir, messages)
				if want.Timings.PrefillSource != "local" || want.Timings.Remote != nil || want.Usage.Details.CachedTokens != 0 {
					t.Errorf("%s on the prefill gateway: prefill %q, remote %+v, %d cached; want local from nothing", what, want.Timings.PrefillSource, want.Timings.Remote, want.Usage.Details.CachedTokens)
				}
				r := got.Timings.Remote
				if got.Timings.PrefillSource != "remote" || r == nil || r.FallbackReason != nil || !r.Exact || r.Endpoint != kvAddr {
					t.Fatalf("%s on the decode gateway: prefill %q, remote %+v; want remote from %s, exact", what, got.Timings.PrefillSource, r, kvAddr)
				}
				if n := got.Usage.PromptTokens; n < 100 || n != want.Usage.PromptTokens {
					t.Fatalf("%s: %d prompt tokens (local %d); want the same, 100 or more", what, n, want.Usage.PromptTokens)
				}
				// The KV of the prompt less its last token comes over the wire, from where the prefix cache ends.
				if r.Tokens != got.Usage.PromptTokens-1-got.Usage.Details.CachedTokens {
					t.Errorf("%s: %d tokens came over the wire after %d cached, of %d prompt tokens", what, r.Tokens, got.Usage.Details.CachedTokens, got.Usage.PromptTokens)
				}
				if len(want.Tokens) == 0 || len(want.Tokens) != want.Usage.CompletionTokens {
					t.Fatalf("%s: %d tokens in logprobs, %d completion tokens", what, len(want.Tokens), want.Usage.CompletionTokens)
				}
				if !slices.EqualFunc(got.Tokens, want.Tokens, func(a, b []byte) bool { return string(a) == string(b) }) || got.Content != want.Content {
					t.Errorf("%s: the disaggregated answer differs:\n local %q %s\nremote %q %s", what, want.Content, tokenList(want.Tokens), got.Content, tokenList(got.Tokens))
				}
				// Both engines run the CPU backend on one kernel path, whose results do not depend on how tokens
				// are batched or chunked: remote KV reproduces local decoding bit for bit, logprobs included.
				if !slices.Equal(got.Logprob, want.Logprob) {
					t.Errorf("%s: the disaggregated logprobs differ:\n local %v\nremote %v", what, want.Logprob, got.Logprob)
				}
				t.Logf("%s: %d prompt tokens, %d cached, %d over the wire, %d generated", what, got.Usage.PromptTokens, got.Usage.Details.CachedTokens, r.Tokens, len(got.Tokens))
				return got
			}

			a := check("first turn", turn1)
			if a.Usage.Details.CachedTokens != 0 {
				t.Errorf("first turn: %d cached tokens on a fresh decode gateway", a.Usage.Details.CachedTokens)
			}
			// The second turn's prompt starts with the whole first prompt, which the decoding engine keeps (for
			// a windowed model, as a snapshot of the prompt: its windows end there; for a hybrid, as a snapshot of
			// its linear layers' states at the prompt's end).
			b := check("second turn", turn2)
			if b.Usage.Details.CachedTokens < a.Usage.PromptTokens {
				t.Errorf("second turn: %d cached tokens; want the first prompt's %d at least (start_pos > 0)", b.Usage.Details.CachedTokens, a.Usage.PromptTokens)
			}
		})
	}
}

// tokenList shows tokens' bytes as quoted strings.
func tokenList(tokens [][]byte) string {
	s := make([]string, len(tokens))
	for i, b := range tokens {
		s[i] = fmt.Sprintf("%q", b)
	}
	return "[" + strings.Join(s, " ") + "]"
}
