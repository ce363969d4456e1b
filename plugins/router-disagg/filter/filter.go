package filter

import (
	"github.com/duet-ai/duet/plugins/router-disagg/sched"
	"github.com/duet-ai/duet/plugins/router-disagg/view"
	"github.com/duet-ai/duet/sdk/router"
)

// Filter names.
const (
	ModelName        sched.Name = "model"
	NotExcludedName  sched.Name = "not-excluded"
	ReadyName        sched.Name = "ready"
	NodeAliveName    sched.Name = "node-alive"
	DecodeRoleName   sched.Name = "decode-role"
	ContextFitsName  sched.Name = "context-fits"
	PrefillRoleName  sched.Name = "prefill-role"
	NotDecodeName    sched.Name = "not-decode"
	KVCompatibleName sched.Name = "kv-compatible"
	LinkedName       sched.Name = "linked"
	KVEndpointName   sched.Name = "kv-endpoint"
	PromptFitsName   sched.Name = "prompt-fits"
)

// Model keeps instances of the requested model. Its scope is the snapshot's (it reads only Request.Model).
func Model() sched.Filter {
	return sched.SnapshotPredicate(ModelName, func(c *sched.Cycle, in *view.Instance) bool { return in.Model == c.Request.Model })
}

// NotExcluded keeps instances the request does not exclude (router.Request.Exclude): the gateway's retry
// after the first choice failed before its first token. Requests without exclusions skip it.
func NotExcluded() sched.Filter {
	excludes := func(c *sched.Cycle) bool { return len(c.Request.Exclude) > 0 }
	return sched.PredicateWhen(NotExcludedName, excludes, func(c *sched.Cycle, in *view.Instance) bool {
		for _, id := range c.Request.Exclude {
			if id == in.ID {
				return false
			}
		}
		return true
	})
}

// Ready keeps instances whose status is ready (not loading, draining or unavailable).
func Ready() sched.Filter {
	return sched.SnapshotPredicate(ReadyName, func(_ *sched.Cycle, in *view.Instance) bool { return in.Status == router.InstanceReady })
}

// NodeAlive keeps instances on nodes the snapshot has and says are alive (not suspect, failed or left).
func NodeAlive() sched.Filter {
	return sched.SnapshotPredicate(NodeAliveName, func(_ *sched.Cycle, in *view.Instance) bool { return in.Alive })
}

// DecodeRole keeps instances that can decode: role both or decode (an empty role counts as both), and not
// named only on the prefill side of the instance links, which makes an instance prefill-only whatever its role.
func DecodeRole() sched.Filter {
	return sched.SnapshotPredicate(DecodeRoleName, func(_ *sched.Cycle, in *view.Instance) bool {
		return view.CanDecode(in.Role) && !in.PrefillOnly
	})
}

// ContextFits keeps instances whose context length holds the prompt and the tokens to generate. It applies
// only when both the instance's context length and the prompt length are known (non-zero); an unknown
// MaxTokens counts as 0. A profile skips it (sched.Conditional) for a request that fits the shortest context
// of the model's instances: after the model filter it would keep every candidate.
func ContextFits() sched.Filter {
	applies := func(c *sched.Cycle) bool {
		short, known := shortest(c)
		return c.Request.PromptTokens > 0 &&
			(!known || short > 0 && int64(c.Request.PromptTokens)+int64(max(c.Request.MaxTokens, 0)) > int64(short))
	}
	return sched.PredicateWhen(ContextFitsName, applies, func(c *sched.Cycle, in *view.Instance) bool {
		if in.ContextLength <= 0 || c.Request.PromptTokens <= 0 {
			return true
		}
		return int64(c.Request.PromptTokens)+int64(max(c.Request.MaxTokens, 0)) <= int64(in.ContextLength)
	})
}

// PromptFits keeps instances whose context length holds the prompt: a prefill instance computes the prompt's
// KV and generates nothing. It applies only when both lengths are known. A profile skips it for a prompt that
// fits the shortest context of the model's instances, as ContextFits.
func PromptFits() sched.Filter {
	applies := func(c *sched.Cycle) bool {
		short, known := shortest(c)
		return !known || short > 0 && c.Request.PromptTokens > short
	}
	return sched.PredicateWhen(PromptFitsName, applies, func(c *sched.Cycle, in *view.Instance) bool {
		return in.ContextLength <= 0 || c.Request.PromptTokens <= in.ContextLength
	})
}

