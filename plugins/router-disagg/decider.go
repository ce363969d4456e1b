package routerdisagg

// prefillDecider says when the prefill profile runs: when the part of the prompt the decode instance will have
// to compute is long enough that another machine computing it and shipping the KV cache pays off. exo uses a
// threshold of 1000 uncached tokens; below it, the transfer and its setup cost more than they save.
//
// The decode engine has the last word (it counts the exact uncached tokens after tokenizing and looking up its
// prefix cache, and prefills locally below its own threshold or on any failure), so the router may offer
// endpoints when it cannot tell: an unknown prompt length offers them when WhenUnknown is set.
type prefillDecider struct {
	// Tokens is the least number of uncached prompt tokens that goes to a remote prefill instance.
	Tokens int
	// WhenUnknown offers remote prefill when the prompt length is unknown (0), leaving the choice to the engine.
	WhenUnknown bool
}

// prefillVerdict is a decision of the prefillDecider and what it rests on.
type prefillVerdict struct {
	// Remote is true when the prefill profile should run.
	Remote bool
	// Known is false when the prompt length was unknown.
	Known bool
	// Uncached is the prompt tokens likely not in the decode instance's prefix cache (when Known).
	Uncached int
}

// decide judges a request of promptTokens tokens (0 when unknown) of which cachedTokens are likely cached on
// the decode instance.
func (t prefillDecider) decide(promptTokens, cachedTokens int) prefillVerdict {
	if promptTokens <= 0 {
		return prefillVerdict{Remote: t.WhenUnknown}
	}
	uncached := promptTokens - min(max(cachedTokens, 0), promptTokens)
	return prefillVerdict{Remote: uncached >= t.Tokens, Known: true, Uncached: uncached}
}
