package sampling

import (
	"fmt"
	"math"
	"testing"
)

func seed(v int64) *int64 { return &v }

func TestGreedy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		logits []float32
		want   int32
	}{
		{"plain", []float32{0.1, 2, -1, 1.9}, 1},
		{"tie goes to the lower id", []float32{3, 1, 3}, 0},
		{"nan never wins", []float32{float32(math.NaN()), -5, -6}, 1},
		{"all negative infinity but one", []float32{float32(math.Inf(-1)), float32(math.Inf(-1)), 0}, 2},
	}
	for _, c := range cases {
		if got := New(Params{}, nil).Sample(append([]float32(nil), c.logits...)); got.Token != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got.Token, c.want)
		}
	}
}

func TestPenalties(t *testing.T) {
	t.Parallel()
	// Token 0 leads; a repetition penalty on it (it is in the prompt) hands the lead to token 1.
	s := New(Params{RepetitionPenalty: 2}, []int32{0})
	if got := s.Sample([]float32{2, 1.5, 0}); got.Token != 1 {
		t.Errorf("repetition penalty: got %d", got.Token)
	}
	// Frequency penalty grows with each occurrence of the token in the output.
	s = New(Params{FrequencyPenalty: 0.3}, nil)
	s.Accept(0)
	if got := s.Sample([]float32{2, 1.5, 0}); got.Token != 0 {
		t.Errorf("one occurrence: got %d, want 0 (2-0.3 > 1.5)", got.Token)
	}
	s.Accept(0)
	if got := s.Sample([]float32{2, 1.5, 0}); got.Token != 1 {
		t.Errorf("two occurrences: got %d, want 1", got.Token)
	}
}

func TestSeedReproduces(t *testing.T) {
	t.Parallel()
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 3
	}
	run := func(p Params) []int32 {
		s := New(p, nil)
		var out []int32
		for range 50 {
			c := s.Sample(append([]float32(nil), logits...))
			s.Accept(c.Token)
			out = append(out, c.Token)
		}
		return out
	}
	p := Params{Temperature: 1, TopP: 0.9, Seed: seed(7)}
	a, b := run(p), run(p)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed differs at %d", i)
		}
	}
	p.Seed = seed(8)
	c := run(p)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Errorf("different seeds gave the same 50 tokens")
	}
}

// TestFilters draws many times and checks that only allowed tokens appear, with frequencies that match the
// renormalised distribution.
func TestFilters(t *testing.T) {
	t.Parallel()
	// Probabilities at temperature 1: proportional to exp(logit).
	logits := []float32{float32(math.Log(0.5)), float32(math.Log(0.25)), float32(math.Log(0.15)), float32(math.Log(0.1))}
	cases := []struct {
		name    string
		p       Params
		allowed map[int32]float64 // expected frequencies
	}{
		{"top-k 2", Params{Temperature: 1, TopK: 2}, map[int32]float64{0: 2.0 / 3, 1: 1.0 / 3}},
		{"top-p 0.8", Params{Temperature: 1, TopP: 0.8}, map[int32]float64{0: 0.5 / 0.9, 1: 0.25 / 0.9, 2: 0.15 / 0.9}},
		{"min-p 0.4", Params{Temperature: 1, MinP: 0.4}, map[int32]float64{0: 2.0 / 3, 1: 1.0 / 3}},
		{"none", Params{Temperature: 1}, map[int32]float64{0: 0.5, 1: 0.25, 2: 0.15, 3: 0.1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.p.Seed = seed(1)
			s := New(c.p, nil)
			const n = 40000
			counts := map[int32]int{}
			for range n {
				counts[s.Sample(append([]float32(nil), logits...)).Token]++
			}
			for tok, cnt := range counts {
				want, ok := c.allowed[tok]
				if !ok {
					t.Fatalf("token %d drawn %d times, but the filters exclude it", tok, cnt)
				}
				if got := float64(cnt) / n; math.Abs(got-want) > 0.015 {
					t.Errorf("token %d: frequency %.3f, want %.3f", tok, got, want)
				}
			}
		})
	}
}

func TestLogprobs(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 3, 2, 0}
	lse := math.Log(math.Exp(1) + math.Exp(3) + math.Exp(2) + math.Exp(0))
	s := New(Params{Logprobs: true, TopLogprobs: 2, PresencePenalty: 2}, nil)
	s.Accept(1) // penalised: token 2 wins greedy, but logprobs stay those of the raw distribution
	c := s.Sample(append([]float32(nil), logits...))
	if c.Token != 2 {
		t.Fatalf("token %d, want 2", c.Token)
	}
	if math.Abs(c.Logprob-(2-lse)) > 1e-6 {
		t.Errorf("logprob %g, want %g", c.Logprob, 2-lse)
	}
	if len(c.Top) != 2 || c.Top[0].Token != 1 || c.Top[1].Token != 2 || math.Abs(c.Top[0].Logprob-(3-lse)) > 1e-6 {
		t.Errorf("top %+v", c.Top)
	}
}

