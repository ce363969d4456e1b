package decider

import "testing"

func TestDecide(t *testing.T) {
	t.Parallel()
	exo := Threshold{Tokens: 1000}
	tests := map[string]struct {
		t              Threshold
		prompt, cached int
		want           Verdict
	}{
		"long prompt":                {t: exo, prompt: 5200, want: Verdict{Remote: true, Known: true, Uncached: 5200}},
		"exactly the threshold":      {t: exo, prompt: 1000, want: Verdict{Remote: true, Known: true, Uncached: 1000}},
		"just below":                 {t: exo, prompt: 999, want: Verdict{Known: true, Uncached: 999}},
		"cached prefix brings below": {t: exo, prompt: 5200, cached: 4800, want: Verdict{Known: true, Uncached: 400}},
		"cached prefix stays above":  {t: exo, prompt: 5200, cached: 1024, want: Verdict{Remote: true, Known: true, Uncached: 4176}},
		"cache longer than prompt":   {t: exo, prompt: 500, cached: 640, want: Verdict{Known: true, Uncached: 0}},
		"negative cache":             {t: exo, prompt: 1200, cached: -5, want: Verdict{Remote: true, Known: true, Uncached: 1200}},
		"unknown, engine decides":    {t: Threshold{Tokens: 1000, WhenUnknown: true}, want: Verdict{Remote: true}},
		"unknown, local":             {t: exo, want: Verdict{}},
		"threshold zero":             {t: Threshold{}, prompt: 1, cached: 1, want: Verdict{Remote: true, Known: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tc.t.Decide(tc.prompt, tc.cached); got != tc.want {
				t.Errorf("Decide(%d, %d) = %+v, want %+v", tc.prompt, tc.cached, got, tc.want)
			}
		})
	}
}
