package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// LoadOptions are `duet bench load`'s flags.
type LoadOptions struct {
	URL        string            `json:"url,omitempty"`
	APIKey     string            `json:"-"`
	Local      bool              `json:"local"`
	Model      string            `json:"model,omitempty"`
	Engine     string            `json:"engine,omitempty"`
	EngineOpts map[string]string `json:"engine_opts,omitempty"`
	Clients    int               `json:"clients"`
	Mix        []MixItem         `json:"mix"`
	MaxTokens  int               `json:"max_tokens"`
	Duration   Seconds           `json:"duration_s"`
	Timeout    Seconds           `json:"timeout_s"`
	Seed       uint64            `json:"seed"`
	Out        string            `json:"-"`
	SVG        string            `json:"-"`
	Quiet      bool              `json:"-"`
	Exe        string            `json:"-"`
}

const loadUsage = `Load a cluster with N concurrent clients for a duration: each sends streamed completions one after another,
with prompt lengths drawn from a mix, and the benchmark reports throughput, time to first token, inter-token
latency and end-to-end latency percentiles (overall and per prompt length), and errors by kind. Against a
running cluster (--url) or one node it starts on loopback (--local).

Examples:
  duet bench load --url http://127.0.0.1:8000 --clients 16 --mix 100:0.7,4000:0.3 --duration 60s
  duet bench load --local --engine echo --model echo --engine-opt token_delay=5ms --clients 32 --duration 20s`

// ParseLoad reads `duet bench load`'s flags.
func ParseLoad(args []string, stderr io.Writer) (LoadOptions, error) {
	o := LoadOptions{EngineOpts: map[string]string{}}
	fs := newFlagSet("load", loadUsage, stderr)
	var mix string
	var duration, timeout time.Duration
	fs.StringVar(&o.URL, "url", "", "a gateway of the cluster to load, e.g. http://127.0.0.1:8000")
	fs.StringVar(&o.APIKey, "api-key", os.Getenv("DUET_API_KEY"), "API key (Bearer) [DUET_API_KEY]")
	fs.BoolVar(&o.Local, "local", false, "start one duet node on loopback for the benchmark and stop it after")
	fs.StringVar(&o.Model, "model", "", "model to request (default: with --url the first ready instance's; with --local embedded, or echo with --engine echo); with --local also pd-bench, tiny, bench100m (generated)")
	fs.StringVar(&o.Engine, "engine", "", "with --local: the node's engine (default mlx-engine)")
	fs.Var(options(o.EngineOpts), "engine-opt", "with --local: engine option key=value (repeat), e.g. token_delay=5ms for echo")
	fs.IntVar(&o.Clients, "clients", 8, "concurrent clients")
	fs.StringVar(&mix, "mix", "100:0.7,4000:0.3", "prompt lengths in tokens and their shares, tokens:weight,...")
	fs.IntVar(&o.MaxTokens, "max-tokens", 64, "tokens generated per request (EOS ignored)")
	fs.DurationVar(&duration, "duration", 30*time.Second, "how long clients send new requests; requests in flight at the end finish")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "longest one request may take")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the prompt lengths and prompts")
	fs.StringVar(&o.Out, "out", "", "write the results and every request as JSON to this file")
	fs.StringVar(&o.SVG, "svg", "", "write a chart of the latencies as SVG to this file")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress output")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.Duration, o.Timeout = Seconds(duration), Seconds(timeout)
	var errs []error
	checkTarget(&errs, o.URL, o.Local)
	m, err := ParseMix(mix)
	if err != nil {
		errs = append(errs, fmt.Errorf("--mix %q: %v", mix, err))
	}
	o.Mix = m
	if o.Clients < 1 {
		errs = append(errs, fmt.Errorf("--clients %d: must be at least 1", o.Clients))
	}
	if o.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("--max-tokens %d: must be at least 1", o.MaxTokens))
	}
	if duration <= 0 || timeout <= 0 {
		errs = append(errs, errors.New("--duration and --timeout must be positive"))
	}
	if !o.Local && (o.Engine != "" || len(o.EngineOpts) > 0) {
		errs = append(errs, errors.New("--engine and --engine-opt configure the node --local starts"))
	}
	if o.Local {
		if o.Engine == "" {
			o.Engine = "mlx-engine"
		}
		if o.Model == "" {
			o.Model = "embedded"
			if o.Engine == "echo" {
				o.Model = "echo"
			}
		}
	}
	return o, errors.Join(errs...)
}