// BenchmarkSample samples from a Llama-3-sized vocabulary, with a peaked distribution like a trained model's
// and a flat one (the worst case for top-p).
func BenchmarkSample(b *testing.B) {
	for _, shape := range []struct {
		name  string
		logit func(i int) float32
	}{
		{"peaked", func(i int) float32 { return float32(math.Sin(float64(i)*0.37))*2 + float32(20*boolToInt(i%9973 == 0)) }},
		{"flat", func(i int) float32 { return float32(math.Sin(float64(i)*0.37)) * 8 }},
	} {
		logits := make([]float32, 128256)
		for i := range logits {
			logits[i] = shape.logit(i)
		}
		for _, p := range []Params{{}, {Temperature: 0.8, TopP: 0.95}, {Temperature: 0.8, TopK: 40}, {Logprobs: true, TopLogprobs: 5}} {
			b.Run(fmt.Sprintf("%s/T=%g,p=%g,k=%d,lp=%d", shape.name, p.Temperature, p.TopP, p.TopK, p.TopLogprobs), func(b *testing.B) {
				p.Seed = seed(1)
				s := New(p, nil)
				buf := make([]float32, len(logits))
				for range b.N {
					copy(buf, logits)
					s.Sample(buf)
				}
			})
		}
	}
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// evenMask allows the even token ids only.
type evenMask struct{}

func (evenMask) Mask(logits []float32) {
	for i := 1; i < len(logits); i += 2 {
		logits[i] = float32(math.Inf(-1))
	}
}

// noneMask allows nothing.
type noneMask struct{}

func (noneMask) Mask(logits []float32) {
	for i := range logits {
		logits[i] = float32(math.Inf(-1))
	}
}

func TestLogitBiasAndMask(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 3, 2, 0}
	cases := []struct {
		name string
		p    Params
		mask Masker
		want int32
	}{
		{name: "no bias", want: 1},
		{name: "ban the best", p: Params{LogitBias: map[int32]float32{1: -100}}, want: 2},
		{name: "force the worst", p: Params{LogitBias: map[int32]float32{3: 100}}, want: 3},
		{name: "bias outside the vocabulary is ignored", p: Params{LogitBias: map[int32]float32{99: 100, -1: 5}}, want: 1},
		{name: "mask", mask: evenMask{}, want: 2},
		{name: "mask after bias", p: Params{LogitBias: map[int32]float32{3: 100}}, mask: evenMask{}, want: 2},
		{name: "mask while drawing", p: Params{Temperature: 1, Seed: seed(3)}, mask: evenMask{}, want: -2},
		{name: "nothing allowed", mask: noneMask{}, want: -1},
		{name: "nothing allowed while drawing", p: Params{Temperature: 0.7, Seed: seed(1)}, mask: noneMask{}, want: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 20 {
				s := New(c.p, nil)
				s.Constrain(c.mask)
				got := s.Sample(append([]float32(nil), logits...)).Token
				if c.want == -2 { // any even token
					if got < 0 || got%2 != 0 {
						t.Fatalf("drew %d through a mask of even tokens", got)
					}
					continue
				}
				if got != c.want {
					t.Fatalf("got %d, want %d", got, c.want)
				}
			}
		})
	}
}

func TestLogprobsAreOfTheRawDistribution(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 3, 2, 0}
	plain := New(Params{Logprobs: true, TopLogprobs: 2}, nil).Sample(append([]float32(nil), logits...))
	s := New(Params{Logprobs: true, LogitBias: map[int32]float32{1: -100}}, nil)
	s.Constrain(evenMask{})
	biased := s.Sample(append([]float32(nil), logits...))
	if biased.Token != 2 {
		t.Fatalf("token %d", biased.Token)
	}
	if math.Abs(plain.Top[1].Logprob-biased.Logprob) > 1e-6 || plain.Top[1].Token != 2 {
		t.Errorf("logprob of token 2 under bias and mask %g, want the raw %g", biased.Logprob, plain.Top[1].Logprob)
	}
}

func TestValidateLogitBias(t *testing.T) {
	t.Parallel()
	for _, b := range []float32{-100.5, 101, float32(math.NaN())} {
		if err := (Params{LogitBias: map[int32]float32{5: b}}).Validate(); err == nil {
			t.Errorf("bias %g accepted", b)
		}
	}
	if err := (Params{LogitBias: map[int32]float32{5: -100, 6: 100}}).Validate(); err != nil {
		t.Error(err)
	}
}
