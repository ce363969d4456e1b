package routerdisagg

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/duet-ai/duet/plugins/router-disagg/cost"
)

// Weights are the scorers' weights in the weighted mean of each profile. A weight of 0 turns a scorer off.
type Weights struct {
	// Decode profile.
	Load, KVUtilization, Prefix, Locality, Partner float64
	// Prefill profile.
	PrefillLoad, Link, Hardware float64
}

// Config configures the router. Start from DefaultConfig: a zero field means zero, not "default".
type Config struct {
	Weights Weights
	// PrefillThreshold is the least number of uncached prompt tokens sent to a remote prefill instance.
	PrefillThreshold int
	// PrefillWhenUnknown offers prefill endpoints when the request's prompt length is unknown, and lets the
	// decode engine, which counts the exact uncached tokens, decide.
	PrefillWhenUnknown bool
	// MaxPrefillEndpoints is how many prefill endpoints a decision lists, best first; 0 turns remote prefill off.
	MaxPrefillEndpoints int
	// AffinitySize is how many prefix block hashes the affinity index remembers; 0 turns prefix affinity off.
	AffinitySize int
	// AffinityMaxBlocks is how many leading block hashes of a request the index looks at.
	AffinityMaxBlocks int
	// BlockTokens is how many tokens one prefix block hash covers, to turn cached blocks into cached tokens.
	BlockTokens int
	// PrefillHardware ranks node hardware classes for prefill, best first (Node.Hardware values).
	PrefillHardware []string
	// PD is how the router decides where a long prompt is prefilled: PDThreshold (remote prefill from
	// PrefillThreshold uncached tokens on, as exo) or PDAuto (by estimated time, from measured speeds).
	PD string
	// Auto configures PDAuto.
	Auto Auto
	// LatencySampleEvery times one route in this many (per-plugin latency, see Router.Stats); 0 times none.
	// A clock read costs tens of nanoseconds per plugin, so timing every route would slow it noticeably.
	LatencySampleEvery int
}

// PD modes.
const (
	PDThreshold = "threshold"
	PDAuto      = "auto"
)

// Objectives of PDAuto.
const (
	ObjectiveTotal      = "total"
	ObjectiveFirstToken = "first-token"
)

// Auto configures the PDAuto mode: per request, the cost model (package cost) estimates each placement's
// time from the speeds the instances' nodes measured, and the router takes the fastest.
type Auto struct {
	// Margin is how much faster, as a share, another placement must be estimated than prefilling and
	// decoding on the decode profile's winner for the router to choose it: estimates are noisy, and a
	// placement that wins by less is not worth a hop or a transfer.
	Margin float64
	// MinTokens: a prompt with fewer uncached tokens is prefilled where it is decoded, with no estimate.
	MinTokens int
	// DecodeCandidates is how many of the decode profile's best instances are weighed (prefilling locally
	// and remotely on each); PrefillCandidates how many of the prefill profile's best, per decode instance.
	DecodeCandidates, PrefillCandidates int
	// Objective is what the router minimises: ObjectiveTotal (the whole request) or ObjectiveFirstToken.
	Objective string
	// Cost are the cost model's assumptions where nothing is measured.
	Cost cost.Params
}

// Limits on configuration values, so that a typo cannot make the router allocate without bound.
const (
	MaxPrefillEndpointsLimit = 16
	MaxAffinitySize          = 1 << 24
	MaxAffinityMaxBlocks     = 1 << 20
	MaxAutoCandidates        = 16
)

// DefaultConfig is the configuration the plugin runs with when no environment variable says otherwise.
func DefaultConfig() Config {
	return Config{
		Weights: Weights{
			Load: 1, KVUtilization: 0.5, Prefix: 1, Locality: 0.1, Partner: 2,
			PrefillLoad: 1, Link: 1, Hardware: 0.5,
		},
		PrefillThreshold:    1000,
		PrefillWhenUnknown:  true,
		MaxPrefillEndpoints: 2,
		AffinitySize:        16384,
		AffinityMaxBlocks:   4096,
		BlockTokens:         64,
		LatencySampleEvery:  16,
		PD:                  PDThreshold,
		Auto: Auto{
			Margin: 0.05, MinTokens: 256, DecodeCandidates: 3, PrefillCandidates: 3, Objective: ObjectiveTotal,
			Cost: cost.DefaultParams(),
		},
	}
}

