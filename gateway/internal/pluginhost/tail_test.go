package pluginhost

import (
	"fmt"
	"strings"
	"testing"
)

func TestTail(t *testing.T) {
	t.Parallel()
	tl := NewTail(3, 10)
	fmt.Fprint(tl, "one\ntwo\nthree\nfour")
	fmt.Fprint(tl, " and more than ten bytes\nfive\n")
	got := strings.Join(tl.Lines(), "|")
	if want := "three|four and m|five"; got != want {
		t.Errorf("lines %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		input string
		max   int
		want  string
	}{
		{"last lines when no panic", "a\nb\nc\nd\n", 4, "c\nd"},
		{"from the panic on", "log line\npanic: boom\n\ngoroutine 1 [running]:\nmain.f()\n", 40, "panic: boom\n\ngoroutine 1 [running]:"},
		{"panic first", "panic: boom\nmain.f()\n", 100, "panic: boom\nmain.f()"},
		{"fatal error", "x\nfatal error: out of memory\n", 100, "fatal error: out of memory"},
		{"empty", "", 10, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := NewTail(100, 1000)
			fmt.Fprint(tl, c.input)
			if got := tl.Summary(c.max); got != c.want {
				t.Errorf("Summary(%d) = %q, want %q", c.max, got, c.want)
			}
		})
	}
}
