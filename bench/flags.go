package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// intList is a flag of integers, comma-separated and/or repeated (exo's --pp 2048,8192 and --pp 2048 --pp 8192).
type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.Atoi(part)
		if err != nil {
			return fmt.Errorf("%q is not an integer", part)
		}
		*l = append(*l, v)
	}
	return nil
}

// options is a flag of engine load options, key=value, comma-separated and/or repeated; a later key wins.
type options map[string]string

func (o options) String() string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + o[k]
	}
	return strings.Join(parts, ",")
}

func (o options) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q: want key=value", kv)
		}
		o[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}

// MixItem is one prompt length of a load mix and the share of requests that have it.
type MixItem struct {
	Tokens int     `json:"tokens"`
	Weight float64 `json:"weight"`
}

// ParseMix reads a prompt-length mix, "tokens:weight,..." (e.g. 100:0.7,4000:0.3); a bare length weighs 1.
// Weights are relative: they are normalised to sum to 1.
func ParseMix(s string) ([]MixItem, error) {
	var out []MixItem
	total := 0.0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ts, ws, hasWeight := strings.Cut(part, ":")
		n, err := strconv.Atoi(strings.TrimSpace(ts))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: the prompt length must be a positive integer", part)
		}
		w := 1.0
		if hasWeight {
			w, err = strconv.ParseFloat(strings.TrimSpace(ws), 64)
			if err != nil || !(w > 0) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("%q: the weight must be a positive number", part)
			}
		}
		out = append(out, MixItem{Tokens: n, Weight: w})
		total += w
	}
	if len(out) == 0 {
		return nil, errors.New("the mix is empty: give tokens:weight pairs, e.g. 100:0.7,4000:0.3")
	}
	for i := range out {
		out[i].Weight /= total
	}
	return out, nil
}

// parseCPUs reads --cpus: two CPU numbers for the prefill and the decode node, or "" / "none" for no pinning.
func parseCPUs(s string) ([2]int, bool, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return [2]int{-1, -1}, false, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 2 {
		return [2]int{}, false, fmt.Errorf("--cpus %q: want two CPU numbers, prefill,decode (e.g. 0,1), or none", s)
	}
	var out [2]int
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return [2]int{}, false, fmt.Errorf("--cpus %q: %q is not a CPU number", s, p)
		}
		out[i] = v
	}
	if out[0] == out[1] {
		return [2]int{}, false, fmt.Errorf("--cpus %q: the two nodes need different CPUs", s)
	}
	return out, true, nil
}

// newFlagSet is a flag set for one subcommand, whose usage starts with a line of what it does.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("duet bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\nUsage: duet bench %s [flags]\n\n", usage, name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}
