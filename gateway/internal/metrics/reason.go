package metrics

import "strings"

// The reason label of duet_remote_prefill_fallbacks_total: an engine's fallback reason is free text
// (engine.RemotePrefill.FallbackReason, every endpoint's error joined), so it is read into one of these.
const (
	ReasonTimeout      = "timeout"         // a deadline passed: the dial, a frame, the whole exchange
	ReasonUnreachable  = "unreachable"     // the prefill endpoint could not be dialled
	ReasonConnLost     = "connection_lost" // the connection broke during the exchange (the prefill node died)
	ReasonBusy         = "busy"            // the prefill server answered 503: at capacity, stopping, not picked up
	ReasonRejected     = "rejected"        // the prefill server answered another error (bad request, auth, internal)
	ReasonProtocol     = "protocol"        // the peer's bytes broke the KV wire protocol (or a checksum)
	ReasonIncompatible = "incompatible"    // the peer's KV does not fit: another model, layout or position
	ReasonCancelled    = "cancelled"       // the request ended while fetching
	ReasonOther        = "other"
)

// FallbackReasons are every reason label, in the order FallbackClass tries them.
var FallbackReasons = []string{ReasonTimeout, ReasonUnreachable, ReasonConnLost, ReasonBusy, ReasonRejected,
	ReasonProtocol, ReasonIncompatible, ReasonCancelled, ReasonOther}

const reasonsHelp = "timeout, unreachable, connection_lost, busy, rejected, protocol, incompatible, cancelled, other"

// FallbackClass reads an engine's fallback reason into a reason label. The reason is every endpoint's error,
// one per line (errors.Join): the last endpoint's decides, since that is the failure the engine fell back on.
// It knows sdk/kvwire's error texts and the checks the built-in engine makes on a peer's KV.
func FallbackClass(reason string) string {
	last := reason
	if i := strings.LastIndexByte(strings.TrimRight(reason, "\n"), '\n'); i >= 0 {
		last = reason[i+1:]
	}
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(last, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("context canceled"):
		return ReasonCancelled
	case has("kvwire: timeout", "deadline exceeded", "i/o timeout"):
		return ReasonTimeout
	case has("kvwire: connection lost: dialing", "connection refused", "no route to host", "network is unreachable", "no such host"):
		return ReasonUnreachable
	case has("kvwire: connection lost", "connection reset", "broken pipe", "EOF"):
		return ReasonConnLost
	case has("kvwire: remote error 503"):
		return ReasonBusy
	case has("kvwire: remote error"):
		return ReasonRejected
	case has("kvwire: protocol error"):
		return ReasonProtocol
	case has("peer serves", "peer's model", "peer starts at", "chunk ", "the peer sent no header", "layer ", "the cache holds"):
		return ReasonIncompatible
	}
	return ReasonOther
}
