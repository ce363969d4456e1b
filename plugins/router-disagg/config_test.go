package routerdisagg_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	def := routerdisagg.DefaultConfig()
	tests := map[string]struct {
		vars    map[string]string
		want    func(*routerdisagg.Config)
		wantErr string
	}{
		"nothing set is the default": {vars: map[string]string{}},
		"weights": {
			vars: map[string]string{
				"DUET_DISAGG_WEIGHT_LOAD": "2", "DUET_DISAGG_WEIGHT_KV": "0", "DUET_DISAGG_WEIGHT_PREFIX": " 3.5 ",
				"DUET_DISAGG_WEIGHT_LOCALITY": "0.2", "DUET_DISAGG_WEIGHT_PREFILL_LOAD": "0.5",
				"DUET_DISAGG_WEIGHT_LINK": "4", "DUET_DISAGG_WEIGHT_HARDWARE": "1", "DUET_DISAGG_WEIGHT_PARTNER": "3",
			},
			want: func(c *routerdisagg.Config) {
				c.Weights = routerdisagg.Weights{Load: 2, KVUtilization: 0, Prefix: 3.5, Locality: 0.2, Partner: 3, PrefillLoad: 0.5, Link: 4, Hardware: 1}
			},
		},
		"prefill settings": {
			vars: map[string]string{
				"DUET_DISAGG_PREFILL_THRESHOLD": "2048", "DUET_DISAGG_MAX_PREFILL": "3", "DUET_DISAGG_PREFILL_WHEN_UNKNOWN": "false",
				"DUET_DISAGG_PREFILL_HARDWARE": " dgx-spark, ,apple-m3-ultra ",
			},
			want: func(c *routerdisagg.Config) {
				c.PrefillThreshold, c.MaxPrefillEndpoints, c.PrefillWhenUnknown = 2048, 3, false
				c.PrefillHardware = []string{"dgx-spark", "apple-m3-ultra"}
			},
		},
		"affinity settings": {
			vars: map[string]string{
				"DUET_DISAGG_AFFINITY_SIZE": "0", "DUET_DISAGG_AFFINITY_MAX_BLOCKS": "128", "DUET_DISAGG_BLOCK_TOKENS": "16",
				"DUET_DISAGG_LATENCY_SAMPLE": "1",
			},
			want: func(c *routerdisagg.Config) {
				c.AffinitySize, c.AffinityMaxBlocks, c.BlockTokens, c.LatencySampleEvery = 0, 128, 16, 1
			},
		},
		"auto settings": {
			vars: map[string]string{
				"DUET_DISAGG_PD": "auto", "DUET_DISAGG_AUTO_MARGIN": "0.1", "DUET_DISAGG_AUTO_MIN_TOKENS": "512",
				"DUET_DISAGG_AUTO_DECODE_CANDIDATES": "2", "DUET_DISAGG_AUTO_PREFILL_CANDIDATES": "5",
				"DUET_DISAGG_AUTO_OUTPUT_TOKENS": "64", "DUET_DISAGG_AUTO_NOMINAL_EFFICIENCY": "0.8",
				"DUET_DISAGG_AUTO_OBJECTIVE": "first-token",
			},
			want: func(c *routerdisagg.Config) {
				c.PD = routerdisagg.PDAuto
				c.Auto.Margin, c.Auto.MinTokens, c.Auto.DecodeCandidates, c.Auto.PrefillCandidates = 0.1, 512, 2, 5
				c.Auto.Cost.OutputTokens, c.Auto.Cost.NominalEfficiency = 64, 0.8
				c.Auto.Objective = routerdisagg.ObjectiveFirstToken
			},
		},
		"unknown pd mode":        {vars: map[string]string{"DUET_DISAGG_PD": "smart"}, wantErr: "DUET_DISAGG_PD"},
		"margin of one":          {vars: map[string]string{"DUET_DISAGG_AUTO_MARGIN": "1"}, wantErr: "Margin"},
		"zero efficiency":        {vars: map[string]string{"DUET_DISAGG_AUTO_NOMINAL_EFFICIENCY": "0"}, wantErr: "NominalEfficiency"},
		"unknown objective":      {vars: map[string]string{"DUET_DISAGG_AUTO_OBJECTIVE": "cheapest"}, wantErr: "DUET_DISAGG_AUTO_OBJECTIVE"},
		"too many candidates":    {vars: map[string]string{"DUET_DISAGG_AUTO_DECODE_CANDIDATES": "17"}, wantErr: "DUET_DISAGG_AUTO_DECODE_CANDIDATES"},
		"negative weight":        {vars: map[string]string{"DUET_DISAGG_WEIGHT_LOAD": "-1"}, wantErr: "DUET_DISAGG_WEIGHT_LOAD"},
		"nan weight":             {vars: map[string]string{"DUET_DISAGG_WEIGHT_LINK": "NaN"}, wantErr: "DUET_DISAGG_WEIGHT_LINK"},
		"inf weight":             {vars: map[string]string{"DUET_DISAGG_WEIGHT_PREFIX": "+Inf"}, wantErr: "DUET_DISAGG_WEIGHT_PREFIX"},
		"word weight":            {vars: map[string]string{"DUET_DISAGG_WEIGHT_KV": "high"}, wantErr: "DUET_DISAGG_WEIGHT_KV"},
		"negative threshold":     {vars: map[string]string{"DUET_DISAGG_PREFILL_THRESHOLD": "-5"}, wantErr: "DUET_DISAGG_PREFILL_THRESHOLD"},
		"too many endpoints":     {vars: map[string]string{"DUET_DISAGG_MAX_PREFILL": "17"}, wantErr: "DUET_DISAGG_MAX_PREFILL"},
		"huge affinity":          {vars: map[string]string{"DUET_DISAGG_AFFINITY_SIZE": "99999999999"}, wantErr: "DUET_DISAGG_AFFINITY_SIZE"},
		"zero max blocks":        {vars: map[string]string{"DUET_DISAGG_AFFINITY_MAX_BLOCKS": "0"}, wantErr: "DUET_DISAGG_AFFINITY_MAX_BLOCKS"},
		"zero block tokens":      {vars: map[string]string{"DUET_DISAGG_BLOCK_TOKENS": "0"}, wantErr: "DUET_DISAGG_BLOCK_TOKENS"},
		"bad bool":               {vars: map[string]string{"DUET_DISAGG_PREFILL_WHEN_UNKNOWN": "maybe"}, wantErr: "DUET_DISAGG_PREFILL_WHEN_UNKNOWN"},
		"fractional threshold":   {vars: map[string]string{"DUET_DISAGG_PREFILL_THRESHOLD": "1.5"}, wantErr: "DUET_DISAGG_PREFILL_THRESHOLD"},
		"negative sample period": {vars: map[string]string{"DUET_DISAGG_LATENCY_SAMPLE": "-1"}, wantErr: "DUET_DISAGG_LATENCY_SAMPLE"},
		"every error reported": {
			vars:    map[string]string{"DUET_DISAGG_WEIGHT_LOAD": "x", "DUET_DISAGG_BLOCK_TOKENS": "y"},
			wantErr: "DUET_DISAGG_BLOCK_TOKENS",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := routerdisagg.ConfigFromEnv(env(tc.vars))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := def
			if tc.want != nil {
				tc.want(&want)
			}
			if got.Weights != want.Weights || got.PrefillThreshold != want.PrefillThreshold ||
				got.PrefillWhenUnknown != want.PrefillWhenUnknown || got.MaxPrefillEndpoints != want.MaxPrefillEndpoints ||
				got.AffinitySize != want.AffinitySize || got.AffinityMaxBlocks != want.AffinityMaxBlocks ||
				got.BlockTokens != want.BlockTokens || got.LatencySampleEvery != want.LatencySampleEvery ||
				!slices.Equal(got.PrefillHardware, want.PrefillHardware) || got.PD != want.PD || got.Auto != want.Auto {
				t.Errorf("config\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*routerdisagg.Config){
		"negative weight":          func(c *routerdisagg.Config) { c.Weights.Locality = -0.1 },
		"negative threshold":       func(c *routerdisagg.Config) { c.PrefillThreshold = -1 },
		"negative endpoints":       func(c *routerdisagg.Config) { c.MaxPrefillEndpoints = -1 },
		"too many endpoints":       func(c *routerdisagg.Config) { c.MaxPrefillEndpoints = 100 },
		"negative affinity":        func(c *routerdisagg.Config) { c.AffinitySize = -1 },
		"zero max blocks":          func(c *routerdisagg.Config) { c.AffinityMaxBlocks = 0 },
		"zero block tokens":        func(c *routerdisagg.Config) { c.BlockTokens = 0 },
		"negative sampling period": func(c *routerdisagg.Config) { c.LatencySampleEvery = -3 },
		"zero value config":        func(c *routerdisagg.Config) { *c = routerdisagg.Config{} },
		"unknown pd mode":          func(c *routerdisagg.Config) { c.PD = "" },
		"negative margin":          func(c *routerdisagg.Config) { c.Auto.Margin = -0.1 },
		"zero min tokens":          func(c *routerdisagg.Config) { c.Auto.MinTokens = 0 },
		"no decode candidates":     func(c *routerdisagg.Config) { c.Auto.DecodeCandidates = 0 },
		"zero output tokens":       func(c *routerdisagg.Config) { c.Auto.Cost.OutputTokens = 0 },
		"zero ingest rate":         func(c *routerdisagg.Config) { c.Auto.Cost.IngestBPS = 0 },
		"negative hop":             func(c *routerdisagg.Config) { c.Auto.Cost.HopOverhead = -time.Second },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := routerdisagg.DefaultConfig()
			edit(&cfg)
			if _, err := routerdisagg.New(cfg); err == nil || !strings.HasPrefix(err.Error(), "router-disagg: ") {
				t.Errorf("New accepted it (or the error %v does not name the plugin)", err)
			}
		})
	}
}

func TestConfigIsCopied(t *testing.T) {
	t.Parallel()
	cfg := routerdisagg.DefaultConfig()
	cfg.PrefillHardware = []string{"a"}
	r, err := routerdisagg.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PrefillHardware[0] = "changed"
	got := r.Config()
	got.PrefillHardware[0] = "changed too"
	if r.Config().PrefillHardware[0] != "a" {
		t.Errorf("the router's configuration changed from outside")
	}
}