// Validate reports the first field out of range.
func (c Config) Validate() error {
	w := c.Weights
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"Load", w.Load}, {"KVUtilization", w.KVUtilization}, {"Prefix", w.Prefix}, {"Locality", w.Locality}, {"Partner", w.Partner},
		{"PrefillLoad", w.PrefillLoad}, {"Link", w.Link}, {"Hardware", w.Hardware},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("router-disagg: weight %s is %v, want a finite number ≥ 0", f.name, f.v)
		}
	}
	switch {
	case c.PrefillThreshold < 0:
		return fmt.Errorf("router-disagg: PrefillThreshold is %d, want ≥ 0", c.PrefillThreshold)
	case c.MaxPrefillEndpoints < 0 || c.MaxPrefillEndpoints > MaxPrefillEndpointsLimit:
		return fmt.Errorf("router-disagg: MaxPrefillEndpoints is %d, want 0..%d", c.MaxPrefillEndpoints, MaxPrefillEndpointsLimit)
	case c.AffinitySize < 0 || c.AffinitySize > MaxAffinitySize:
		return fmt.Errorf("router-disagg: AffinitySize is %d, want 0..%d", c.AffinitySize, MaxAffinitySize)
	case c.AffinityMaxBlocks < 1 || c.AffinityMaxBlocks > MaxAffinityMaxBlocks:
		return fmt.Errorf("router-disagg: AffinityMaxBlocks is %d, want 1..%d", c.AffinityMaxBlocks, MaxAffinityMaxBlocks)
	case c.BlockTokens < 1:
		return fmt.Errorf("router-disagg: BlockTokens is %d, want ≥ 1", c.BlockTokens)
	case c.LatencySampleEvery < 0:
		return fmt.Errorf("router-disagg: LatencySampleEvery is %d, want ≥ 0", c.LatencySampleEvery)
	case c.PD != PDThreshold && c.PD != PDAuto:
		return fmt.Errorf("router-disagg: PD is %q, want %q or %q", c.PD, PDThreshold, PDAuto)
	}
	a := c.Auto
	switch {
	case !(a.Margin >= 0 && a.Margin < 1):
		return fmt.Errorf("router-disagg: Auto.Margin is %v, want 0 ≤ margin < 1", a.Margin)
	case a.MinTokens < 1:
		return fmt.Errorf("router-disagg: Auto.MinTokens is %d, want ≥ 1", a.MinTokens)
	case a.DecodeCandidates < 1 || a.DecodeCandidates > MaxAutoCandidates:
		return fmt.Errorf("router-disagg: Auto.DecodeCandidates is %d, want 1..%d", a.DecodeCandidates, MaxAutoCandidates)
	case a.PrefillCandidates < 1 || a.PrefillCandidates > MaxAutoCandidates:
		return fmt.Errorf("router-disagg: Auto.PrefillCandidates is %d, want 1..%d", a.PrefillCandidates, MaxAutoCandidates)
	case a.Objective != ObjectiveTotal && a.Objective != ObjectiveFirstToken:
		return fmt.Errorf("router-disagg: Auto.Objective is %q, want %q or %q", a.Objective, ObjectiveTotal, ObjectiveFirstToken)
	case a.Cost.OutputTokens < 1:
		return fmt.Errorf("router-disagg: Auto.Cost.OutputTokens is %d, want ≥ 1", a.Cost.OutputTokens)
	case !(a.Cost.NominalEfficiency > 0 && a.Cost.NominalEfficiency <= 1):
		return fmt.Errorf("router-disagg: Auto.Cost.NominalEfficiency is %v, want 0 < efficiency ≤ 1", a.Cost.NominalEfficiency)
	case !(a.Cost.SameNodeBPS > 0) || math.IsInf(a.Cost.SameNodeBPS, 0) || !(a.Cost.IngestBPS > 0) || math.IsInf(a.Cost.IngestBPS, 0):
		return fmt.Errorf("router-disagg: Auto.Cost.SameNodeBPS and IngestBPS are %v and %v, want finite rates > 0", a.Cost.SameNodeBPS, a.Cost.IngestBPS)
	case a.Cost.ChunkTokens < 1 || a.Cost.HopOverhead < 0:
		return fmt.Errorf("router-disagg: Auto.Cost.ChunkTokens is %d and HopOverhead %v, want ≥ 1 and ≥ 0", a.Cost.ChunkTokens, a.Cost.HopOverhead)
	}
	return nil
}

