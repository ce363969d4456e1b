// Package sampling turns a model's logits into the next token: penalties, temperature, top-k, top-p, min-p,
// seeded randomness, and log probabilities with top alternatives. It works on float32 logits from any backend,
// so the MLX and pure-Go backends sample identically.
//
// Order of operations (as vLLM and llama.cpp do): repetition, presence and frequency penalties and the logit
// bias on the logits; then a grammar's mask, if the sequence has one; greedy argmax at temperature 0; otherwise temperature, then top-k, top-p and min-p on the probabilities, and a
// draw. Log probabilities are those of the raw model distribution (before penalties and temperature), which
// is what OpenAI-compatible servers report.
package sampling

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sort"
)

// Params control sampling. The zero value is greedy decoding.
type Params struct {
	Temperature float64
	TopP        float64 // (0, 1]; 0 or 1: off
	TopK        int     // 0: off
	MinP        float64 // [0, 1]; 0: off
	// Seed makes draws reproducible; nil draws a random seed.
	Seed *int64
	// RepetitionPenalty divides positive and multiplies negative logits of every token seen in the prompt or
	// output (the HF/CTRL rule); 0 or 1: off.
	RepetitionPenalty float64
	// PresencePenalty and FrequencyPenalty are OpenAI's: subtracted once per generated token kind, and once
	// per occurrence.
	PresencePenalty, FrequencyPenalty float64
	// LogitBias is added to the logits of its tokens (OpenAI's logit_bias: -100 bans a token, 100 all but
	// forces it). Tokens outside the vocabulary are refused by the caller, not here.
	LogitBias map[int32]float32
	// TopLogprobs alternatives are reported when Logprobs is set.
	Logprobs    bool
	TopLogprobs int
}

// Validate reports parameters out of range.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature):
		return fmt.Errorf("temperature %g must not be negative", p.Temperature)
	case p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %g must be in (0, 1]", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d must not be negative", p.TopK)
	case p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p %g must be in [0, 1]", p.MinP)
	case p.RepetitionPenalty < 0:
		return fmt.Errorf("repetition_penalty %g must not be negative", p.RepetitionPenalty)
	case p.TopLogprobs < 0:
		return fmt.Errorf("top_logprobs %d must not be negative", p.TopLogprobs)
	}
	for t, b := range p.LogitBias {
		if b < -100 || b > 100 || b != b {
			return fmt.Errorf("logit_bias %g of token %d must be in [-100, 100]", b, t)
		}
	}
	return nil
}

// Alternative is a token with its log probability.
type Alternative struct {
	Token   int32
	Logprob float64
}

// Masker removes the tokens a sequence may not take next (a grammar's): it sets their logits to -Inf.
type Masker interface{ Mask(logits []float32) }

// Choice is a sampled token.
type Choice struct {
	// Token is the token drawn; -1 when a mask left none.
	Token int32
	// Logprob and Top are set when Params.Logprobs is.
	Logprob float64
	Top     []Alternative
}

// Sampler samples the tokens of one sequence. It is not safe for concurrent use.
type Sampler struct {
	p      Params
	rng    *mrand.Rand
	seen   map[int32]bool // prompt and output, for the repetition penalty
	counts map[int32]int  // output only, for presence and frequency penalties
	mask   Masker

	cands []cand
	heap  []cand
	sub   []cand
	raw   []float32
}

