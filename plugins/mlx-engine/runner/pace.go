package runner

import "time"

// pacer sizes the prefill chunks that share a step with decoding sequences, so that a long prompt delays
// their next tokens by about one decode step, whatever the hardware: it learns how long a decode step takes
// and how long a prompt token takes to prefill (which grows with the position, through attention), and picks
// the chunk that costs about one decode step. Prefill goes on at full chunk size when nothing decodes.
type pacer struct {
	decodeStep time.Duration // moving average of a step with only decoding sequences
	perToken   time.Duration // moving average of the cost of one prefill token
}

// minChunk keeps chunks large enough for the matrix kernels to stay efficient.
const minChunk = 16

// chunk returns the prefill chunk for a step shared with decoding sequences, at most max.
func (p *pacer) chunk(max int) int {
	if p.decodeStep == 0 || p.perToken == 0 {
		return max // nothing learned yet
	}
	n := int(p.decodeStep / p.perToken)
	return min(max, n+minChunk)
}

// observe learns from one step: its duration, how many sequences decoded in it, and how many prompt tokens
// it prefilled.
func (p *pacer) observe(d time.Duration, decoding, prefill int) {
	switch {
	case prefill == 0 && decoding > 0:
		p.decodeStep = ewma(p.decodeStep, d)
	case prefill > 0:
		cost := d
		if decoding > 0 {
			cost -= p.decodeStep
		}
		if cost > 0 {
			p.perToken = ewma(p.perToken, cost/time.Duration(prefill))
		}
	}
}

func ewma(avg, x time.Duration) time.Duration {
	if avg == 0 {
		return x
	}
	return avg + (x-avg)/4
}
