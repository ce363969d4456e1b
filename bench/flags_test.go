package bench

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParsePDErrors: every bad command line is refused with an error that names the flag and says what to
// give instead.
func TestParsePDErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want []string // substrings of the error
	}{
		{"no target", []string{"--pp", "2048", "--tg", "128"}, []string{"give --url", "--local"}},
		{"both targets", []string{"--local", "--url", "http://x:8000", "--pp", "2048", "--tg", "128"}, []string{"--url and --local exclude each other"}},
		{"url without a scheme", []string{"--url", "node-a:8000", "--pp", "2048", "--tg", "128"}, []string{`--url "node-a:8000": want http://`}},
		{"no pp", []string{"--local", "--tg", "128"}, []string{"--pp is required"}},
		{"no tg", []string{"--local", "--pp", "2048"}, []string{"--tg is required"}},
		{"pp not a number", []string{"--local", "--pp", "2k", "--tg", "128"}, []string{`invalid value "2k" for flag -pp`, `"2k" is not an integer`}},
		{"short pp", []string{"--local", "--pp", "2048,512", "--tg", "128"}, []string{"--pp 512 must be > 1000", "--allow-short"}},
		{"pp 1000 is not > 1000", []string{"--local", "--pp", "1000", "--tg", "128"}, []string{"--pp 1000 must be > 1000"}},
		{"tiny pp even with allow-short", []string{"--local", "--pp", "32", "--tg", "8", "--allow-short"}, []string{"--pp 32: prompts need at least 64 tokens"}},
		{"tg 1", []string{"--local", "--pp", "2048", "--tg", "1"}, []string{"--tg 1: generation lengths must be at least 2"}},
		{"repeat 0", []string{"--local", "--pp", "2048", "--tg", "128", "--repeat", "0"}, []string{"--repeat 0: must be at least 1"}},
		{"negative warmup", []string{"--local", "--pp", "2048", "--tg", "128", "--warmup", "-1"}, []string{"--warmup -1: must not be negative"}},
		{"negative cooldown", []string{"--local", "--pp", "2048", "--tg", "128", "--cooldown", "-1s"}, []string{"--cooldown must not be negative"}},
		{"bad engine option", []string{"--local", "--pp", "2048", "--tg", "128", "--prefill-opt", "backend"}, []string{`"backend": want key=value`}},
		{"engine options without --local", []string{"--url", "http://x:8000", "--pp", "2048", "--tg", "128", "--decode-opt", "backend=cpu"}, []string{"--prefill-opt and --decode-opt configure the instances --local or --create load"}},
		{"instances with --local", []string{"--local", "--pp", "2048", "--tg", "128", "--prefill-instance", "p"}, []string{"pick instances of a running cluster (--url)"}},
		{"one instance on both sides", []string{"--url", "http://x:8000", "--pp", "2048", "--tg", "128", "--prefill-instance", "a", "--decode-instance", "a"}, []string{`name the same instance "a"`}},
		{"cpus malformed", []string{"--local", "--pp", "2048", "--tg", "128", "--cpus", "0"}, []string{`--cpus "0": want two CPU numbers`}},
		{"cpus the same", []string{"--local", "--pp", "2048", "--tg", "128", "--cpus", "1,1"}, []string{"need different CPUs"}},
		{"cpus not numbers", []string{"--local", "--pp", "2048", "--tg", "128", "--cpus", "a,b"}, []string{`"a" is not a CPU number`}},
		{"short isolation prompt", []string{"--local", "--pp", "2048", "--tg", "128", "--isolation-pp", "500"}, []string{"--isolation-pp 500 must be > 1000"}},
		{"no isolation prompts", []string{"--local", "--pp", "2048", "--tg", "128", "--isolation-prompts", "0"}, []string{"--isolation-prompts 0: must be at least 1"}},
		{"positional argument", []string{"--local", "--pp", "2048", "--tg", "128", "extra"}, []string{`unexpected arguments: ["extra"]`}},
		{"unknown flag", []string{"--local", "--pp", "2048", "--tg", "128", "--nope"}, []string{"flag provided but not defined: -nope"}},
		{"several problems at once", []string{"--local", "--pp", "10", "--tg", "0"}, []string{"--pp 10", "--tg 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePD(c.args, io.Discard)
			if err == nil {
				t.Fatalf("ParsePD(%q) accepted it", c.args)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParsePD(%q) = %q, want it to say %q", c.args, err, w)
				}
			}
		})
	}
}

