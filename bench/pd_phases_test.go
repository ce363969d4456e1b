package bench

import (
	"slices"
	"testing"
)

// TestPDPhases checks the phase table's shape: names unique, each phase measures pairs or runs steps of its
// own, exo's phases first in the summary, and the progress total matches what runs for each kind of setup.
func TestPDPhases(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, ph := range pdPhases {
		if seen[ph.Name] || ph.Name == "" {
			t.Errorf("phase name %q is empty or repeated", ph.Name)
		}
		seen[ph.Name] = true
		if (ph.Target == nil) == (ph.Run == nil) {
			t.Errorf("phase %s: want exactly one of Target and Run", ph.Name)
		}
		if ph.Run != nil && ph.Steps < 1 {
			t.Errorf("phase %s: a Run phase takes at least one progress step", ph.Name)
		}
	}
	if !slices.Equal(phaseOrder[:3], []string{PhaseDisaggregated, PhaseDecodeAlone, PhasePrefillAlone}) {
		t.Errorf("summary order %v does not start with exo's", phaseOrder)
	}
	// exo's execution order: prefill_alone, disaggregated, decode_alone; auto, which needs both instances and
	// no link, runs between the last two (decode_alone unloads the prefill instance).
	var pairPhases, exos []string
	for _, ph := range pdPhases {
		if ph.Target != nil {
			pairPhases = append(pairPhases, ph.Name)
			if ph.Name != PhaseAuto {
				exos = append(exos, ph.Name)
			}
		}
	}
	if !slices.Equal(exos, []string{PhasePrefillAlone, PhaseDisaggregated, PhaseDecodeAlone}) {
		t.Errorf("exo's pair phases run in the order %v", exos)
	}
	if !slices.Equal(pairPhases, []string{PhasePrefillAlone, PhaseDisaggregated, PhaseAuto, PhaseDecodeAlone}) {
		t.Errorf("pair phases run in the order %v", pairPhases)
	}

	base := PDOptions{PP: []int{2048, 4096}, TG: []int{64}, Repeat: 2, Warmup: 1, CompareBaseline: true, Isolation: true}
	per := 2*2 + 1
	for _, c := range []struct {
		name      string
		edit      func(*PDOptions, *pdBench)
		wantSteps int
	}{
		{"local, everything", func(*PDOptions, *pdBench) {}, 3*per + 3},
		{"no baseline", func(o *PDOptions, _ *pdBench) { o.CompareBaseline = false }, 2*per + 3},
		{"no isolation", func(o *PDOptions, _ *pdBench) { o.Isolation = false }, 3 * per},
		{"auto", func(o *PDOptions, _ *pdBench) { o.Auto = true }, 4*per + 3},
		// A running cluster's instances, the decode one able to prefill, the prefill one not the benchmark's:
		// disaggregated, the isolation windows with the link, and the case without P/D recorded as skipped.
		{"existing", func(_ *PDOptions, b *pdBench) { b.prefillAloneSkip, b.unloadable = "role both", false }, per + 2 + 1},
	} {
		o := base
		b := &pdBench{unloadable: true}
		c.edit(&o, b)
		b.o = o
		if got := b.steps(); got != c.wantSteps {
			t.Errorf("%s: %d progress steps, want %d", c.name, got, c.wantSteps)
		}
	}
}
