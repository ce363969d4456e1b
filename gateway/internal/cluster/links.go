package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/duet-ai/duet/serfcluster"
)

// LinkCheck is what CheckLink concludes of a link that may be written.
type LinkCheck struct {
	// Exact is true when every prefill instance runs the decode instances' very model (equal fingerprints),
	// so disaggregated outputs equal local ones; false when some pair shares only KVCompat (the same base model
	// at another quantization, which exo allows too).
	Exact bool
}

// CheckLink validates an instance link against the cluster's instances, as exo's API defines links: both
// sides non-empty, every instance known, none on both sides, every prefill instance serving KV, and every
// pair able to share KV. The error is a sentence for the client (a 400).
func CheckLink(s *serfcluster.Snapshot, prefill, decode []string) (LinkCheck, error) {
	if len(prefill) == 0 {
		return LinkCheck{}, fmt.Errorf("prefill_instances must name at least one instance")
	}
	if len(decode) == 0 {
		return LinkCheck{}, fmt.Errorf("decode_instances must name at least one instance")
	}
	for side, ids := range map[string][]string{"prefill_instances": prefill, "decode_instances": decode} {
		if len(ids) > serfcluster.MaxLinkMembers {
			return LinkCheck{}, fmt.Errorf("%s names %d instances, more than %d", side, len(ids), serfcluster.MaxLinkMembers)
		}
	}
	get := func(side, id string) (serfcluster.Instance, Facts, error) {
		in, ok := s.Instance(id)
		if !ok {
			return in, Facts{}, fmt.Errorf("%s: unknown instance %q (GET /v1/instances lists them)", side, id)
		}
		f, err := FactsFromLabels(in.Labels)
		if err != nil {
			return in, f, fmt.Errorf("%s: instance %q: %v", side, id, err)
		}
		return in, f, nil
	}
	seen := map[string]string{}
	type member struct {
		in    serfcluster.Instance
		facts Facts
	}
	var ps, ds []member
	for _, id := range prefill {
		if side, dup := seen[id]; dup {
			if side == "prefill_instances" {
				return LinkCheck{}, fmt.Errorf("prefill_instances names %q twice", id)
			}
		}
		seen[id] = "prefill_instances"
		in, f, err := get("prefill_instances", id)
		if err != nil {
			return LinkCheck{}, err
		}
		if in.KVEndpoint == "" {
			return LinkCheck{}, fmt.Errorf("prefill instance %q serves no KV: its engine runs no KV wire server (engine option kv_listen)", id)
		}
		ps = append(ps, member{in, f})
	}
	for _, id := range decode {
		switch seen[id] {
		case "prefill_instances":
			return LinkCheck{}, fmt.Errorf("instance %q is on both sides of the link", id)
		case "decode_instances":
			return LinkCheck{}, fmt.Errorf("decode_instances names %q twice", id)
		}
		seen[id] = "decode_instances"
		in, f, err := get("decode_instances", id)
		if err != nil {
			return LinkCheck{}, err
		}
		ds = append(ds, member{in, f})
	}
	check := LinkCheck{Exact: true}
	for _, p := range ps {
		for _, d := range ds {
			exact, err := kvCompatible(p.in, p.facts, d.in, d.facts)
			if err != nil {
				return LinkCheck{}, err
			}
			check.Exact = check.Exact && exact
		}
	}
	return check, nil
}

// kvCompatible tells whether prefill instance p's KV can stand in for decode instance d's, exactly or not.
func kvCompatible(p serfcluster.Instance, pf Facts, d serfcluster.Instance, df Facts) (exact bool, err error) {
	cannot := func(format string, args ...any) error {
		return fmt.Errorf("instances %q and %q cannot share KV: %s", p.ID, d.ID, fmt.Sprintf(format, args...))
	}
	if p.Fingerprint != "" && p.Fingerprint == d.Fingerprint {
		return true, nil
	}
	pk, dk := pf.KV, df.KV
	switch {
	case pk.NumLayers == 0 || dk.NumLayers == 0:
		return false, cannot("the KV layout of one of them is unknown")
	case pk.NumLayers != dk.NumLayers:
		return false, cannot("%d layers against %d", pk.NumLayers, dk.NumLayers)
	case pk.NumKVHeads != dk.NumKVHeads:
		return false, cannot("%d KV heads against %d", pk.NumKVHeads, dk.NumKVHeads)
	case pk.HeadDim != dk.HeadDim:
		return false, cannot("head dimension %d against %d", pk.HeadDim, dk.HeadDim)
	case pk.LinearLayers != dk.LinearLayers:
		// A hybrid and a dense model may share their attention layers' shape, not their linear layers' states.
		return false, cannot("%d linear-attention layers against %d", pk.LinearLayers, dk.LinearLayers)
	case pk.StateBytes != dk.StateBytes:
		return false, cannot("linear-attention states of %d bytes against %d", pk.StateBytes, dk.StateBytes)
	case pf.KVCompat == "" || df.KVCompat == "":
		return false, cannot("their models differ (fingerprints %s and %s) and one does not say which others it matches", p.Fingerprint, d.Fingerprint)
	case pf.KVCompat != df.KVCompat:
		return false, cannot("their models differ in architecture, RoPE or tokenizer (%s against %s)", pf.KVCompat, df.KVCompat)
	}
	return false, nil // the same base model at another quantization: approximate
}

// NewLinkID makes an id for a new link.
func NewLinkID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "link-" + hex.EncodeToString(b[:])
}
