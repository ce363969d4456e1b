package mlxengine

import (
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// sleepModel is a model whose forward pass takes a fixed time.
type sleepModel struct {
	backend.Model
	d     time.Duration
	calls int
}

func (m *sleepModel) Forward([]backend.Seq) error {
	m.calls++
	time.Sleep(m.d)
	return nil
}

// TestSlowdown: the slowdown option stretches each forward pass to at least factor times its duration, and
// refuses factors outside 1..100.
func TestSlowdown(t *testing.T) {
	t.Parallel()
	inner := &sleepModel{d: 10 * time.Millisecond}
	m := slowModel{Model: inner, factor: 3}
	start := time.Now()
	if err := m.Forward(nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond || inner.calls != 1 {
		t.Errorf("a 10 ms pass slowed down 3× took %v (%d calls), want at least 30 ms", took, inner.calls)
	}
	for _, tc := range []struct {
		v    string
		want float64
		err  string
	}{
		{"2.5", 2.5, ""}, {"1", 1, ""}, {"0.5", 0, "from 1 to 100"}, {"101", 0, "from 1 to 100"}, {"NaN", 0, "from 1 to 100"}, {"fast", 0, "slowdown"},
	} {
		o, err := parseOptions(map[string]string{"slowdown": tc.v})
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("slowdown=%s: %v, want an error saying %q", tc.v, err, tc.err)
		case tc.err == "" && (err != nil || o.slowdown != tc.want):
			t.Errorf("slowdown=%s: %v, %v", tc.v, o.slowdown, err)
		}
	}
	if o, _ := parseOptions(map[string]string{}); o.slowdown != 1 {
		t.Errorf("default slowdown %v, want 1", o.slowdown)
	}
}
