package alias

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		entries []string
		want    map[string]string
		err     string
	}{
		{"none", nil, map[string]string{}, ""},
		{"Claude Code's models onto one", []string{"claude-opus-5-5=embedded", " claude-haiku-5-5 = embedded "},
			map[string]string{"claude-opus-5-5": "embedded", "claude-haiku-5-5": "embedded"}, ""},
		{"a path as the target", []string{"gpt-5-codex=/models/llama"}, map[string]string{"gpt-5-codex": "/models/llama"}, ""},
		{"no =", []string{"claude"}, nil, "want NAME=MODEL"},
		{"no name", []string{"=embedded"}, nil, "want NAME=MODEL"},
		{"no model", []string{"claude="}, nil, "want NAME=MODEL"},
		{"twice", []string{"a=m", "a=n"}, nil, `"a" is given twice`},
		{"itself", []string{"m=m"}, nil, "names itself"},
		{"a chain", []string{"a=b", "b=m"}, nil, `"b" is an alias too`},
		{"a space", []string{"a b=m"}, nil, "no spaces"},
		{"too long", []string{strings.Repeat("x", MaxNameLen+1) + "=m"}, nil, "1 to 256 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(c.entries)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	tab := New(map[string]string{"claude-opus-5-5": "embedded"})
	if got := tab.Resolve("claude-opus-5-5"); got != "embedded" {
		t.Errorf("Resolve(alias) = %q", got)
	}
	if got := tab.Resolve("embedded"); got != "embedded" {
		t.Errorf("Resolve(served) = %q", got)
	}
	if err := tab.Set(map[string]string{"a": "b", "b": "c"}); err == nil {
		t.Error("Set took a chain")
	}
	if got := tab.Names(); !reflect.DeepEqual(got, []string{"claude-opus-5-5"}) {
		t.Errorf("a refused Set changed the table: %v", got)
	}
	if err := tab.Set(map[string]string{"z": "m", "a": "m"}); err != nil {
		t.Fatal(err)
	}
	if got := tab.Names(); !reflect.DeepEqual(got, []string{"a", "z"}) {
		t.Errorf("Names = %v", got)
	}
	all := tab.All()
	all["x"] = "y"
	if tab.Resolve("x") != "x" {
		t.Error("All returned the table itself")
	}
	var zero Table
	if zero.Resolve("m") != "m" || len(zero.All()) != 0 {
		t.Error("the zero table has aliases")
	}
}