// LoadReport is `duet bench load`'s JSON.
type LoadReport struct {
	Bench     string      `json:"bench"` // "load"
	Version   string      `json:"duet_version"`
	StartedAt time.Time   `json:"started_at"`
	Options   LoadOptions `json:"options"`
	Model     string      `json:"model"`
	// DurationS is the time clients sent new requests; ElapsedS runs until the last one finished.
	DurationS        float64        `json:"duration_s"`
	ElapsedS         float64        `json:"elapsed_s"`
	Requests         int            `json:"requests"`
	OK               int            `json:"ok"`
	Errors           int            `json:"errors"`
	ErrorKinds       map[string]int `json:"error_kinds,omitempty"`
	RequestsPerS     float64        `json:"requests_per_s"`
	OutputTokensPerS float64        `json:"output_tokens_per_s"`
	PromptTokensPerS float64        `json:"prompt_tokens_per_s"`
	TTFTMs           Percentiles    `json:"ttft_ms"`
	ITLMs            Percentiles    `json:"itl_ms"`
	LatencyMs        Percentiles    `json:"latency_ms"`
	Buckets          []LoadBucket   `json:"by_prompt_tokens"`
	Results          []LoadResult   `json:"results"`
}

// LoadBucket is one prompt length of the mix.
type LoadBucket struct {
	PromptTokens int         `json:"prompt_tokens"`
	Requests     int         `json:"requests"`
	Errors       int         `json:"errors"`
	TTFTMs       Percentiles `json:"ttft_ms"`
	LatencyMs    Percentiles `json:"latency_ms"`
}

// LoadResult is one request.
type LoadResult struct {
	Client       int     `json:"client"`
	StartS       float64 `json:"start_s"`
	PromptTokens int     `json:"prompt_tokens"`
	Tokens       int     `json:"tokens"`
	TTFTMs       float64 `json:"ttft_ms,omitempty"`
	LatencyMs    float64 `json:"latency_ms"`
	Error        string  `json:"error,omitempty"`

	itls []float64
}

// RunLoad runs `duet bench load`.
func RunLoad(ctx context.Context, o LoadOptions, version string, stdout, stderr io.Writer) error {
	a := newAPI(o.APIKey, "")
	prog := newProgress(stderr, int(time.Duration(o.Duration)/time.Second), o.Quiet)
	defer prog.finish()
	base := strings.TrimRight(o.URL, "/")
	model := o.Model
	var in instance
	if o.Local {
		root, err := os.MkdirTemp("", "duet-bench-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(root)
		exe, err := executable(o.Exe)
		if err != nil {
			return err
		}
		path, _, err := localModel(o.Model, root)
		if err != nil {
			return err
		}
		args := append([]string{"--engine", o.Engine, "--model", path}, engineOptArgs(options(o.EngineOpts))...)
		prog.logf("starting a duet node on 127.0.0.1 (engine %s, model %s)", o.Engine, o.Model)
		n, err := startNode(ctx, exe, root, nodeSpec{Name: "node", Host: "127.0.0.1", CPU: -1, Args: args}, pinning{}, "")
		if err != nil {
			return err
		}
		defer n.stop()
		base = n.URL
		if in, err = oneReady(ctx, a, base, "", 2*time.Minute); err != nil {
			return err
		}
		model = in.Model
	} else {
		ins, err := a.at(base).Instances(ctx)
		if err != nil {
			return err
		}
		for _, c := range ins {
			if c.Status == "ready" && (model == "" || c.Model == model) {
				in = c
				break
			}
		}
		if in.ID == "" {
			return fmt.Errorf("no ready instance of model %q at %s", model, base)
		}
		model = in.Model
	}
	longest := 0
	for _, m := range o.Mix {
		longest = max(longest, m.Tokens)
	}
	if in.ContextLength > 0 && longest+o.MaxTokens > in.ContextLength {
		return fmt.Errorf("prompts of %d tokens and %d generated do not fit model %s's %d-token context: shorten --mix or --max-tokens", longest, o.MaxTokens, model, in.ContextLength)
	}

	rep := &LoadReport{Bench: "load", Version: version, StartedAt: time.Now().UTC(), Options: o, Model: model}
	results := make(chan LoadResult, 1024)
	start := time.Now()
	deadline := start.Add(time.Duration(o.Duration))
	var wg sync.WaitGroup
	for client := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(o.Seed, uint64(client)))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n := pickLength(o.Mix, r.Float64())
				rctx, cancel := context.WithTimeout(ctx, time.Duration(o.Timeout))
				at := time.Since(start)
				c, err := a.stream(rctx, base, completionRequest{Model: model, Prompt: randomPrompt(r.Uint64(), n), MaxTokens: o.MaxTokens}, nil)
				cancel()
				res := LoadResult{Client: client, StartS: round(at.Seconds(), 6), PromptTokens: n}
				if c != nil {
					res.Tokens, res.TTFTMs, res.LatencyMs = len(c.Stamps), round(ms(c.TTFT()), 6), round(ms(c.Elapsed), 6)
					res.itls = msOf(c.ITLs())
				}
				if err != nil {
					res.Error = errorKind(err)
				}
				results <- res
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	prog.step("%d clients", o.Clients)
	done := false
	for !done {
		select {
		case res, ok := <-results:
			if !ok {
				done = true
				break
			}
			rep.Results = append(rep.Results, res)
		case <-ticker.C:
			if time.Now().Before(deadline) {
				prog.advance()
			}
			errs := 0
			for _, r := range rep.Results {
				if r.Error != "" {
					errs++
				}
			}
			label := fmt.Sprintf("%d clients: %d requests done, %d errors", o.Clients, len(rep.Results), errs)
			if !time.Now().Before(deadline) {
				label += "; waiting for the requests in flight"
			}
			prog.update("%s", label)
		}
	}
	prog.finish()
	elapsed := time.Since(start)
	rep.summarize(time.Duration(o.Duration), elapsed)
	rep.Table().Render(stdout)
	if err := writeFiles(rep, o.Out, o.SVG); err != nil {
		return err
	}
	if rep.OK == 0 {
		return fmt.Errorf("no request succeeded (%d errors)", rep.Errors)
	}
	return ctx.Err()
}

