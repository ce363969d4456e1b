package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// `duet bench pd` is exo's bench/prefill_decode_bench.py for duet: the same phases, options and JSON fields
// where they mean the same thing, with what exo's lacks (TTFT and inter-token latency percentiles from the
// stream, KV bytes and transfer time, decode isolation).
//
// Requests are steered with what duet's API already has, no request extension, following exo's order of
// instance lifecycles. The phases are the table pdPhases (pd_run.go), run in order, each a Setup that brings
// the pair to the state it measures and a run:
//   - prefill_alone: the prefill instance alone (the decode instance is not up yet), requests sent to its
//     node's gateway. With the router-disagg router a second instance of the model would be offered as a
//     prefill endpoint as soon as it exists, link or no link.
//   - disaggregated: the decode instance up, and an instance link that makes the prefill instance prefill-only
//     (the router never decodes on it) and the decode instance's partner; requests sent to the decode node's
//     gateway are decoded there and their long prompts prefilled remotely. The isolation case's idle and
//     with_pd windows follow, with the link in place.
//   - decode_alone (--compare-baseline): the link removed and, as exo does, the prefill instance unloaded;
//     requests sent to the decode node's gateway. The isolation window without_pd follows.
//
// Every run checks timings.route and timings.prefill_source: a run that was not placed as its phase means is
// kept in the JSON with its problem and left out of the summary.
//
// To add a phase (e.g. one where the router decides P/D by itself): add a pdPhase to pdPhases where the
// cluster's state suits it, with its name, a Skip for the options or instances it cannot run with, a Setup
// made of the ensure methods (and any call of the cluster API the phase needs, undone by a later phase's
// Setup or by close), and a Target (where its requests go and where they must run: measured per (pp, tg) pair
// like exo's phases, into the runs, summary, table and chart) or a Run with its Steps. A pair phase appears in
// the table after exo's three, in table order; a speedup of its own goes in summarize.

// Phase names, as exo's JSON has them.
const (
	PhasePrefillAlone  = "prefill_alone"
	PhaseDisaggregated = "disaggregated"
	PhaseDecodeAlone   = "decode_alone"
	// PhaseAuto is duet's own: both instances up, no link, and the decode node's router deciding by itself
	// (router-disagg-auto: remote prefill or not, and where to decode, by estimated time).
	PhaseAuto = "auto"
)

// phaseOrder is the order of the summary table: exo's (disaggregated, decode_alone, prefill_alone), then any
// other pair phase of pdPhases in table order.
var phaseOrder = summaryOrder()

func summaryOrder() []string {
	out := []string{PhaseDisaggregated, PhaseDecodeAlone, PhasePrefillAlone}
	for _, ph := range pdPhases {
		if ph.Target != nil && !slices.Contains(out, ph.Name) {
			out = append(out, ph.Name)
		}
	}
	return out
}

// Seconds is a duration that JSON shows in seconds.
type Seconds time.Duration

// MarshalJSON writes the duration in seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(s).Seconds(), 'f', -1, 64), nil
}

// UnmarshalJSON reads seconds.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseFloat(string(b), 64)
	*s = Seconds(time.Duration(v * float64(time.Second)))
	return err
}

// PDOptions are `duet bench pd`'s flags. They go into the JSON report as given (keys excepted).
type PDOptions struct {
	URL      string `json:"url,omitempty"`
	APIKey   string `json:"-"`
	AdminKey string `json:"-"`
	Local    bool   `json:"local"`

	Model        string `json:"model"`
	PrefillModel string `json:"prefill_model,omitempty"`

	PP              []int   `json:"pp"`
	TG              []int   `json:"tg"`
	AllCombinations bool    `json:"all_combinations"`
	Repeat          int     `json:"repeat"`
	Warmup          int     `json:"warmup"`
	Cooldown        Seconds `json:"cooldown_s"`
	CompareBaseline bool    `json:"compare_baseline"`
	Auto            bool    `json:"auto"`
	AllowShort      bool    `json:"allow_short"`

	PrefillInstance string `json:"prefill_instance,omitempty"`
	DecodeInstance  string `json:"decode_instance,omitempty"`
	PrefillNode     string `json:"prefill_node,omitempty"`
	DecodeNode      string `json:"decode_node,omitempty"`
	AllowUnload     bool   `json:"allow_unload,omitempty"`
	Create          bool   `json:"create,omitempty"`

	PrefillOpts map[string]string `json:"prefill_opts,omitempty"`
	DecodeOpts  map[string]string `json:"decode_opts,omitempty"`
	CPUs        string            `json:"cpus,omitempty"`

	Isolation        bool    `json:"isolation"`
	IsolationPP      int     `json:"isolation_pp,omitempty"`
	IsolationPrompts int     `json:"isolation_prompts,omitempty"`
	IsolationIdle    Seconds `json:"isolation_idle_s,omitempty"`

	Timeout       Seconds `json:"timeout_s"`
	SettleTimeout Seconds `json:"settle_timeout_s"`

	Out    string `json:"-"`
	SVG    string `json:"-"`
	DryRun bool   `json:"-"`
	Quiet  bool   `json:"-"`
	// Exe is the duet binary local nodes run (default: this one).
	Exe string `json:"-"`
}

