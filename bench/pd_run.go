package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// isolationStreamPrompt is the running stream's prompt length in the isolation case: short, so that it is
// prefilled where it is decoded.
const isolationStreamPrompt = 16

// side is one instance of the pair and the gateway that fronts its node.
type side struct {
	instance
	URL string
}

type pdBench struct {
	o      PDOptions
	api    *api
	report *PDReport
	prog   *progress

	p, d side
	// routerBefore is the decode node's router while phase auto has swapped in its own ("" otherwise).
	routerBefore string
	base         string // --url, for the cluster API's writes
	// The pair's life, in exo's order: the prefill instance alone first, then the decode instance, then the
	// prefill instance goes. startPrefill and startDecode bring an instance up (nil: it is up already);
	// prefillAloneSkip says why prefill_alone cannot run ("" when it can); unloadable says the prefill
	// instance may be unloaded before decode_alone.
	startPrefill, startDecode func(context.Context) error
	prefillAloneSkip          string
	unloadable                bool
	owned                     []string // instances the benchmark loaded, unloaded at the end

	nodes           []*localNode
	root            string
	linkID          string
	prefillUnloaded bool
	seed            uint64
}

// RunPD runs `duet bench pd` and writes its table to stdout, progress to stderr, and the JSON and SVG files
// asked for. The report is written even when a phase failed, with what was measured.
func RunPD(ctx context.Context, o PDOptions, version string, stdout, stderr io.Writer) (err error) {
	b := &pdBench{o: o, api: newAPI(o.APIKey, o.AdminKey), seed: uint64(time.Now().UnixNano()),
		report: &PDReport{Bench: "pd", Version: version, StartedAt: time.Now().UTC(), Options: o}}
	b.prog = newProgress(stderr, 0, o.Quiet)
	defer b.close()
	switch {
	case o.Local:
		err = b.setupLocal(ctx)
	case o.Create:
		err = b.setupCreate(ctx)
	default:
		err = b.setupExisting(ctx)
	}
	if err != nil {
		return err
	}
	if o.DryRun {
		b.dryRun(stdout)
		return nil
	}
	b.prog.addTotal(b.steps())
	err = b.run(ctx)
	b.prog.finish()
	b.report.Setup.Prefill, b.report.Setup.Decode = b.sideSummary(b.p, 0), b.sideSummary(b.d, 1)
	b.fillRunMeta()
	if err != nil {
		b.report.Notes = append(b.report.Notes, "the benchmark stopped early: "+err.Error())
	}
	b.report.Summary = summarize(o.pairs(), b.report.Runs)
	b.report.Notes = append(b.report.Notes, problems(b.report.Runs)...)
	b.report.RenderTables(stdout)
	if werr := b.write(); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// fillRunMeta completes exo's per-run instance fields of runs made before the other instance was up (the
// decode instance's, in prefill_alone).
func (b *pdBench) fillRunMeta() {
	for i := range b.report.Runs {
		r := &b.report.Runs[i]
		if r.DecodeInstanceID == "" {
			r.DecodeModelID, r.DecodeInstanceID, r.DecodeNodes = b.d.Model, b.d.ID, []string{b.d.Node}
		}
	}
}

func (b *pdBench) write() error {
	return writeFiles(b.report, b.o.Out, b.o.SVG)
}

// expectation is where a phase's requests must run.
type expectation struct {
	decodeOn string
	remote   bool
	// any: the router decides where the request runs (phase auto); only that it ran whole is checked.
	any bool
}

// pdPhase is one step of `duet bench pd`, run in the order of pdPhases: Setup brings the pair of instances to
// the state the phase measures, then the phase measures it. A phase with Target measures every (pp, tg) pair
// --repeat times as exo's phases do (its runs go into the JSON, the summary, the table and the chart); one
// with Run measures something else (an isolation case).
type pdPhase struct {
	// Name is the phase's name in the runs, the summary and the progress lines (exo's, for exo's phases).
	Name string
	// Skip says why the phase does not run with these options and instances ("" or nil: it runs). A skip that
	// is worth knowing (not just an option left off) is recorded as a note by returning it with note true.
	Skip func(b *pdBench) (why string, note bool)
	// Setup brings the cluster to the phase's state through the pdBench's ensure methods (ensurePrefill,
	// ensureDecode, ensureLinked, ensurePrefillGone), each a no-op when the state holds already; nil: nothing.
	// A skipped phase's Setup does not run, so a later phase ensures what it needs itself.
	Setup func(ctx context.Context, b *pdBench) error
	// Target is where a pair phase sends its requests and where they must run.
	Target func(b *pdBench) (side, expectation)
	// Run measures a phase that is not a pair phase; Steps is how many progress steps it takes.
	Run   func(ctx context.Context, b *pdBench) error
	Steps int
}

// pdPhases are the benchmark's phases in exo's order of instance lifecycles: the prefill instance alone, both
// instances linked (with the isolation case's idle and P/D windows), then the link gone and the prefill
// instance unloaded (decode_alone and the isolation window without P/D). To add a phase, add an entry here
// where the cluster's state suits it: a name, the Setup that brings the state it needs, and a Target (a pair
// phase, measured like exo's) or a Run; a pair phase also goes into summaryPhases' order for the table.
var pdPhases = []pdPhase{
	{
		Name: PhasePrefillAlone,
		Skip: func(b *pdBench) (string, bool) { return b.prefillAloneSkip, true },
		Setup: func(ctx context.Context, b *pdBench) error {
			return b.ensurePrefill(ctx)
		},
		Target: func(b *pdBench) (side, expectation) { return b.p, expectation{decodeOn: b.p.ID} },
	},
	{
		Name: PhaseDisaggregated,
		Setup: func(ctx context.Context, b *pdBench) error {
			return errors.Join(b.ensurePrefill(ctx), b.ensureDecode(ctx), b.ensureLinked(ctx, true))
		},
		Target: func(b *pdBench) (side, expectation) { return b.d, expectation{decodeOn: b.d.ID, remote: true} },
	},
	{
		Name: "isolation " + CaseIdle + " and " + CaseDisaggregated,
		Skip: skipIsolation,
		Setup: func(ctx context.Context, b *pdBench) error {
			return errors.Join(b.ensurePrefill(ctx), b.ensureDecode(ctx), b.ensureLinked(ctx, true))
		},
		Run: func(ctx context.Context, b *pdBench) error {
			b.isolation().Cases = append(b.isolation().Cases, b.isolationCase(ctx, CaseIdle, false), b.isolationCase(ctx, CaseDisaggregated, true))
			return ctx.Err()
		},
		Steps: 2,
	},
	{
		Name: PhaseAuto,
		Skip: func(b *pdBench) (string, bool) {
			if !b.o.Auto {
				return "--auto is off", false
			}
			return "", false
		},
		Setup: func(ctx context.Context, b *pdBench) error {
			return errors.Join(b.ensurePrefill(ctx), b.ensureDecode(ctx), b.ensureLinked(ctx, false), b.ensureAutoRouter(ctx, true))
		},
		Target: func(b *pdBench) (side, expectation) { return b.d, expectation{any: true} },
	},
	{
		Name: PhaseDecodeAlone,
		Skip: func(b *pdBench) (string, bool) {
			if !b.o.CompareBaseline {
				return "--compare-baseline is off", false
			}
			return b.keptLoaded(), true
		},
		Setup: func(ctx context.Context, b *pdBench) error {
			return errors.Join(b.ensureDecode(ctx), b.ensureLinked(ctx, false), b.ensureAutoRouter(ctx, false), b.ensurePrefillGone(ctx))
		},
		Target: func(b *pdBench) (side, expectation) { return b.d, expectation{decodeOn: b.d.ID} },
	},
	{
		Name: "isolation " + CaseLocalPrefill,
		Skip: skipIsolation,
		Setup: func(ctx context.Context, b *pdBench) error {
			if b.keptLoaded() != "" {
				return b.ensureAutoRouter(ctx, false) // Run records the case as skipped
			}
			return errors.Join(b.ensureDecode(ctx), b.ensureLinked(ctx, false), b.ensureAutoRouter(ctx, false), b.ensurePrefillGone(ctx))
		},
		Run: func(ctx context.Context, b *pdBench) error {
			c := IsolationCase{Case: CaseLocalPrefill, Skipped: b.keptLoaded()}
			if c.Skipped == "" {
				c = b.isolationCase(ctx, CaseLocalPrefill, false)
			} else {
				b.prog.advance()
			}
			b.isolation().Cases = append(b.isolation().Cases, c)
			return ctx.Err()
		},
		Steps: 1,
	},
}

func skipIsolation(b *pdBench) (string, bool) {
	if !b.o.Isolation {
		return "--isolation is off", false
	}
	return "", false
}

// keptLoaded says why a phase without P/D cannot run: the prefill instance is not the benchmark's to unload
// ("" when it is, or is gone).
func (b *pdBench) keptLoaded() string {
	if b.unloadable || b.prefillUnloaded {
		return ""
	}
	return "the prefill instance stays loaded (a running cluster's, without --allow-unload or --create), so the router " +
		"would have it prefill for the decode instance or take the long prompts itself"
}

// isolation is the report's isolation case, made on first use.
func (b *pdBench) isolation() *Isolation {
	if b.report.Isolation == nil {
		b.report.Isolation = &Isolation{StreamPromptTokens: isolationStreamPrompt, LongPromptTokens: b.o.IsolationPP, LongPrompts: b.o.IsolationPrompts}
	}
	return b.report.Isolation
}

// run runs every phase of pdPhases that is not skipped, in order.
func (b *pdBench) run(ctx context.Context) error {
	for _, ph := range pdPhases {
		if ph.Skip != nil {
			if why, note := ph.Skip(b); why != "" {
				if note {
					b.report.Notes = append(b.report.Notes, ph.Name+" is not measured: "+why)
				}
				continue
			}
		}
		if ph.Setup != nil {
			if err := ph.Setup(ctx, b); err != nil {
				return fmt.Errorf("%s: %w", ph.Name, err)
			}
		}
		var err error
		if ph.Target != nil {
			s, exp := ph.Target(b)
			err = b.phase(ctx, ph.Name, s, exp)
		} else {
			err = ph.Run(ctx, b)
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// ensurePrefill brings the prefill instance up (a --create instance is loaded; a local node's and a running
// cluster's are up from the start). It cannot come back once ensurePrefillGone unloaded it.
func (b *pdBench) ensurePrefill(ctx context.Context) error {
	if b.prefillUnloaded {
		return errors.New("the prefill instance was unloaded by an earlier phase: a phase that needs it runs before decode_alone")
	}
	if b.startPrefill == nil {
		return nil
	}
	start := b.startPrefill
	b.startPrefill = nil
	return start(ctx)
}

// ensureDecode brings the decode instance up (the local decode node or a --create instance starts after
// prefill_alone, as exo loads it).
func (b *pdBench) ensureDecode(ctx context.Context) error {
	if b.startDecode == nil {
		return nil
	}
	start := b.startDecode
	b.startDecode = nil
	return start(ctx)
}

// ensureLinked makes the benchmark's instance link (prefill → decode) or removes it, and waits until both
// gateways see it so.
func (b *pdBench) ensureLinked(ctx context.Context, linked bool) error {
	switch {
	case linked && b.linkID == "":
		b.prog.note("linking %s (prefill) → %s (decode)", b.p.ID, b.d.ID)
		w, err := b.api.at(b.d.URL).CreateLink(ctx, []string{b.p.ID}, []string{b.d.ID})
		if err != nil {
			return fmt.Errorf("linking the instances: %w", err)
		}
		id := w.LinkID
		b.linkID = id
		return b.waitLinks(ctx, id, true)
	case !linked && b.linkID != "":
		b.prog.note("removing the link %s", b.linkID)
		id := b.linkID
		if err := b.api.at(b.d.URL).DeleteLink(ctx, id); err != nil {
			return fmt.Errorf("removing the link: %w", err)
		}
		b.linkID = ""
		return b.waitLinks(ctx, id, false)
	}
	return nil
}

// ensureAutoRouter swaps the decode node's router to router-disagg-auto (on) or back to the one it had (off).
func (b *pdBench) ensureAutoRouter(ctx context.Context, on bool) error {
	switch {
	case on && b.routerBefore == "":
		r, err := b.api.at(b.d.URL).Router(ctx)
		cur := r.Router
		if err != nil {
			return fmt.Errorf("reading the decode node's router: %w", err)
		}
		b.prog.note("swapping the decode node's router from %s to %s", cur, autoRouter)
		if _, err := b.api.at(b.d.URL).SetRouter(ctx, autoRouter, ""); err != nil {
			return fmt.Errorf("swapping the decode node's router to %s: %w", autoRouter, err)
		}
		b.routerBefore = cur
	case !on && b.routerBefore != "":
		if _, err := b.api.at(b.d.URL).SetRouter(ctx, b.routerBefore, ""); err != nil {
			return fmt.Errorf("restoring the decode node's router %s: %w", b.routerBefore, err)
		}
		b.routerBefore = ""
	}
	return nil
}

// autoRouter is the built-in router phase auto swaps in.
const autoRouter = "router-disagg-auto"

// ensurePrefillGone unloads the prefill instance, as exo does before decode_alone: without the link the router
// may still have it prefill for the decode instance (any instance that can prefill is a candidate when no
// link says otherwise), and would send the isolation case's long prompts to it, the less loaded instance.
// Callers skip their phase when keptLoaded says the instance is not the benchmark's to unload.
func (b *pdBench) ensurePrefillGone(ctx context.Context) error {
	if b.prefillUnloaded {
		return nil
	}
	if !b.unloadable {
		return errors.New(b.keptLoaded())
	}
	b.startPrefill = nil // never loaded (a phase that loads it was skipped): nothing to unload
	if b.p.ID == "" {
		b.prefillUnloaded = true
		return nil
	}
	b.prog.note("unloading the prefill instance %s", b.p.ID)
	if err := b.unload(ctx, b.p.ID); err != nil {
		return fmt.Errorf("unloading the prefill instance: %w", err)
	}
	b.prefillUnloaded = true
	return nil
}

// waitLinks waits until both gateways see the benchmark's link (present) or no longer see it.
func (b *pdBench) waitLinks(ctx context.Context, id string, present bool) error {
	what := "the link on both nodes"
	if !present {
		what = "the link gone from both nodes"
	}
	return waitUntil(ctx, time.Duration(b.o.SettleTimeout), what, func() (bool, error) {
		for _, base := range []string{b.p.URL, b.d.URL} {
			ls, err := b.api.at(base).Links(ctx)
			if err != nil {
				return false, err
			}
			if slices.ContainsFunc(ls, func(l link) bool { return l.LinkID == id }) != present {
				return false, nil
			}
		}
		return true, nil
	})
}

// phase runs exo's _run_phase: warm-ups with the first pair, then every pair --repeat times.
func (b *pdBench) phase(ctx context.Context, phase string, s side, exp expectation) error {
	pairs := b.o.pairs()
	for i := range b.o.Warmup {
		b.prog.step("%s: warm-up %d/%d (pp=%d tg=%d)", phase, i+1, b.o.Warmup, pairs[0][0], pairs[0][1])
		b.runOne(ctx, phase, s, pairs[0][0], pairs[0][1], -1, exp)
		b.prog.advance()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	for _, pr := range pairs {
		for r := range b.o.Repeat {
			if err := sleep(ctx, time.Duration(b.o.Cooldown)); err != nil {
				return err
			}
			b.prog.step("%s: pp=%d tg=%d run %d/%d", phase, pr[0], pr[1], r+1, b.o.Repeat)
			row := b.runOne(ctx, phase, s, pr[0], pr[1], r, exp)
			b.report.Runs = append(b.report.Runs, row)
			if row.Problem != "" {
				b.prog.logf("%s pp=%d tg=%d run %d: %s", phase, pr[0], pr[1], r, row.Problem)
			}
			b.prog.advance()
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (b *pdBench) nextSeed() uint64 {
	b.seed++
	return b.seed
}

// runOne sends one request and checks that it ran as its phase means.
func (b *pdBench) runOne(ctx context.Context, phase string, s side, pp, tg, rep int, exp expectation) PDRun {
	row := PDRun{Phase: phase, PhaseModelID: s.Model, PPTokens: pp, TG: tg, RepeatIndex: rep,
		DecodeModelID: b.d.Model, PrefillModelID: b.p.Model, PrefillInstanceID: b.p.ID, PrefillNodes: []string{b.p.Node},
		DecodeInstanceID: b.d.ID, DecodeNodes: []string{b.d.Node}}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(b.o.Timeout))
	defer cancel()
	c, err := b.api.stream(rctx, s.URL, completionRequest{Model: s.Model, Prompt: randomPrompt(b.nextSeed(), pp), MaxTokens: tg}, nil)
	if c != nil {
		row.ElapsedS = round(c.Elapsed.Seconds(), 6)
		row.OutputTextPreview = c.Text.String()
		row.TTFTMs = round(ms(c.TTFT()), 6)
		row.itls = msOf(c.ITLs())
		row.ITLMs = Summarize(row.itls).rounded()
		row.Stats = RunStats{PromptTokens: c.PromptTokens, GenerationTokens: c.CompletionTokens, GenerationTPS: round(c.GenerationTPS(), 5)}
		if c.TTFT() > 0 {
			row.Stats.PromptTPS = round(float64(pp)/c.TTFT().Seconds(), 5)
		}
		if t := c.Timings; t != nil {
			row.PrefillSource, row.RemotePrefill = t.PrefillSource, t.Remote
			row.ServerTimings = &ServerTimings{QueueMs: t.QueueMs, PrefillMs: t.PrefillMs, FirstTokenMs: t.FirstTokenMs, DecodeMs: t.DecodeMs, TotalMs: t.TotalMs}
			if t.Route != nil {
				row.DecodedOn = t.Route.DecodeInstance
			}
		}
	}
	row.Problem = checkRun(row, c, err, exp)
	return row
}

// checkRun says what is wrong with a run for its phase, "" when nothing is.
func checkRun(row PDRun, c *completion, err error, exp expectation) string {
	switch {
	case err != nil:
		return err.Error()
	case c.Timings == nil:
		return "the response carried no timings"
	case exp.any && c.CompletionTokens != row.TG:
		return fmt.Sprintf("generated %d tokens, not %d", c.CompletionTokens, row.TG)
	case exp.any:
		return ""
	case row.DecodedOn != exp.decodeOn:
		return fmt.Sprintf("decoded on %s, not on %s", orNone(row.DecodedOn), exp.decodeOn)
	case exp.remote && row.PrefillSource != "remote":
		why := "the router offered no prefill endpoint"
		if rp := row.RemotePrefill; rp != nil && rp.FallbackReason != "" {
			why = rp.FallbackReason
		}
		return fmt.Sprintf("prefilled %s, not remotely: %s", orNone(row.PrefillSource), why)
	case !exp.remote && row.PrefillSource == "remote":
		return "prefilled remotely in a phase without P/D"
	case c.CompletionTokens != row.TG:
		return fmt.Sprintf("generated %d tokens, not %d", c.CompletionTokens, row.TG)
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// isolationCase measures the running stream's inter-token latency on the decode instance over one window:
// idle, or while long prompts are sent to the decode node one after another (prefilled remotely when the
// link is in place, beside the stream otherwise).
func (b *pdBench) isolationCase(ctx context.Context, name string, remote bool) IsolationCase {
	o := b.o
	c := IsolationCase{Case: name}
	if name == CaseIdle {
		b.prog.step("isolation: a stream alone for %s", time.Duration(o.IsolationIdle))
	} else {
		b.prog.step("isolation %s: a stream while %d prompt(s) of %d tokens arrive", name, o.IsolationPrompts, o.IsolationPP)
	}
	defer b.prog.advance()
	budget := b.d.ContextLength - isolationStreamPrompt - 8
	if b.d.ContextLength == 0 {
		budget = 4096
	}
	// The stream outlives the window; its deadline only bounds a hung one.
	sctx, cancel := context.WithTimeout(ctx, time.Duration(o.Timeout)+time.Duration(o.IsolationIdle)+time.Minute)
	defer cancel()
	var mu sync.Mutex
	var stamps []time.Time
	running := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := b.api.stream(sctx, b.d.URL, completionRequest{Model: b.d.Model, Prompt: randomPrompt(b.nextSeed(), isolationStreamPrompt), MaxTokens: budget},
			func(t time.Time) {
				mu.Lock()
				stamps = append(stamps, t)
				n := len(stamps)
				mu.Unlock()
				if n == 20 {
					once.Do(func() { close(running) })
				}
			})
		done <- err
	}()
	select {
	case <-running:
	case err := <-done:
		c.Problem = fmt.Sprintf("the stream ended before it was running: %v", err)
		return c
	case <-ctx.Done():
		c.Problem = ctx.Err().Error()
		return c
	}
	var problems []string
	if ins, err := b.api.at(b.d.URL).Instances(ctx); err == nil {
		for _, in := range ins {
			if in.ID == b.d.ID && in.Load.InFlight < 1 {
				problems = append(problems, "the stream is not running on the decode instance")
			}
		}
	}
	from := time.Now()
	if name == CaseIdle {
		_ = sleep(ctx, time.Duration(o.IsolationIdle))
	} else {
		for range o.IsolationPrompts {
			lctx, lcancel := context.WithTimeout(ctx, time.Duration(o.Timeout))
			lc, err := b.api.stream(lctx, b.d.URL, completionRequest{Model: b.d.Model, Prompt: randomPrompt(b.nextSeed(), o.IsolationPP), MaxTokens: 1}, nil)
			lcancel()
			if err != nil {
				problems = append(problems, "a long prompt failed: "+err.Error())
				break
			}
			c.LongTTFTMs = append(c.LongTTFTMs, round(ms(lc.TTFT()), 5))
			src := ""
			if t := lc.Timings; t != nil {
				src = t.PrefillSource
				if t.Route == nil || t.Route.DecodeInstance != b.d.ID {
					problems = append(problems, "a long prompt was not decoded on the decode instance")
				}
			}
			c.LongPrefill = append(c.LongPrefill, src)
			if remote != (src == "remote") {
				problems = append(problems, fmt.Sprintf("a long prompt was prefilled %s", orNone(src)))
			}
		}
	}
	until := time.Now()
	select {
	case err := <-done:
		problems = append(problems, fmt.Sprintf("the stream ended before the window closed (%v)", err))
	default:
	}
	cancel()
	<-done
	mu.Lock()
	var gaps []float64
	for j := 1; j < len(stamps); j++ {
		if stamps[j].After(from) && !stamps[j].After(until) {
			gaps = append(gaps, ms(stamps[j].Sub(stamps[j-1])))
		}
	}
	mu.Unlock()
	c.WindowS = round(until.Sub(from).Seconds(), 5)
	c.Tokens = len(gaps)
	c.ITLMs = Summarize(gaps).rounded()
	c.Problem = strings.Join(slices.Compact(problems), "; ")
	return c
}
