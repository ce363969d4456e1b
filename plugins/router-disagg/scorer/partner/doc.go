// Package partner prefers, for a prompt long enough to be prefilled remotely, the decode instances that an
// operator gave prefill partners through instance links: they are the ones set up for disaggregated
// prefill, and their first token comes sooner. A short prompt is prefilled where it decodes, so every
// instance scores the same for it.
//
// Formula: for a request whose PromptTokens is at least the router's PrefillThreshold, score = 1 when the
// instance links give the candidate a prefill instance that is ready on an alive node, 0 otherwise; for a
// shorter (or unknown) prompt, or when no candidate has a partner, 1 for every candidate. The uncached part
// is not known yet when the decode profile runs, so the whole prompt counts here; the decider still judges
// the uncached tokens afterwards.
//
// Whether an instance has a ready partner is a fact of the snapshot the view resolves once
// (view.Instance.ReadyPartner). For a short prompt, or a model none of whose instances has a partner, every
// candidate scores 1 and a profile adds that without scoring (sched.UniformScorer).
package partner