const pdUsage = `Benchmark disaggregated prefill/decode as exo's bench/prefill_decode_bench.py does: for each prompt length
(--pp) and generation length (--tg), phase prefill_alone (the prefill instance alone), disaggregated (two
instances on two nodes linked with POST /v1/instance-links, the long prompt prefilled on one and decoded on the
other) and, with --compare-baseline, decode_alone; plus TTFT and inter-token latency percentiles per phase, KV
bytes and transfer time, and decode isolation (a running stream's inter-token latency while long prompts arrive,
with and without P/D). Against a running cluster (--url) or one it starts on loopback (--local).

Examples:
  duet bench pd --local --pp 2000,8000 --tg 64 --repeat 2 --compare-baseline --out pd.json --svg pd.svg
  duet bench pd --local --prefill-opt backend=mlx --decode-opt backend=cpu --pp 8000 --tg 128
  duet bench pd --url http://node-a:8000 --create --model mlx-community/Llama-3.1-8B-Instruct-4bit \
      --prefill-node spark --decode-node m3 --pp 8192 --tg 128 --compare-baseline
  duet bench pd --url http://node-a:8000 --prefill-instance spark-0 --decode-instance m3-0 --pp 8192 --tg 128`

// ParsePD reads `duet bench pd`'s flags.
func ParsePD(args []string, stderr io.Writer) (PDOptions, error) {
	o := PDOptions{PrefillOpts: map[string]string{}, DecodeOpts: map[string]string{}}
	fs := newFlagSet("pd", pdUsage, stderr)
	var pp, tg intList
	var cooldown, timeout, settle, idle time.Duration
	prefillOpts, decodeOpts := options(o.PrefillOpts), options(o.DecodeOpts)
	fs.StringVar(&o.URL, "url", "", "a gateway of the cluster to benchmark, e.g. http://127.0.0.1:8000")
	fs.StringVar(&o.APIKey, "api-key", os.Getenv("DUET_API_KEY"), "API key (Bearer) [DUET_API_KEY]")
	fs.StringVar(&o.AdminKey, "admin-key", os.Getenv("DUET_ADMIN_KEY"), "admin key for the cluster API's writes (links, unloading); default: the API key [DUET_ADMIN_KEY]")
	fs.BoolVar(&o.Local, "local", false, "start a cluster of two duet nodes on loopback (127.0.0.1 and 127.0.0.2) for the benchmark and stop it after")
	fs.StringVar(&o.Model, "model", "", "model of the instances: with --local, pd-bench (default), tiny, bench100m (generated), embedded, a directory or a Hugging Face id; with --url, the model id to pick instances of (default: any model with instances on two nodes)")
	fs.StringVar(&o.PrefillModel, "prefill-model", "", "model of the prefill instance, when it differs (another quantization of the same model); default --model")
	fs.Var(&pp, "pp", "prompt lengths in tokens, comma-separated or repeated; each > 1000 (remote prefill starts at 1000 uncached tokens) unless --allow-short (required)")
	fs.Var(&tg, "tg", "generation lengths in tokens, comma-separated or repeated, each ≥ 2 (required)")
	fs.BoolVar(&o.AllCombinations, "all-combinations", false, "every pp × tg pair even when the lists have equal lengths (otherwise they pair up in order, as exo does)")
	fs.IntVar(&o.Repeat, "repeat", 1, "repetitions per (pp, tg) pair and phase")
	fs.IntVar(&o.Warmup, "warmup", 0, "warm-up runs at the start of each phase (first pp/tg pair), not recorded")
	fs.DurationVar(&cooldown, "cooldown", 2*time.Second, "pause before each run (exo sleeps 2s)")
	fs.BoolVar(&o.CompareBaseline, "compare-baseline", false, "also run phase decode_alone: the decode instance without the link, prefilling its own prompts")
	fs.BoolVar(&o.Auto, "auto", false, "also run phase auto: both instances up without a link, the decode node's router swapped to router-disagg-auto (it decides by estimated time where to prefill and decode; the router in use is restored after)")
	fs.BoolVar(&o.AllowShort, "allow-short", false, "allow prompt lengths of 1000 tokens or less (at least 64); a local cluster lowers its remote-prefill thresholds to fit")
	fs.StringVar(&o.PrefillInstance, "prefill-instance", "", "with --url: the prefill instance's id (default: picked by role and node)")
	fs.StringVar(&o.DecodeInstance, "decode-instance", "", "with --url: the decode instance's id (default: picked by role and node)")
	fs.StringVar(&o.PrefillNode, "prefill-node", "", "with --url: pick the prefill instance on this node id")
	fs.StringVar(&o.DecodeNode, "decode-node", "", "with --url: pick the decode instance on this node id")
	fs.BoolVar(&o.AllowUnload, "allow-unload", false, "with --url: unload the prefill instance before decode_alone and the isolation case without P/D, as exo does (it is not loaded again)")
	fs.BoolVar(&o.Create, "create", false, "with --url: load the benchmark's own instances of --model on --prefill-node and --decode-node (default: the first two alive nodes) in exo's order, and unload them after; no other instance may serve the model")
	fs.Var(prefillOpts, "prefill-opt", "with --local or --create: engine option of the prefill instance, key=value (repeat), e.g. backend=mlx")
	fs.Var(decodeOpts, "decode-opt", "with --local or --create: engine option of the decode instance, key=value (repeat), e.g. backend=cpu")
	fs.StringVar(&o.CPUs, "cpus", "0,1", "with --local: CPUs to pin the prefill and the decode node to with taskset, or none")
	fs.BoolVar(&o.Isolation, "isolation", true, "measure decode isolation: a running stream's inter-token latency while long prompts arrive, idle, with P/D and without")
	fs.IntVar(&o.IsolationPP, "isolation-pp", 0, "length of the long prompts of the isolation case (default: the largest --pp, at most 4096)")
	fs.IntVar(&o.IsolationPrompts, "isolation-prompts", 2, "long prompts sent one after another while the stream runs")
	fs.DurationVar(&idle, "isolation-idle", 3*time.Second, "how long the idle stream is measured")
	fs.DurationVar(&timeout, "timeout", 30*time.Minute, "longest one request may take")
	fs.DurationVar(&settle, "settle-timeout", 2*time.Minute, "how long to wait for instances, links and unloads to show everywhere")
	fs.StringVar(&o.Out, "out", "", "write every run, the summary and the setup as JSON to this file")
	fs.StringVar(&o.Out, "json-out", "", "the same as --out (exo's name)")
	fs.StringVar(&o.SVG, "svg", "", "write a chart of the results as SVG to this file")
	fs.BoolVar(&o.DryRun, "dry-run", false, "with --url: print the instances (or nodes, with --create) the benchmark would use and exit")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress output")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.PP, o.TG = pp, tg
	o.Cooldown, o.Timeout, o.SettleTimeout, o.IsolationIdle = Seconds(cooldown), Seconds(timeout), Seconds(settle), Seconds(idle)
	if o.IsolationPP == 0 && len(o.PP) > 0 {
		o.IsolationPP = min(slices.Max(o.PP), 4096)
	}
	if o.Local && o.Model == "" {
		o.Model = "pd-bench"
	}
	if !o.Isolation {
		o.IsolationPP, o.IsolationPrompts, o.IsolationIdle = 0, 0, 0
	}
	return o, o.validate()
}

