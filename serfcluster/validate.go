package serfcluster

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Limits on table values. They keep one instance delta well inside a gossip packet and bound what a peer
// can make this node hold.
const (
	MaxIDLen          = 128 // node, instance and link IDs
	MaxModelLen       = 256
	MaxEngineLen      = 64
	MaxFingerprintLen = 128
	MaxAddrLen        = 255 // host:port strings
	MaxLabels         = 8
	MaxLabelKeyLen    = 32
	MaxLabelValueLen  = 64
	// MaxLinkMembers bounds each side of an instance link.
	MaxLinkMembers = 64
	// MaxLoad bounds in-flight and queued counts.
	MaxLoad = 1_000_000
	// MaxSpeedBands bounds Speed.PrefillTPS, MaxSpeedIngress Speed.Ingress.
	MaxSpeedBands   = 8
	MaxSpeedIngress = 8
	// maxRate bounds every rate of a Speed (tokens or bytes per second).
	maxRate = 1e13
)

func isIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:@/-", r)
}

// checkID checks a node, instance or link ID: 1 to MaxIDLen bytes of letters, digits and . _ : @ / -.
func checkID(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxIDLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), MaxIDLen)
	}
	for _, r := range s {
		if !isIDRune(r) {
			return fmt.Errorf("%s %q has character %q (allowed: letters, digits and ._:@/-)", what, s, r)
		}
	}
	return nil
}

// checkToken checks a free-form token: printable, no spaces, at most limit bytes; empty only if optional.
func checkToken(what, s string, limit int, optional bool) error {
	if s == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), limit)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%s %q has character %q", what, s, r)
		}
	}
	return nil
}

// checkHostPort checks a host:port with a numeric port in 1..65535.
func checkHostPort(what, s string, optional bool) error {
	if s == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxAddrLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), MaxAddrLen)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q: %v", what, s, err)
	}
	if err := checkToken(what+" host", host, MaxAddrLen, false); err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s %q: port must be a number in 1..65535", what, s)
	}
	return nil
}

func checkURL(what, s string) error {
	if err := checkToken(what, s, MaxAddrLen, false); err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%s %q must be an absolute http or https URL", what, s)
	}
	return nil
}

// Validate checks an instance as PutInstance and peers' deltas receive it.
func (in *Instance) Validate() error {
	if err := in.validate(); err != nil {
		return fmt.Errorf("serfcluster: instance %q: %w", in.ID, err)
	}
	return nil
}

func (in *Instance) validate() error {
	if err := checkID("id", in.ID); err != nil {
		return err
	}
	if err := checkToken("model", in.Model, MaxModelLen, false); err != nil {
		return err
	}
	if err := checkID("node", string(in.Node)); err != nil {
		return err
	}
	if err := checkToken("engine", in.Engine, MaxEngineLen, false); err != nil {
		return err
	}
	switch in.Role {
	case RolePrefill, RoleDecode, RoleBoth:
	default:
		return fmt.Errorf("role %q is not prefill, decode or both", in.Role)
	}
	switch in.Status {
	case InstanceReady, InstanceLoading, InstanceUnavailable, InstanceDraining:
	default:
		return fmt.Errorf("status %q is not ready, loading, unavailable or draining", in.Status)
	}
	if err := checkHostPort("kv_endpoint", in.KVEndpoint, true); err != nil {
		return err
	}
	if err := checkToken("fingerprint", in.Fingerprint, MaxFingerprintLen, true); err != nil {
		return err
	}
	if len(in.Labels) > MaxLabels {
		return fmt.Errorf("%d labels, over the limit of %d", len(in.Labels), MaxLabels)
	}
	for k, v := range in.Labels {
		if err := checkToken("label key", k, MaxLabelKeyLen, false); err != nil {
			return err
		}
		if len(v) > MaxLabelValueLen {
			return fmt.Errorf("label %q: value is %d bytes, over the limit of %d", k, len(v), MaxLabelValueLen)
		}
		for _, r := range v {
			if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
				return fmt.Errorf("label %q: value has character %q", k, r)
			}
		}
	}
	return nil
}

