package sampling

import (
	"math"
	"testing"
)

func TestExp32(t *testing.T) {
	t.Parallel()
	worst := 0.0
	for x := float32(-86); x <= 0; x += 0.001 {
		got, want := float64(exp32(x)), math.Exp(float64(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Errorf("worst relative error %g", worst)
	}
	if exp32(-100) != 0 || exp32(0) != 1 {
		t.Errorf("exp32(-100)=%g exp32(0)=%g", exp32(-100), exp32(0))
	}
}
