package bench

import (
	"bytes"
	"testing"
)

// TestProgressPlain checks the output off a terminal: a numbered line per counted step, an unnumbered one for
// what happens between steps, lines that stay, and nothing at all with --quiet.
func TestProgressPlain(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := newProgress(&b, 2, false)
	p.step("prefill_alone: pp=%d", 2048)
	p.advance()
	p.note("linking %s", "a → b")
	p.logf("a warning")
	p.update("a label that changes every second")
	p.step("disaggregated: pp=%d", 2048)
	p.advance()
	p.finish()
	want := "[1/2] prefill_alone: pp=2048\n  · linking a → b\na warning\n[2/2] disaggregated: pp=2048\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}

	b.Reset()
	q := newProgress(&b, 1, true)
	q.step("x")
	q.note("y")
	q.logf("z")
	q.advance()
	q.finish()
	if b.Len() != 0 {
		t.Errorf("--quiet printed %q", b.String())
	}
}