// Validate checks an instance link as PutInstanceLink and peers' deltas receive it.
func (l *InstanceLink) Validate() error {
	if err := l.validate(); err != nil {
		return fmt.Errorf("serfcluster: instance link %q: %w", l.LinkID, err)
	}
	return nil
}

func (l *InstanceLink) validate() error {
	if err := checkID("link_id", l.LinkID); err != nil {
		return err
	}
	for _, side := range []struct {
		name string
		ids  []string
	}{{"prefill_instances", l.PrefillInstances}, {"decode_instances", l.DecodeInstances}} {
		if len(side.ids) > MaxLinkMembers {
			return fmt.Errorf("%s has %d members, over the limit of %d", side.name, len(side.ids), MaxLinkMembers)
		}
		for i, id := range side.ids {
			if err := checkID(side.name+" member", id); err != nil {
				return err
			}
			if slices.Contains(side.ids[:i], id) {
				return fmt.Errorf("%s lists %q twice", side.name, id)
			}
		}
	}
	if len(l.DecodeInstances) == 0 {
		return fmt.Errorf("decode_instances is empty")
	}
	return nil
}

func (ld Load) validate() error {
	if ld.InFlight < 0 || ld.InFlight > MaxLoad || ld.Queued < 0 || ld.Queued > MaxLoad {
		return fmt.Errorf("serfcluster: load in_flight=%d queued=%d out of range 0..%d", ld.InFlight, ld.Queued, MaxLoad)
	}
	if ld.Speed != nil {
		return ld.Speed.validate()
	}
	return nil
}

func (s *Speed) validate() error {
	rate := func(what string, v float64) error {
		if !(v >= 0 && v <= maxRate) { // NaN fails too
			return fmt.Errorf("serfcluster: speed %s=%v out of range 0..%g", what, v, maxRate)
		}
		return nil
	}
	switch {
	case len(s.PrefillTPS) > MaxSpeedBands:
		return fmt.Errorf("serfcluster: speed has %d prefill bands, over the limit of %d", len(s.PrefillTPS), MaxSpeedBands)
	case len(s.Ingress) > MaxSpeedIngress:
		return fmt.Errorf("serfcluster: speed has %d ingress links, over the limit of %d", len(s.Ingress), MaxSpeedIngress)
	case s.QueueWait < 0 || s.KVBytesPerToken < 0 || s.KVBytesPerToken > 1<<30 || s.KVStateBytes < 0 || s.KVStateBytes > 1<<40 || s.Samples < 0:
		return fmt.Errorf("serfcluster: speed queue_wait=%v kv_bytes_per_token=%d kv_state_bytes=%d samples=%d out of range",
			s.QueueWait, s.KVBytesPerToken, s.KVStateBytes, s.Samples)
	}
	for _, v := range s.PrefillTPS {
		if err := rate("prefill_tps", v); err != nil {
			return err
		}
	}
	if err := rate("decode_tps", s.DecodeTPS); err != nil {
		return err
	}
	if err := rate("ingest_bps", s.IngestBPS); err != nil {
		return err
	}
	for _, l := range s.Ingress {
		if err := checkID("speed ingress node", string(l.From)); err != nil {
			return fmt.Errorf("serfcluster: %w", err)
		}
		if err := rate("ingress bytes_per_second", l.BytesPerSecond); err != nil {
			return err
		}
		if len(l.PrefillTPS) > MaxSpeedBands {
			return fmt.Errorf("serfcluster: speed ingress from %s has %d prefill bands, over the limit of %d", l.From, len(l.PrefillTPS), MaxSpeedBands)
		}
		for _, v := range l.PrefillTPS {
			if err := rate("ingress prefill_tps", v); err != nil {
				return err
			}
		}
		if l.RTT < 0 || l.Samples < 0 {
			return fmt.Errorf("serfcluster: speed ingress from %s: rtt=%v samples=%d out of range", l.From, l.RTT, l.Samples)
		}
	}
	return nil
}
