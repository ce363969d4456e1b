package routerdisagg

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
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
	// LatencySampleEvery times one route in this many (per-plugin latency, see Router.Stats); 0 times none.
	// A clock read costs tens of nanoseconds per plugin, so timing every route would slow it noticeably.
	LatencySampleEvery int
}

// Limits on configuration values, so that a typo cannot make the router allocate without bound.
const (
	MaxPrefillEndpointsLimit = 16
	MaxAffinitySize          = 1 << 24
	MaxAffinityMaxBlocks     = 1 << 20
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
