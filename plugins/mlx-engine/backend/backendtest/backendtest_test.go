package backendtest_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// brokenEnv names, in a child process of TestSuiteCatchesBrokenBackends, the fault to inject.
const brokenEnv = "BACKENDTEST_BROKEN"

// TestSuiteCatchesBrokenBackends runs the suite against the pure-Go backend with one contract violation
// injected at a time, each in a child process (a failing suite fails its test), and checks that exactly the
// check covering that part of the contract fails. A suite that passes anything would pass here too otherwise.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if fault := os.Getenv(brokenEnv); fault != "" {
		backendtest.Run(t, broken{fault: fault}, backendtest.Options{Exact: true, Parallel: true, Variants: backendtest.Variants()[:2]})
		return
	}
	if testing.Short() {
		t.Skip("runs the suite three times")
	}
	failed := regexp.MustCompile(`(?m)^    --- FAIL: TestSuiteCatchesBrokenBackends/(\w+) `)
	for _, tc := range []struct{ fault, check string }{
		{"batch-dependent", "BatchedMatchesUnbatched"},
		{"lossy-import", "KVTransferIsExact"},
		{"accepts-empty", "ForwardErrors"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenBackends$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.fault)
			out, err := cmd.CombinedOutput()
			var checks []string
			for _, m := range failed.FindAllStringSubmatch(string(out), -1) {
				checks = append(checks, m[1])
			}
			if err == nil || !slices.Equal(checks, []string{tc.check}) {
				t.Fatalf("suite failed checks %v (exit: %v), want exactly [%s]; output:\n%s", checks, err, tc.check, out)
			}
		})
	}
}

// broken is the pure-Go backend with one fault.
type broken struct{ fault string }

func (b broken) Name() string { return "cpu" }

func (b broken) Load(m *model.Model, opts backend.Options) (backend.Model, error) {
	inner, err := cpu.Backend{}.Load(m, opts)
	if err != nil {
		return nil, err
	}
	return &brokenModel{Model: inner, fault: b.fault}, nil
}

type brokenModel struct {
	backend.Model
	fault string
}

type brokenCache struct {
	backend.Cache
	fault string
}

func (m *brokenModel) NewCache() (backend.Cache, error) {
	c, err := m.Model.NewCache()
	if err != nil {
		return nil, err
	}
	return &brokenCache{Cache: c, fault: m.fault}, nil
}

func (m *brokenModel) Forward(batch []backend.Seq) error {
	inner := make([]backend.Seq, len(batch))
	for i, s := range batch {
		if len(s.Tokens) == 0 && m.fault == "accepts-empty" {
			return nil
		}
		inner[i] = s
		if c, ok := s.Cache.(*brokenCache); ok {
			inner[i].Cache = c.Cache
		}
	}
	if err := m.Model.Forward(inner); err != nil {
		return err
	}
	if m.fault == "batch-dependent" && len(batch) > 1 {
		for _, s := range batch {
			if s.Logits != nil {
				s.Logits[0] += 1e-3
			}
		}
	}
	return nil
}

func (c *brokenCache) Clone(n int) (backend.Cache, error) {
	out, err := c.Cache.Clone(n)
	if err != nil {
		return nil, err
	}
	return &brokenCache{Cache: out, fault: c.fault}, nil
}

func (c *brokenCache) ImportKV(layer, from int, keys, values []byte) error {
	if c.fault == "lossy-import" && len(keys) > 0 {
		keys = append([]byte(nil), keys...)
		keys[len(keys)-1] ^= 1
	}
	return c.Cache.ImportKV(layer, from, keys, values)
}
