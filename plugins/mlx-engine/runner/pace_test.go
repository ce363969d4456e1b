package runner

import (
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	var p pacer
	if got := p.chunk(256); got != 256 {
		t.Errorf("untrained: %d, want the maximum", got)
	}
	for range 20 {
		p.observe(10*time.Millisecond, 2, 0)                        // decode steps of 10 ms
		p.observe(2*time.Second, 0, 1000)                           // 2 ms per prompt token, alone
		p.observe(10*time.Millisecond+200*time.Millisecond, 2, 100) // shared step: same cost per token
	}
	// One decode step's worth of prefill: 10 ms / 2 ms = 5 tokens, plus the floor.
	if got := p.chunk(256); got != 5+minChunk {
		t.Errorf("chunk %d, want %d", got, 5+minChunk)
	}
	if got := p.chunk(8); got != 8 {
		t.Errorf("chunk %d, want the maximum 8", got)
	}
}
