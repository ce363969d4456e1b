package mlxengine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/duet-ai/duet/sdk/engine"
)

// choices runs a request and collects each choice's tokens, final event and progress events.
type choices struct {
	tokens   [][]int32
	finals   []*engine.Final
	progress []int // progress events per choice
}

func runChoices(t *testing.T, e engine.Engine, req engine.GenerateRequest) choices {
	t.Helper()
	n := max(req.N, 1)
	out := choices{tokens: make([][]int32, n), finals: make([]*engine.Final, n), progress: make([]int, n)}
	err := e.Generate(context.Background(), req, func(ev engine.Event) error {
		if ev.Choice < 0 || ev.Choice >= n {
			t.Fatalf("event of choice %d in a request for %d", ev.Choice, n)
		}
		switch {
		case ev.Token != nil:
			out.tokens[ev.Choice] = append(out.tokens[ev.Choice], ev.Token.ID)
		case ev.Progress != nil:
			out.progress[ev.Choice]++
		case ev.Final != nil:
			if out.finals[ev.Choice] != nil {
				t.Errorf("choice %d ended twice", ev.Choice)
			}
			out.finals[ev.Choice] = ev.Final
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for i, f := range out.finals {
		if f == nil {
			t.Fatalf("choice %d never ended", i)
		}
		if f.FinishReason == engine.FinishError {
			t.Fatalf("choice %d: %s", i, f.Error)
		}
	}
	return out
}

// TestChoicesShareThePrompt: n choices come from one prefill (only the first reports progress; the others
// start from a copy of its KV), and choice i draws exactly what a single request seeded seed+i draws, so a
// choice is reproducible on its own. Greedy choices are all the same.
func TestChoicesShareThePrompt(t *testing.T) {
	e, d := loadTiny(t, map[string]string{"prefix_cache_mb": "0"})
	prompt := randomPrompt(1, 300, d.VocabSize)
	seed := int64(42)
	sampled := engine.Sampling{MaxTokens: 24, IgnoreEOS: true, Temperature: 1.2, Seed: &seed}
	const n = 4
	got := runChoices(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: prompt, Sampling: sampled, N: n})
	if got.progress[0] == 0 || slices.Max(got.progress[1:]) != 0 {
		t.Errorf("progress events per choice %v: the prompt should be prefilled once, by choice 0", got.progress)
	}
	distinct := map[string]bool{}
	for i := range n {
		s := sampled
		si := seed + int64(i)
		s.Seed = &si
		alone := runChoices(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: prompt, Sampling: s})
		sameTokens(t, "choice "+string(rune('0'+i)), got.tokens[i], alone.tokens[0])
		if f := got.finals[i]; f.Usage.PromptTokens != len(prompt) || f.Usage.CompletionTokens != len(got.tokens[i]) || f.FinishReason != engine.FinishLength {
			t.Errorf("choice %d final %+v", i, f)
		}
		distinct[fmtTokens(got.tokens[i])] = true
	}
	if len(distinct) < 2 {
		t.Errorf("%d choices sampled at temperature 1.2 are all the same", n)
	}

	greedy := runChoices(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: prompt,
		Sampling: engine.Sampling{MaxTokens: 16, IgnoreEOS: true}, N: 3})
	for i := 1; i < 3; i++ {
		sameTokens(t, "greedy choice", greedy.tokens[i], greedy.tokens[0])
	}
}

// TestChoicesEndTogetherWhenCancelled: a request cancelled mid-way ends every choice, each with its final.
func TestChoicesEndTogetherWhenCancelled(t *testing.T) {
	e, d := loadTiny(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	finals := map[int]engine.FinishReason{}
	tokens := 0
	err := e.Generate(ctx, engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: randomPrompt(2, 50, d.VocabSize),
		Sampling: engine.Sampling{IgnoreEOS: true}, N: 3}, func(ev engine.Event) error {
		if ev.Token != nil {
			if tokens++; tokens == 10 {
				cancel()
			}
		}
		if ev.Final != nil {
			finals[ev.Choice] = ev.Final.FinishReason
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(finals) != 3 {
		t.Fatalf("finals %v, want one per choice", finals)
	}
	for i, r := range finals {
		if r != engine.FinishCancelled {
			t.Errorf("choice %d ended %s", i, r)
		}
	}
}

// TestLogitBias: a bias of -100 on the greedy choice's first token moves it, one of 100 forces a token.
func TestLogitBias(t *testing.T) {
	e, d := loadTiny(t, nil)
	prompt := randomPrompt(3, 20, d.VocabSize)
	req := engine.GenerateRequest{InstanceID: d.InstanceID, PromptTokens: prompt, Sampling: engine.Sampling{MaxTokens: 4, IgnoreEOS: true}}
	plain := runChoices(t, e, req).tokens[0]
	req.Sampling.LogitBias = map[int32]float64{plain[0]: -100}
	if got := runChoices(t, e, req).tokens[0]; got[0] == plain[0] {
		t.Errorf("token %d still first with a bias of -100", plain[0])
	}
	forced := int32(d.VocabSize - 1)
	req.Sampling.LogitBias = map[int32]float64{forced: 100}
	if got := runChoices(t, e, req).tokens[0]; slices.ContainsFunc(got, func(t int32) bool { return t != forced }) {
		t.Errorf("tokens %v with a bias of 100 on %d", got, forced)
	}
	req.Sampling.LogitBias = map[int32]float64{int32(d.VocabSize): 5}
	if err := e.Generate(context.Background(), req, func(engine.Event) error { return nil }); engine.CodeOf(err) != engine.CodeInvalidArgument {
		t.Errorf("bias on a token outside the vocabulary: %v", err)
	}
}

func fmtTokens(ts []int32) string {
	b := make([]byte, 0, 4*len(ts))
	for _, t := range ts {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return string(b)
}