// New returns a sampler for a sequence whose prompt is prompt.
func New(p Params, prompt []int32) *Sampler {
	s := &Sampler{p: p, counts: map[int32]int{}}
	seed := uint64(0)
	if p.Seed != nil {
		seed = uint64(*p.Seed)
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	s.rng = mrand.New(mrand.NewPCG(seed, 0x853c49e6748fea9b))
	if p.RepetitionPenalty > 0 && p.RepetitionPenalty != 1 {
		s.seen = make(map[int32]bool, len(prompt))
		for _, t := range prompt {
			s.seen[t] = true
		}
	}
	return s
}

// Constrain makes every draw from now on respect m (nil: none).
func (s *Sampler) Constrain(m Masker) { s.mask = m }

// Accept records a token of the output (the one Sample chose, or one forced by the caller).
func (s *Sampler) Accept(tok int32) {
	s.counts[tok]++
	if s.seen != nil {
		s.seen[tok] = true
	}
}

// Sample picks the next token from logits. It modifies logits in place (penalties and temperature).
func (s *Sampler) Sample(logits []float32) Choice {
	var c Choice
	var lse float64
	var rawChosen func(int32) float32
	if s.p.Logprobs {
		lse = logSumExp(logits)
		c.Top = topLogprobs(logits, s.p.TopLogprobs, lse)
		if s.penalizes() {
			s.raw = append(s.raw[:0], logits...)
			rawChosen = func(t int32) float32 { return s.raw[t] }
		} else {
			rawChosen = func(t int32) float32 { return logits[t] }
		}
	}
	s.penalize(logits)
	if s.mask != nil {
		s.mask.Mask(logits)
	}
	if s.p.Temperature == 0 {
		c.Token = argmax(logits)
	} else {
		c.Token = s.draw(logits)
	}
	if c.Token < 0 {
		return Choice{Token: -1}
	}
	if s.p.Logprobs {
		c.Logprob = float64(rawChosen(c.Token)) - lse
	}
	return c
}

// penalizes reports whether Sample changes the logits before it draws, so that log probabilities need a copy
// of the raw ones.
func (s *Sampler) penalizes() bool {
	return s.seen != nil || s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0 || len(s.p.LogitBias) > 0 || s.mask != nil
}

func (s *Sampler) penalize(logits []float32) {
	if rp := float32(s.p.RepetitionPenalty); s.seen != nil {
		for t := range s.seen {
			if int(t) < len(logits) {
				if logits[t] > 0 {
					logits[t] /= rp
				} else {
					logits[t] *= rp
				}
			}
		}
	}
	if s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0 {
		for t, n := range s.counts {
			if int(t) < len(logits) {
				logits[t] -= float32(s.p.PresencePenalty) + float32(s.p.FrequencyPenalty)*float32(n)
			}
		}
	}
	for t, b := range s.p.LogitBias {
		if t >= 0 && int(t) < len(logits) {
			logits[t] += b
		}
	}
}

// argmax returns the index of the largest logit; ties go to the lowest index, NaNs never win; -1 when every
// logit is -Inf (a mask allowed nothing).
func argmax(logits []float32) int32 {
	best := -1
	bestV := float32(math.Inf(-1))
	for i, v := range logits {
		if v > bestV {
			best, bestV = i, v
		}
	}
	return int32(best)
}

// negligible bounds the exponent below which a token's probability is taken as zero: e^-40 is below float64's
// resolution relative to the largest probability (which is 1 after the shift), so skipping such tokens changes no
// sum and saves an exp per token of a 100k-token vocabulary.
const negligible = -40

type cand struct {
	p float32
	i int32
}

// better orders candidates by probability, descending, then by token id.
func better(a, b cand) int {
	switch {
	case a.p > b.p:
		return -1
	case a.p < b.p:
		return 1
	}
	return int(a.i - b.i)
}

// draw samples from the distribution left after temperature, top-k, top-p and min-p.
func (s *Sampler) draw(logits []float32) int32 {
	invT := float32(1 / s.p.Temperature)
	maxL := float32(math.Inf(-1))
	for _, v := range logits {
		maxL = max(maxL, v)
	}
	if math.IsInf(float64(maxL), -1) {
		return -1 // a mask allowed nothing
	}
	cs := s.cands[:0]
	var sum float64
	for i, v := range logits {
		z := (v - maxL) * invT
		if z > negligible {
			p := exp32(z)
			cs = append(cs, cand{p, int32(i)})
			sum += float64(p)
		}
	}
	s.cands = cs
	if k := s.p.TopK; k > 0 && k < len(cs) {
		cs = topK(cs, k, &s.heap)
		sum = 0
		for _, c := range cs {
			sum += float64(c.p)
		}
	}
	if topP := s.p.TopP; topP > 0 && topP < 1 {
		cs, sum = s.nucleus(cs, sum, topP)
	}
	if s.p.MinP > 0 {
		floor := float32(s.p.MinP) // the largest probability is 1 after the shift by maxL
		kept := cs[:0]
		sum = 0
		for _, c := range cs {
			if c.p >= floor {
				kept = append(kept, c)
				sum += float64(c.p)
			}
		}
		cs = kept
	}
	if len(cs) == 0 {
		return -1 // NaN logits
	}
	r := s.rng.Float64() * sum
	for _, c := range cs {
		r -= float64(c.p)
		if r < 0 {
			return c.i
		}
	}
	return cs[len(cs)-1].i
}

// nucleus keeps the most likely candidates whose mass reaches topP. Sorting a whole vocabulary per token is
// slow, so it sorts only the candidates above a threshold, lowering the threshold until they hold the mass; the
// nucleus is always made of the best candidates, so it lies among them.
func (s *Sampler) nucleus(cs []cand, sum, topP float64) ([]cand, float64) {
	sub := s.sub[:0]
	for frac := float32(1e-2); ; frac *= 1e-2 {
		sub = sub[:0]
		var mass float64
		for _, c := range cs {
			if c.p > frac {
				sub = append(sub, c)
				mass += float64(c.p)
			}
		}
		if mass/sum >= topP || frac < 1e-20 {
			break
		}
	}
	s.sub = sub
	if len(sub) == 0 {
		sub = cs
	}
	slices.SortFunc(sub, better)
	cum := 0.0
	for j, c := range sub {
		cum += float64(c.p)
		if cum/sum >= topP {
			return sub[:j+1], cum
		}
	}
	return sub, cum
}

// topK keeps the k best candidates (see better), in no particular order but deterministically.
func topK(cs []cand, k int, heap *[]cand) []cand {
	h := (*heap)[:0]
	// h is a min-heap under better: h[0] is the worst of the kept ones.
	worse := func(a, b cand) bool { return better(a, b) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && worse(h[r], h[l]) {
				m = r
			}
			if !worse(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, c := range cs {
		switch {
		case len(h) < k:
			h = append(h, c)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
		case worse(h[0], c):
			h[0] = c
			down(0)
		}
	}
	*heap = h
	return h
}

// topLogprobs returns the n most likely tokens of the raw distribution with their log probabilities, best
// first (ties to the lower id).
func topLogprobs(logits []float32, n int, lse float64) []Alternative {
	if n <= 0 {
		return nil
	}
	n = min(n, len(logits))
	// Keep the n best in a small sorted slice: n is at most 20.
	top := make([]Alternative, 0, n+1)
	for i, v := range logits {
		lp := float64(v) - lse
		if len(top) == n && lp <= top[n-1].Logprob {
			continue
		}
		j := sort.Search(len(top), func(j int) bool { return top[j].Logprob < lp })
		top = append(top, Alternative{})
		copy(top[j+1:], top[j:])
		top[j] = Alternative{Token: int32(i), Logprob: lp}
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}

func logSumExp(xs []float32) float64 {
	m := float32(math.Inf(-1))
	for _, v := range xs {
		m = max(m, v)
	}
	var sum float64
	for _, v := range xs {
		if z := v - m; z > negligible {
			sum += float64(exp32(z))
		}
	}
	return float64(m) + math.Log(sum)
}