func TestParsePD(t *testing.T) {
	t.Parallel()
	o, err := ParsePD([]string{"--local", "--pp", "2000,8000", "--pp", "4096", "--tg", "64", "--repeat", "2",
		"--prefill-opt", "backend=mlx", "--decode-opt", "backend=cpu,threads=1", "--json-out", "x.json", "--cooldown", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.PP, []int{2000, 8000, 4096}) || !reflect.DeepEqual(o.TG, []int{64}) || o.Repeat != 2 || o.Out != "x.json" {
		t.Errorf("parsed %+v", o)
	}
	if o.Model != "pd-bench" || o.IsolationPP != 4096 || o.IsolationPrompts != 2 || time.Duration(o.IsolationIdle) != 3*time.Second || !o.Isolation {
		t.Errorf("defaults: model %q, isolation %v %d×%d for %s", o.Model, o.Isolation, o.IsolationPrompts, o.IsolationPP, time.Duration(o.IsolationIdle))
	}
	if !reflect.DeepEqual(o.PrefillOpts, map[string]string{"backend": "mlx"}) || !reflect.DeepEqual(o.DecodeOpts, map[string]string{"backend": "cpu", "threads": "1"}) {
		t.Errorf("engine options %v %v", o.PrefillOpts, o.DecodeOpts)
	}
	if got := o.pairs(); !reflect.DeepEqual(got, [][2]int{{2000, 64}, {8000, 64}, {4096, 64}}) {
		t.Errorf("pairs %v", got)
	}
	if got := o.threshold(); got != 1000 {
		t.Errorf("threshold %d, want exo's 1000", got)
	}
	if _, err := ParsePD([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestPairsAndThreshold(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    PDOptions
		want [][2]int
		thr  int
	}{
		{"equal lengths pair up in order (exo's tandem)", PDOptions{PP: []int{2048, 8192}, TG: []int{128, 32}}, [][2]int{{2048, 128}, {8192, 32}}, 1000},
		{"different lengths combine", PDOptions{PP: []int{2048, 8192}, TG: []int{16}}, [][2]int{{2048, 16}, {8192, 16}}, 1000},
		{"all combinations", PDOptions{PP: []int{2048, 8192}, TG: []int{16, 32}, AllCombinations: true}, [][2]int{{2048, 16}, {2048, 32}, {8192, 16}, {8192, 32}}, 1000},
		{"short prompts lower the threshold", PDOptions{PP: []int{64, 200}, TG: []int{8}, AllowShort: true}, [][2]int{{64, 8}, {200, 8}}, 32},
		{"so does a short isolation prompt", PDOptions{PP: []int{4000}, TG: []int{8}, Isolation: true, IsolationPP: 500}, [][2]int{{4000, 8}}, 250},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.o.pairs(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("pairs %v, want %v", got, c.want)
			}
			if got := c.o.threshold(); got != c.thr {
				t.Errorf("threshold %d, want %d", got, c.thr)
			}
		})
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	got, err := ParseMix("100:0.7, 4000:0.3")
	if err != nil || !reflect.DeepEqual(got, []MixItem{{100, 0.7}, {4000, 0.3}}) {
		t.Errorf("ParseMix = %v, %v", got, err)
	}
	got, err = ParseMix("10:1,20:3,30")
	if err != nil || len(got) != 3 || got[0].Weight != 0.2 || got[1].Weight != 0.6 || got[2].Weight != 0.2 {
		t.Errorf("relative weights: %v, %v", got, err)
	}
	for _, c := range []struct{ in, want string }{
		{"", "the mix is empty"},
		{",", "the mix is empty"},
		{"abc:1", `"abc:1": the prompt length must be a positive integer`},
		{"0:1", `"0:1": the prompt length must be a positive integer`},
		{"100:0", `"100:0": the weight must be a positive number`},
		{"100:-1", "the weight must be a positive number"},
		{"100:x", "the weight must be a positive number"},
		{"100:NaN", "the weight must be a positive number"},
		{"100:Inf", "the weight must be a positive number"},
	} {
		if _, err := ParseMix(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMix(%q) = %v, want an error saying %q", c.in, err, c.want)
		}
	}
	if n := pickLength(got, 0.1); n != 10 {
		t.Errorf("pickLength(0.1) = %d", n)
	}
	if n := pickLength(got, 0.5); n != 20 {
		t.Errorf("pickLength(0.5) = %d", n)
	}
	if n := pickLength(got, 0.999999); n != 30 {
		t.Errorf("pickLength(0.999999) = %d", n)
	}
}

func TestParseOtherErrors(t *testing.T) {
	t.Parallel()
	parsers := map[string]func([]string) error{
		"load":    func(a []string) error { _, err := ParseLoad(a, io.Discard); return err },
		"kvwire":  func(a []string) error { _, err := ParseKVWire(a, io.Discard); return err },
		"gateway": func(a []string) error { _, err := ParseGateway(a, io.Discard); return err },
	}
	for _, c := range []struct {
		bench, name string
		args        []string
		want        string
	}{
		{"load", "no target", []string{"--clients", "4"}, "give --url"},
		{"load", "bad mix", []string{"--local", "--mix", "100:0.5,x"}, `--mix "100:0.5,x": "x": the prompt length must be a positive integer`},
		{"load", "no clients", []string{"--local", "--clients", "0"}, "--clients 0: must be at least 1"},
		{"load", "no tokens", []string{"--local", "--max-tokens", "0"}, "--max-tokens 0: must be at least 1"},
		{"load", "zero duration", []string{"--local", "--duration", "0s"}, "--duration and --timeout must be positive"},
		{"load", "engine without --local", []string{"--url", "http://x:1", "--engine", "echo"}, "--engine and --engine-opt configure the node --local starts"},
		{"load", "bad engine option", []string{"--local", "--engine-opt", "=1"}, `"=1": want key=value`},
		{"kvwire", "no mode", []string{}, "give one of --local"},
		{"kvwire", "two modes", []string{"--local", "--serve", ":7450"}, "give one of --local"},
		{"kvwire", "bad address", []string{"--connect", "prefill-host"}, `--connect "prefill-host"`},
		{"kvwire", "last port", []string{"--serve", ":65535"}, "raw TCP uses the next one"},
		{"kvwire", "bad dtype", []string{"--local", "--dtype", "int8"}, "--dtype: want bfloat16, float16 or float32"},
		{"kvwire", "no layers", []string{"--local", "--layers", "0"}, "--layers 0: want 1 to 1024"},
		{"kvwire", "huge chunk", []string{"--local", "--chunk-tokens", "100000"}, "at most 64 MiB per tensor"},
		{"kvwire", "no tokens", []string{"--local", "--tokens", "0"}, "--tokens 0"},
		{"kvwire", "no repeats", []string{"--local", "--repeat", "0"}, "--repeat must be at least 1"},
		{"gateway", "no requests", []string{"--requests", "0"}, "--requests 0: must be at least 1"},
		{"gateway", "negative warmup", []string{"--warmup", "-5"}, "--warmup -5"},
		{"gateway", "streams without count", []string{"--streams", "0"}, "--streams must be at least 1"},
		{"gateway", "positional", []string{"now"}, `unexpected arguments: ["now"]`},
	} {
		t.Run(c.bench+"/"+c.name, func(t *testing.T) {
			err := parsers[c.bench](c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("duet bench %s %q: %v, want an error saying %q", c.bench, c.args, err, c.want)
			}
		})
	}
}

func TestParseLoadDefaults(t *testing.T) {
	t.Parallel()
	o, err := ParseLoad([]string{"--local", "--engine", "echo", "--engine-opt", "token_delay=1ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Model != "echo" || o.Clients != 8 || len(o.Mix) != 2 || o.EngineOpts["token_delay"] != "1ms" {
		t.Errorf("defaults %+v", o)
	}
	o, err = ParseLoad([]string{"--local"}, io.Discard)
	if err != nil || o.Engine != "mlx-engine" || o.Model != "embedded" {
		t.Errorf("defaults with the MLX engine: %+v %v", o, err)
	}
}