// minPrompt is the shortest prompt the benchmark sends as a long one: the isolation stream's own prompt
// (isolationStreamPrompt tokens) must stay below the remote-prefill threshold a local cluster derives from it.
const minPrompt = 64

func (o PDOptions) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	checkTarget(&errs, o.URL, o.Local)
	if len(o.PP) == 0 {
		bad("--pp is required: prompt lengths in tokens, e.g. --pp 2048,8192")
	}
	checkPrompt := func(flag string, n int) {
		switch {
		case n < minPrompt:
			bad("%s %d: prompts need at least %d tokens", flag, n, minPrompt)
		case n <= 1000 && !o.AllowShort:
			bad("%s %d must be > 1000: remote prefill starts at 1000 uncached tokens (exo's rule); --allow-short allows shorter prompts", flag, n)
		}
	}
	for _, n := range o.PP {
		checkPrompt("--pp", n)
	}
	if len(o.TG) == 0 {
		bad("--tg is required: generation lengths in tokens, e.g. --tg 128")
	}
	for _, n := range o.TG {
		if n < 2 {
			bad("--tg %d: generation lengths must be at least 2 (generation tok/s is measured from the first token to the last)", n)
		}
	}
	if o.Repeat < 1 {
		bad("--repeat %d: must be at least 1", o.Repeat)
	}
	if o.Warmup < 0 {
		bad("--warmup %d: must not be negative", o.Warmup)
	}
	if o.Cooldown < 0 {
		bad("--cooldown must not be negative")
	}
	if o.Timeout <= 0 || o.SettleTimeout <= 0 {
		bad("--timeout and --settle-timeout must be positive")
	}
	if o.Isolation {
		checkPrompt("--isolation-pp", o.IsolationPP)
		if o.IsolationPrompts < 1 {
			bad("--isolation-prompts %d: must be at least 1", o.IsolationPrompts)
		}
		if o.IsolationIdle <= 0 {
			bad("--isolation-idle must be positive")
		}
	}
	switch {
	case o.Local:
		if o.PrefillInstance != "" || o.DecodeInstance != "" || o.PrefillNode != "" || o.DecodeNode != "" || o.AllowUnload || o.Create {
			bad("--prefill-instance, --decode-instance, --prefill-node, --decode-node, --allow-unload and --create pick instances of a running cluster (--url); --local starts its own")
		}
		if o.DryRun {
			bad("--dry-run shows the instances of a running cluster (--url) the benchmark would use")
		}
		if _, _, err := parseCPUs(o.CPUs); err != nil {
			errs = append(errs, err)
		}
	case o.Create:
		if o.PrefillInstance != "" || o.DecodeInstance != "" {
			bad("--create loads the benchmark's own instances: --prefill-instance and --decode-instance name existing ones")
		}
		if o.Model == "" {
			bad("--create needs --model: the model to load on both nodes")
		}
		if o.PrefillNode != "" && o.PrefillNode == o.DecodeNode {
			bad("--prefill-node and --decode-node name the same node %q", o.PrefillNode)
		}
	default:
		if len(o.PrefillOpts) > 0 || len(o.DecodeOpts) > 0 {
			bad("--prefill-opt and --decode-opt configure the instances --local or --create load; a running cluster's instances keep the options they were loaded with")
		}
		if o.PrefillInstance != "" && o.PrefillInstance == o.DecodeInstance {
			bad("--prefill-instance and --decode-instance name the same instance %q", o.PrefillInstance)
		}
	}
	return errors.Join(errs...)
}

// checkTarget checks that exactly one of --url and --local was given.
func checkTarget(errs *[]error, url string, local bool) {
	switch {
	case url != "" && local:
		*errs = append(*errs, errors.New("--url and --local exclude each other: benchmark a running cluster or one started for the benchmark"))
	case url == "" && !local:
		*errs = append(*errs, errors.New("give --url (a running cluster, e.g. http://127.0.0.1:8000) or --local (a cluster started on loopback for the benchmark)"))
	case url != "" && !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://"):
		*errs = append(*errs, fmt.Errorf("--url %q: want http:// or https://", url))
	}
}

// pairs are the (pp, tg) pairs to run: in order when the lists have equal lengths, every combination
// otherwise or with --all-combinations (exo's tandem and product modes).
func (o PDOptions) pairs() [][2]int {
	var out [][2]int
	if len(o.PP) == len(o.TG) && !o.AllCombinations {
		for i := range o.PP {
			out = append(out, [2]int{o.PP[i], o.TG[i]})
		}
		return out
	}
	for _, p := range o.PP {
		for _, t := range o.TG {
			out = append(out, [2]int{p, t})
		}
	}
	return out
}