// pickLength draws a prompt length from the mix for u in [0, 1).
func pickLength(mix []MixItem, u float64) int {
	acc := 0.0
	for _, m := range mix {
		acc += m.Weight
		if u < acc {
			return m.Tokens
		}
	}
	return mix[len(mix)-1].Tokens
}

// errorKind names an error for counting: the HTTP status and message, or the error's text, shortened.
func errorKind(err error) string {
	s := err.Error()
	if ae := client.AsError(err); ae != nil {
		s = fmt.Sprintf("HTTP %d: %s", ae.Status, ae.Message)
	} else if errors.Is(err, context.DeadlineExceeded) {
		s = "timeout"
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func (rep *LoadReport) summarize(window, elapsed time.Duration) {
	sort.Slice(rep.Results, func(i, j int) bool { return rep.Results[i].StartS < rep.Results[j].StartS })
	rep.DurationS, rep.ElapsedS = round(window.Seconds(), 6), round(elapsed.Seconds(), 6)
	rep.ErrorKinds = map[string]int{}
	var ttft, itl, lat []float64
	outTok, promptTok := 0, 0
	byLen := map[int]*struct {
		n, errs   int
		ttft, lat []float64
	}{}
	for _, r := range rep.Results {
		rep.Requests++
		b := byLen[r.PromptTokens]
		if b == nil {
			b = &struct {
				n, errs   int
				ttft, lat []float64
			}{}
			byLen[r.PromptTokens] = b
		}
		b.n++
		outTok += r.Tokens
		if r.Error != "" {
			rep.Errors++
			b.errs++
			rep.ErrorKinds[r.Error]++
			continue
		}
		rep.OK++
		promptTok += r.PromptTokens
		ttft, lat, itl = append(ttft, r.TTFTMs), append(lat, r.LatencyMs), append(itl, r.itls...)
		b.ttft, b.lat = append(b.ttft, r.TTFTMs), append(b.lat, r.LatencyMs)
	}
	if len(rep.ErrorKinds) == 0 {
		rep.ErrorKinds = nil
	}
	if s := elapsed.Seconds(); s > 0 {
		rep.RequestsPerS = round(float64(rep.OK)/s, 5)
		rep.OutputTokensPerS = round(float64(outTok)/s, 5)
		rep.PromptTokensPerS = round(float64(promptTok)/s, 5)
	}
	rep.TTFTMs, rep.ITLMs, rep.LatencyMs = Summarize(ttft).rounded(), Summarize(itl).rounded(), Summarize(lat).rounded()
	var lens []int
	for n := range byLen {
		lens = append(lens, n)
	}
	sort.Ints(lens)
	rep.Buckets = nil
	for _, n := range lens {
		b := byLen[n]
		rep.Buckets = append(rep.Buckets, LoadBucket{PromptTokens: n, Requests: b.n, Errors: b.errs,
			TTFTMs: Summarize(b.ttft).rounded(), LatencyMs: Summarize(b.lat).rounded()})
	}
}

// Table is the report as text.
func (rep *LoadReport) Table() Table {
	t := Table{
		Title: fmt.Sprintf("load: %d clients for %s, model %s, %d tokens per request: %d requests, %d ok, %d errors",
			rep.Options.Clients, time.Duration(rep.Options.Duration), rep.Model, rep.Options.MaxTokens, rep.Requests, rep.OK, rep.Errors),
		Header: []string{"prompt tokens", "requests", "errors", "ttft p50", "ttft p90", "ttft p99", "latency p50", "latency p99"},
	}
	for _, b := range rep.Buckets {
		t.Rows = append(t.Rows, []string{fmt.Sprint(b.PromptTokens), fmt.Sprint(b.Requests), fmt.Sprint(b.Errors),
			fmtMs(b.TTFTMs.P50), fmtMs(b.TTFTMs.P90), fmtMs(b.TTFTMs.P99), fmtMs(b.LatencyMs.P50), fmtMs(b.LatencyMs.P99)})
	}
	t.Rows = append(t.Rows, []string{"all", fmt.Sprint(rep.Requests), fmt.Sprint(rep.Errors),
		fmtMs(rep.TTFTMs.P50), fmtMs(rep.TTFTMs.P90), fmtMs(rep.TTFTMs.P99), fmtMs(rep.LatencyMs.P50), fmtMs(rep.LatencyMs.P99)})
	t.Footer = append(t.Footer,
		fmt.Sprintf("  throughput: %.2f requests/s, %.1f output tokens/s, %.1f prompt tokens/s over %.2fs", rep.RequestsPerS, rep.OutputTokensPerS, rep.PromptTokensPerS, rep.ElapsedS),
		fmt.Sprintf("  inter-token latency: p50 %s, p90 %s, p99 %s, max %s", fmtMs(rep.ITLMs.P50), fmtMs(rep.ITLMs.P90), fmtMs(rep.ITLMs.P99), fmtMs(rep.ITLMs.Max)))
	kinds := make([]string, 0, len(rep.ErrorKinds))
	for k := range rep.ErrorKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Footer = append(t.Footer, fmt.Sprintf("  error ×%d: %s", rep.ErrorKinds[k], k))
	}
	return t
}

// Chart draws TTFT and end-to-end latency percentiles per prompt length.
func (rep *LoadReport) Chart() Chart {
	c := Chart{Title: "duet bench load",
		Subtitle: []string{fmt.Sprintf("%d clients for %s, model %s, %d tokens per request; %.2f requests/s, %.1f output tokens/s, %d errors",
			rep.Options.Clients, time.Duration(rep.Options.Duration), rep.Model, rep.Options.MaxTokens, rep.RequestsPerS, rep.OutputTokensPerS, rep.Errors)}}
	ttft := Panel{Title: "Time to first token by prompt length", Unit: "ms", Series: []string{"p50", "p90", "p99"}}
	lat := Panel{Title: "End-to-end latency by prompt length", Unit: "ms", Series: []string{"p50", "p90", "p99"}}
	for _, b := range rep.Buckets {
		name := fmt.Sprintf("%d tokens", b.PromptTokens)
		ttft.Groups, lat.Groups = append(ttft.Groups, name), append(lat.Groups, name)
		ttft.Values = append(ttft.Values, []float64{b.TTFTMs.P50, b.TTFTMs.P90, b.TTFTMs.P99})
		lat.Values = append(lat.Values, []float64{b.LatencyMs.P50, b.LatencyMs.P90, b.LatencyMs.P99})
	}
	itl := Panel{Title: "Inter-token latency, all requests", Unit: "ms", Series: []string{"p50", "p90", "p99"},
		Groups: []string{"all"}, Values: [][]float64{{rep.ITLMs.P50, rep.ITLMs.P90, rep.ITLMs.P99}}}
	c.Panels = []Panel{ttft, lat, itl}
	return c
}
