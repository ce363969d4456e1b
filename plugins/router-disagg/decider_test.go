package routerdisagg

import "testing"

func TestDecide(t *testing.T) {
	t.Parallel()
	exo := prefillDecider{Tokens: 1000}
	tests := map[string]struct {
		t              prefillDecider
		prompt, cached int
		want           prefillVerdict
	}{
		"long prompt":                {t: exo, prompt: 5200, want: prefillVerdict{Remote: true, Known: true, Uncached: 5200}},
		"exactly the threshold":      {t: exo, prompt: 1000, want: prefillVerdict{Remote: true, Known: true, Uncached: 1000}},
		"just below":                 {t: exo, prompt: 999, want: prefillVerdict{Known: true, Uncached: 999}},
		"cached prefix brings below": {t: exo, prompt: 5200, cached: 4800, want: prefillVerdict{Known: true, Uncached: 400}},
		"cached prefix stays above":  {t: exo, prompt: 5200, cached: 1024, want: prefillVerdict{Remote: true, Known: true, Uncached: 4176}},
		"cache longer than prompt":   {t: exo, prompt: 500, cached: 640, want: prefillVerdict{Known: true, Uncached: 0}},
		"negative cache":             {t: exo, prompt: 1200, cached: -5, want: prefillVerdict{Remote: true, Known: true, Uncached: 1200}},
		"unknown, engine decides":    {t: prefillDecider{Tokens: 1000, WhenUnknown: true}, want: prefillVerdict{Remote: true}},
		"unknown, local":             {t: exo, want: prefillVerdict{}},
		"threshold zero":             {t: prefillDecider{}, prompt: 1, cached: 1, want: prefillVerdict{Remote: true, Known: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := tc.t.decide(tc.prompt, tc.cached); got != tc.want {
				t.Errorf("Decide(%d, %d) = %+v, want %+v", tc.prompt, tc.cached, got, tc.want)
			}
		})
	}
}