// EnvPrefix starts the names of the environment variables the plugin reads.
const EnvPrefix = "DUET_DISAGG_"

// ConfigFromEnv starts from DefaultConfig and applies the DUET_DISAGG_* variables that lookup finds (pass
// os.LookupEnv). A variable that is set but does not parse, or a result out of range, is an error that names
// the variable. The variables are listed in the README.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	var errs []error
	float := func(name string, dst *float64) {
		if v, ok := lookup(EnvPrefix + name); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("%s%s=%q: want a finite number ≥ 0", EnvPrefix, name, v))
				return
			}
			*dst = f
		}
	}
	integer := func(name string, dst *int, lo, hi int) {
		if v, ok := lookup(EnvPrefix + name); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < lo || n > hi {
				errs = append(errs, fmt.Errorf("%s%s=%q: want an integer in %d..%d", EnvPrefix, name, v, lo, hi))
				return
			}
			*dst = n
		}
	}
	float("WEIGHT_LOAD", &c.Weights.Load)
	float("WEIGHT_KV", &c.Weights.KVUtilization)
	float("WEIGHT_PREFIX", &c.Weights.Prefix)
	float("WEIGHT_LOCALITY", &c.Weights.Locality)
	float("WEIGHT_PARTNER", &c.Weights.Partner)
	float("WEIGHT_PREFILL_LOAD", &c.Weights.PrefillLoad)
	float("WEIGHT_LINK", &c.Weights.Link)
	float("WEIGHT_HARDWARE", &c.Weights.Hardware)
	integer("PREFILL_THRESHOLD", &c.PrefillThreshold, 0, math.MaxInt32)
	integer("MAX_PREFILL", &c.MaxPrefillEndpoints, 0, MaxPrefillEndpointsLimit)
	integer("AFFINITY_SIZE", &c.AffinitySize, 0, MaxAffinitySize)
	integer("AFFINITY_MAX_BLOCKS", &c.AffinityMaxBlocks, 1, MaxAffinityMaxBlocks)
	integer("BLOCK_TOKENS", &c.BlockTokens, 1, math.MaxInt32)
	integer("LATENCY_SAMPLE", &c.LatencySampleEvery, 0, math.MaxInt32)
	if v, ok := lookup(EnvPrefix + "PD"); ok {
		c.PD = strings.TrimSpace(v)
		if c.PD != PDThreshold && c.PD != PDAuto {
			errs = append(errs, fmt.Errorf("%sPD=%q: want %s or %s", EnvPrefix, v, PDThreshold, PDAuto))
		}
	}
	float("AUTO_MARGIN", &c.Auto.Margin)
	integer("AUTO_MIN_TOKENS", &c.Auto.MinTokens, 1, math.MaxInt32)
	integer("AUTO_DECODE_CANDIDATES", &c.Auto.DecodeCandidates, 1, MaxAutoCandidates)
	integer("AUTO_PREFILL_CANDIDATES", &c.Auto.PrefillCandidates, 1, MaxAutoCandidates)
	integer("AUTO_OUTPUT_TOKENS", &c.Auto.Cost.OutputTokens, 1, math.MaxInt32)
	float("AUTO_NOMINAL_EFFICIENCY", &c.Auto.Cost.NominalEfficiency)
	if v, ok := lookup(EnvPrefix + "AUTO_OBJECTIVE"); ok {
		c.Auto.Objective = strings.TrimSpace(v)
		if c.Auto.Objective != ObjectiveTotal && c.Auto.Objective != ObjectiveFirstToken {
			errs = append(errs, fmt.Errorf("%sAUTO_OBJECTIVE=%q: want %s or %s", EnvPrefix, v, ObjectiveTotal, ObjectiveFirstToken))
		}
	}
	if v, ok := lookup(EnvPrefix + "PREFILL_WHEN_UNKNOWN"); ok {
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("%sPREFILL_WHEN_UNKNOWN=%q: want true or false", EnvPrefix, v))
		} else {
			c.PrefillWhenUnknown = b
		}
	}
	if v, ok := lookup(EnvPrefix + "PREFILL_HARDWARE"); ok {
		c.PrefillHardware = nil
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				c.PrefillHardware = append(c.PrefillHardware, h)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("router-disagg: %w", err)
	}
	return c, c.Validate()
}