// shortest is the shortest context length among the instances of the request's model (0 when none of them
// has one): every instance of the model whose context length is known holds at least that many tokens. The
// context filters come after the model filter, so they can drop only instances of the model. known is false
// without a view, and the filters then apply.
func shortest(c *sched.Cycle) (short int, known bool) {
	if c.View == nil {
		return 0, false
	}
	return c.View.ShortestContext(c.Request.Model), true
}

// PrefillRole keeps instances that can serve prefill: role both or prefill (an empty role counts as both).
func PrefillRole() sched.Filter {
	return sched.SnapshotPredicate(PrefillRoleName, func(_ *sched.Cycle, in *view.Instance) bool { return view.CanPrefill(in.Role) })
}

// NotDecode drops the chosen decode instance: it does not prefill for itself over the wire.
func NotDecode() sched.Filter {
	return sched.Predicate(NotDecodeName, func(c *sched.Cycle, in *view.Instance) bool {
		if a, b := in.AffinityID, c.Decode.AffinityID; a != 0 && b != 0 && a != b {
			return true // hashes of the ids, when the view made them: other hashes, other ids
		}
		return in.ID != c.Decode.ID
	})
}

// KVCompatible keeps instances whose KV cache the decode instance can ingest: exactly, with the decode
// instance's fingerprint (same weights, dtype and KV layout); or approximately, with another fingerprint but
// the same KV compatibility family (router.Instance.KVCompat: the same model at another quantization), when
// an instance link names the instance as a prefill instance of the decode instance. An approximate pair that
// no operator linked is never offered, and an empty fingerprint or KVCompat matches nothing: compatibility
// that cannot be checked is not assumed.
//
// A profile skips it (sched.Conditional) when every instance of the model has the decode instance's
// fingerprint: after the model filter it would keep every candidate.
func KVCompatible() sched.Filter {
	applies := func(c *sched.Cycle) bool {
		fp, one := "", false
		if c.View != nil {
			fp, one = c.View.SoleFingerprint(c.Request.Model)
		}
		return !one || c.Decode.Fingerprint != fp
	}
	return sched.PredicateWhen(KVCompatibleName, applies, func(c *sched.Cycle, in *view.Instance) bool {
		return view.ExactKV(in, c.Decode) || view.ApproximateKV(in, c.Decode) && c.View.Linked(c.Decode, in)
	})
}

// Linked keeps, when the instance links give the decode instance prefill instances, only those. A decode
// instance without links may use any prefill instance that passes the other filters, and a profile skips the
// filter for it (sched.Conditional).
func Linked() sched.Filter {
	applies := func(c *sched.Cycle) bool { return c.View.HasLinkedPrefill(c.Decode) }
	return sched.PredicateWhen(LinkedName, applies, func(c *sched.Cycle, in *view.Instance) bool {
		return !c.View.HasLinkedPrefill(c.Decode) || c.View.Linked(c.Decode, in)
	})
}

// KVEndpoint keeps instances whose KV endpoint the decode node can dial: host:port with a valid port, and a
// host that is not unspecified unless the path from the decode node names the prefill node's address (or the
// two share a node).
func KVEndpoint() sched.Filter {
	return sched.Predicate(KVEndpointName, func(c *sched.Cycle, in *view.Instance) bool {
		switch {
		case !in.KVValid:
			return false
		case !in.KVUnspecified || in.Node == c.Decode.Node:
			return true
		}
		p, ok := c.View.PathBetween(c.Decode, in)
		return ok && p.Address != ""
	})
}

// Decode is the decode profile's filter chain, cheapest and most selective first.
func Decode() []sched.Filter {
	return []sched.Filter{Model(), NotExcluded(), Ready(), NodeAlive(), DecodeRole(), ContextFits()}
}

// Prefill is the prefill profile's filter chain.
func Prefill() []sched.Filter {
	return []sched.Filter{Model(), KVCompatible(), NotDecode(), Ready(), NodeAlive(), PrefillRole(), Linked(), PromptFits(), KVEndpoint()}
}
