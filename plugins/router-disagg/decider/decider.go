package decider

// Threshold decides by uncached prompt tokens.
type Threshold struct {
	// Tokens is the least number of uncached prompt tokens that goes to a remote prefill instance.
	Tokens int
	// WhenUnknown offers remote prefill when the prompt length is unknown (0), leaving the choice to the engine.
	WhenUnknown bool
}

// Verdict is a decision and what it rests on.
type Verdict struct {
	// Remote is true when the prefill profile should run.
	Remote bool
	// Known is false when the prompt length was unknown.
	Known bool
	// Uncached is the prompt tokens likely not in the decode instance's prefix cache (when Known).
	Uncached int
}

// Decide judges a request of promptTokens tokens (0 when unknown) of which cachedTokens are likely cached on
// the decode instance.
func (t Threshold) Decide(promptTokens, cachedTokens int) Verdict {
	if promptTokens <= 0 {
		return Verdict{Remote: t.WhenUnknown}
	}
	uncached := promptTokens - min(max(cachedTokens, 0), promptTokens)
	return Verdict{Remote: uncached >= t.Tokens, Known: true, Uncached: uncached}
}
