package stopstring

import (
	"strings"
	"testing"
)

func TestMatcher(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		stops   []string
		pieces  []string
		want    []string // released after each piece
		stopped bool
		flush   string
	}{
		{"no stops", nil, []string{"a", "b"}, []string{"a", "b"}, false, ""},
		{"inside one piece", []string{"END"}, []string{"abcENDdef"}, []string{"abc"}, true, ""},
		{"across pieces", []string{"END"}, []string{"ab", "cE", "N", "Dx"}, []string{"ab", "c", "", ""}, true, ""},
		{"false start released", []string{"END"}, []string{"aE", "Nx", "y"}, []string{"a", "ENx", "y"}, false, ""},
		{"held back at the end", []string{"END"}, []string{"aEN"}, []string{"a"}, false, "EN"},
		{"earliest of several", []string{"xyz", "b"}, []string{"axyzb"}, []string{"a"}, true, ""},
		{"stop is the whole output", []string{"hi"}, []string{"hi"}, []string{""}, true, ""},
		{"multibyte", []string{"é!"}, []string{"caf", "é", "!"}, []string{"caf", "", ""}, true, ""},
		{"empty stop ignored", []string{""}, []string{"a"}, []string{"a"}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := New(c.stops)
			stopped := false
			for i, p := range c.pieces {
				got, s := m.Add(p)
				if i < len(c.want) && got != c.want[i] {
					t.Errorf("piece %d %q: released %q, want %q", i, p, got, c.want[i])
				}
				if s {
					stopped = true
					break
				}
			}
			if stopped != c.stopped {
				t.Errorf("stopped %v, want %v", stopped, c.stopped)
			}
			if f := m.Flush(); f != c.flush {
				t.Errorf("flush %q, want %q", f, c.flush)
			}
		})
	}
}

// FuzzMatcher checks the matcher against the definition: the released text is the concatenation up to the
// first stop string, however the text is cut into pieces.
func FuzzMatcher(f *testing.F) {
	f.Add("hello END world", "END", uint8(3))
	f.Add("ababab", "bab", uint8(1))
	f.Fuzz(func(t *testing.T, text, stop string, cut uint8) {
		if stop == "" {
			return
		}
		want := text
		stopped := false
		if i := strings.Index(text, stop); i >= 0 {
			want, stopped = text[:i], true
		}
		step := int(cut%7) + 1
		m := New([]string{stop})
		var got strings.Builder
		didStop := false
		for i := 0; i < len(text); i += step {
			out, s := m.Add(text[i:min(len(text), i+step)])
			got.WriteString(out)
			if s {
				didStop = true
				break
			}
		}
		if !didStop {
			got.WriteString(m.Flush())
		}
		if got.String() != want || didStop != stopped {
			t.Fatalf("text %q stop %q step %d: got %q (stopped %v), want %q (%v)", text, stop, step, got.String(), didStop, want, stopped)
		}
	})
}
