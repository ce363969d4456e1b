// Package alias maps the model names clients ask for onto the models a cluster serves: coding agents ask for
// their vendor's models by name (Claude Code for claude-opus-5-5 and a small, fast claude-haiku-*; Codex for
// gpt-5-codex), and an operator points each name at a model duet serves (--model-alias NAME=MODEL, or
// PUT /admin/v1/model-aliases).
//
// An alias resolves once: its target is a served model, never another alias, so a name means one model and
// a table cannot loop. A name that is both an alias and a served model resolves to the alias's target: the
// operator said so.
package alias

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// Bounds of a table: aliases are a short list an operator writes by hand.
const (
	MaxAliases = 256
	MaxNameLen = 256
)

// Table is the aliases in use, safe for concurrent use; the zero value has none.
type Table struct {
	mu sync.RWMutex
	m  map[string]string
}

// New returns a table of m, which must be Valid.
func New(m map[string]string) *Table { return &Table{m: clone(m)} }

// Resolve returns the model name stands for: its alias's target, or name itself.
func (t *Table) Resolve(name string) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if to, ok := t.m[name]; ok {
		return to
	}
	return name
}

// All returns a copy of the aliases.
func (t *Table) All() map[string]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return clone(t.m)
}

// Names returns the aliases' names, sorted.
func (t *Table) Names() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.m))
	for k := range t.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Set replaces every alias with m, after checking it.
func (t *Table) Set(m map[string]string) error {
	if err := Valid(m); err != nil {
		return err
	}
	t.mu.Lock()
	t.m = clone(m)
	t.mu.Unlock()
	return nil
}

// Parse reads NAME=MODEL entries (the --model-alias flag's values). A name given twice is an error.
func Parse(entries []string) (map[string]string, error) {
	m := map[string]string{}
	for _, e := range entries {
		name, model, ok := strings.Cut(e, "=")
		name, model = strings.TrimSpace(name), strings.TrimSpace(model)
		if !ok || name == "" || model == "" {
			return nil, fmt.Errorf("model alias %q: want NAME=MODEL", e)
		}
		if prev, dup := m[name]; dup {
			return nil, fmt.Errorf("model alias %q is given twice (=%s and =%s)", name, prev, model)
		}
		m[name] = model
	}
	return m, Valid(m)
}

// Valid checks a table: at most MaxAliases entries; names and targets of 1 to MaxNameLen printable
// characters; no alias of itself, and no target that is an alias.
func Valid(m map[string]string) error {
	if len(m) > MaxAliases {
		return fmt.Errorf("%d model aliases; at most %d", len(m), MaxAliases)
	}
	for _, name := range sortedKeys(m) {
		to := m[name]
		for _, s := range []string{name, to} {
			if err := validName(s); err != nil {
				return fmt.Errorf("model alias %q=%q: %v", name, to, err)
			}
		}
		if name == to {
			return fmt.Errorf("model alias %q names itself", name)
		}
		if _, chained := m[to]; chained {
			return fmt.Errorf("model alias %q=%q: %q is an alias too; point every alias at a served model", name, to, to)
		}
	}
	return nil
}

func validName(s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("a name must have 1 to %d bytes", MaxNameLen)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == ',' || r == '=' {
			return fmt.Errorf("%q: a name has no spaces, control characters, commas or =", s)
		}
	}
	return nil
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
