package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

// PDReport is everything `duet bench pd` measured: the JSON file of --out.
type PDReport struct {
	Bench     string    `json:"bench"` // "pd"
	Version   string    `json:"duet_version"`
	StartedAt time.Time `json:"started_at"`
	Options   PDOptions `json:"options"`
	Setup     PDSetup   `json:"setup"`
	// Runs are exo's rows: one per measured request (warm-ups are not recorded), with duet's fields added.
	Runs      []PDRun    `json:"runs"`
	Summary   []PDPair   `json:"summary"`
	Isolation *Isolation `json:"isolation,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
}

// PDSetup is the pair of instances the benchmark used and how they ran.
type PDSetup struct {
	Local   bool        `json:"local"`
	Pinning string      `json:"pinning,omitempty"`
	Prefill SideSummary `json:"prefill"`
	Decode  SideSummary `json:"decode"`
	// Threshold is the remote-prefill threshold a local cluster was started with (router and decode engine),
	// 0 when the cluster's own applies.
	Threshold int    `json:"remote_prefill_threshold,omitempty"`
	ModelNote string `json:"model_note,omitempty"`
}

// SideSummary is one instance of the pair.
type SideSummary struct {
	InstanceID    string `json:"instance_id"`
	Node          string `json:"node"`
	Model         string `json:"model"`
	Backend       string `json:"backend,omitempty"`
	Engine        string `json:"engine,omitempty"`
	URL           string `json:"url"`
	KVEndpoint    string `json:"kv_endpoint,omitempty"`
	ContextLength int    `json:"context_length,omitempty"`
	KVBytesPerTok int64  `json:"kv_bytes_per_token,omitempty"`
	// KVStateBytes is what a transfer moves once whatever the prompt's length (a hybrid's linear-attention
	// states): a remote prefill of n tokens moves n·KVBytesPerTok + KVStateBytes.
	KVStateBytes  int64             `json:"kv_state_bytes,omitempty"`
	CPU           *int              `json:"cpu,omitempty"`
	EngineOptions map[string]string `json:"engine_options,omitempty"`
}

// PDRun is one request: exo's row (phase, phase_model_id, pp_tokens, tg, repeat_index, elapsed_s,
// output_text_preview, stats and the instances' ids, models and nodes), then duet's additions.
type PDRun struct {
	Phase             string   `json:"phase"`
	PhaseModelID      string   `json:"phase_model_id"`
	PPTokens          int      `json:"pp_tokens"`
	TG                int      `json:"tg"`
	RepeatIndex       int      `json:"repeat_index"`
	ElapsedS          float64  `json:"elapsed_s"`
	OutputTextPreview string   `json:"output_text_preview"`
	Stats             RunStats `json:"stats"`
	DecodeModelID     string   `json:"decode_model_id"`
	PrefillModelID    string   `json:"prefill_model_id"`
	PrefillInstanceID string   `json:"prefill_instance_id"`
	PrefillNodes      []string `json:"prefill_nodes"`
	DecodeInstanceID  string   `json:"decode_instance_id"`
	DecodeNodes       []string `json:"decode_nodes"`

	// duet's: time to first token and inter-token latency from the stream, where the request ran, and the
	// remote prefill's figures from timings.remote_prefill.
	TTFTMs        float64               `json:"ttft_ms"`
	ITLMs         Percentiles           `json:"itl_ms"`
	DecodedOn     string                `json:"decoded_on,omitempty"`
	PrefillSource string                `json:"prefill_source,omitempty"`
	RemotePrefill *client.RemotePrefill `json:"remote_prefill,omitempty"`
	ServerTimings *ServerTimings        `json:"server_timings,omitempty"`
	// Problem says why the run is not what its phase means (placed elsewhere, not prefilled remotely, an
	// error); such runs are left out of the summary.
	Problem string `json:"problem,omitempty"`

	itls []float64 // every inter-token gap (ms), for the phase's percentiles
}

// RunStats are exo's generation_stats, measured on the client: prompt_tps is the prompt's tokens over the
// time to first token, generation_tps is (tokens − 1) over the span from the first token to the last.
type RunStats struct {
	PromptTPS        float64 `json:"prompt_tps"`
	GenerationTPS    float64 `json:"generation_tps"`
	PromptTokens     int     `json:"prompt_tokens"`
	GenerationTokens int     `json:"generation_tokens"`
}

// ServerTimings are the engine's own phase times from the response's timings.
type ServerTimings struct {
	QueueMs      float64 `json:"queue_ms"`
	PrefillMs    float64 `json:"prefill_ms"`
	FirstTokenMs float64 `json:"first_token_ms"`
	DecodeMs     float64 `json:"decode_ms"`
	TotalMs      float64 `json:"total_ms"`
}

// PDPair is the summary of one (pp, tg) pair: each phase's means, as exo prints them, with percentiles.
type PDPair struct {
	PPTokens int            `json:"pp_tokens"`
	TG       int            `json:"tg"`
	Phases   []PhaseSummary `json:"phases"`
	// Speedups are exo's: the baseline's mean elapsed time over the disaggregated one's.
	SpeedupVsDecodeAlone  float64 `json:"speedup_vs_decode_alone,omitempty"`
	SpeedupVsPrefillAlone float64 `json:"speedup_vs_prefill_alone,omitempty"`
}

// PhaseSummary is one phase of a pair.
type PhaseSummary struct {
	Phase         string      `json:"phase"`
	Runs          int         `json:"runs"`
	Excluded      int         `json:"excluded,omitempty"`
	ElapsedS      float64     `json:"elapsed_s"`
	PromptTPS     float64     `json:"prompt_tps"`
	GenerationTPS float64     `json:"generation_tps"`
	TTFTMs        Percentiles `json:"ttft_ms"`
	ITLMs         Percentiles `json:"itl_ms"`
	// KV figures of remote prefills (means): bytes moved, the decode side's wait for the first chunk and the
	// transfer time.
	KVBytes    float64 `json:"kv_bytes,omitempty"`
	WaitMs     float64 `json:"kv_wait_ms,omitempty"`
	TransferMs float64 `json:"kv_transfer_ms,omitempty"`
}

// Isolation is the decode isolation case: a stream running on the decode instance while long prompts arrive.
type Isolation struct {
	StreamPromptTokens int             `json:"stream_prompt_tokens"`
	LongPromptTokens   int             `json:"long_prompt_tokens"`
	LongPrompts        int             `json:"long_prompts"`
	Cases              []IsolationCase `json:"cases"`
}

// Isolation cases.
const (
	CaseIdle          = "idle"
	CaseLocalPrefill  = "without_pd"
	CaseDisaggregated = "with_pd"
)

// IsolationCase is the running stream's inter-token latency over one window.
type IsolationCase struct {
	Case string `json:"case"`
	// WindowS is how long the window lasted: from the first long prompt sent to the last one's first token
	// (or the idle time).
	WindowS float64     `json:"window_s,omitempty"`
	Tokens  int         `json:"tokens,omitempty"`
	ITLMs   Percentiles `json:"itl_ms"`
	// LongTTFTMs and LongPrefill are each long prompt's time to first token and where it was prefilled.
	LongTTFTMs  []float64 `json:"long_ttft_ms,omitempty"`
	LongPrefill []string  `json:"long_prefill_source,omitempty"`
	Skipped     string    `json:"skipped,omitempty"`
	Problem     string    `json:"problem,omitempty"`
}

// summarize builds each pair's summary from the runs.
func summarize(pairs [][2]int, runs []PDRun) []PDPair {
	var out []PDPair
	for _, pr := range pairs {
		p := PDPair{PPTokens: pr[0], TG: pr[1]}
		elapsed := map[string]float64{}
		for _, phase := range phaseOrder {
			var ok []PDRun
			excluded := 0
			for _, r := range runs {
				if r.Phase != phase || r.PPTokens != pr[0] || r.TG != pr[1] {
					continue
				}
				if r.Problem != "" {
					excluded++
					continue
				}
				ok = append(ok, r)
			}
			if len(ok) == 0 && excluded == 0 {
				continue
			}
			s := PhaseSummary{Phase: phase, Runs: len(ok), Excluded: excluded}
			var el, ptps, gtps, ttft, itl, kv, wait, xfer []float64
			for _, r := range ok {
				el = append(el, r.ElapsedS)
				ptps = append(ptps, r.Stats.PromptTPS)
				gtps = append(gtps, r.Stats.GenerationTPS)
				ttft = append(ttft, r.TTFTMs)
				itl = append(itl, r.itls...)
				if rp := r.RemotePrefill; rp != nil && r.PrefillSource == "remote" {
					kv = append(kv, float64(rp.Bytes))
					wait = append(wait, rp.WaitMs)
					xfer = append(xfer, rp.TransferMs)
				}
			}
			s.ElapsedS, s.PromptTPS, s.GenerationTPS = round(mean(el), 5), round(mean(ptps), 5), round(mean(gtps), 5)
			s.TTFTMs, s.ITLMs = Summarize(ttft).rounded(), Summarize(itl).rounded()
			s.KVBytes, s.WaitMs, s.TransferMs = round(mean(kv), 6), round(mean(wait), 5), round(mean(xfer), 5)
			if len(ok) > 0 {
				elapsed[phase] = s.ElapsedS
			}
			p.Phases = append(p.Phases, s)
		}
		if d := elapsed[PhaseDisaggregated]; d > 0 {
			if da := elapsed[PhaseDecodeAlone]; da > 0 {
				p.SpeedupVsDecodeAlone = round(da/d, 4)
			}
			if pa := elapsed[PhasePrefillAlone]; pa > 0 {
				p.SpeedupVsPrefillAlone = round(pa/d, 4)
			}
		}
		out = append(out, p)
	}
	return out
}

// RenderTables writes exo's per-pair table with duet's columns, then the isolation table.
func (r *PDReport) RenderTables(w io.Writer) {
	fmt.Fprintf(w, "model %s   prefill: %s on %s (%s)   decode: %s on %s (%s)\n", r.modelName(),
		r.Setup.Prefill.InstanceID, r.Setup.Prefill.Node, sideBackend(r.Setup.Prefill),
		r.Setup.Decode.InstanceID, r.Setup.Decode.Node, sideBackend(r.Setup.Decode))
	if r.Setup.Pinning != "" {
		fmt.Fprintln(w, r.Setup.Pinning)
	}
	for _, p := range r.Summary {
		t := Table{
			Title:  fmt.Sprintf("pp=%d  tg=%d", p.PPTokens, p.TG),
			Header: []string{"phase", "elapsed", "prompt_tps", "gen_tps", "ttft p50", "ttft p99", "itl p50", "itl p99", "kv moved", "kv transfer"},
		}
		for i, phase := range phaseOrder {
			s, ok := findPhase(p.Phases, phase)
			if !ok && i >= 3 {
				continue // exo's table always shows its three phases; another phase only when it ran
			}
			if !ok || s.Runs == 0 {
				row := []string{phase, dash, dash, dash, dash, dash, dash, dash, dash, dash}
				if ok && s.Excluded > 0 {
					row[1] = fmt.Sprintf("(%d excluded)", s.Excluded)
				}
				t.Rows = append(t.Rows, row)
				continue
			}
			name := phase
			if s.Excluded > 0 {
				name += fmt.Sprintf(" (%d excluded)", s.Excluded)
			}
			t.Rows = append(t.Rows, []string{name, fmtSeconds(s.ElapsedS), fmtRate(s.PromptTPS), fmtRate(s.GenerationTPS),
				fmtMs(s.TTFTMs.P50), fmtMs(s.TTFTMs.P99), fmtMs(s.ITLMs.P50), fmtMs(s.ITLMs.P99), fmtBytes(s.KVBytes), fmtMs(s.TransferMs)})
		}
		if p.SpeedupVsDecodeAlone > 0 {
			t.Footer = append(t.Footer, fmt.Sprintf("  speedup vs decode_alone:  %.2fx", p.SpeedupVsDecodeAlone))
		}
		if p.SpeedupVsPrefillAlone > 0 {
			t.Footer = append(t.Footer, fmt.Sprintf("  speedup vs prefill_alone: %.2fx", p.SpeedupVsPrefillAlone))
		}
		t.Render(w)
	}
	if iso := r.Isolation; iso != nil {
		t := Table{
			Title: fmt.Sprintf("decode isolation: a stream's inter-token latency on the decode instance while %d prompt(s) of %d tokens arrive",
				iso.LongPrompts, iso.LongPromptTokens),
			Header: []string{"case", "window", "tokens", "itl p50", "itl p90", "itl p99", "itl max", "long ttft"},
		}
		for _, c := range iso.Cases {
			if c.Skipped != "" {
				t.Rows = append(t.Rows, []string{c.Case, "skipped", dash, dash, dash, dash, dash, dash})
				t.Footer = append(t.Footer, "  "+c.Case+" skipped: "+c.Skipped)
				continue
			}
			ttft := dash
			if len(c.LongTTFTMs) > 0 {
				ttft = fmtMs(mean(c.LongTTFTMs))
			}
			t.Rows = append(t.Rows, []string{c.Case, fmtSeconds(c.WindowS), fmt.Sprint(c.Tokens), fmtMs(c.ITLMs.P50), fmtMs(c.ITLMs.P90),
				fmtMs(c.ITLMs.P99), fmtMs(c.ITLMs.Max), ttft})
			if c.Problem != "" {
				t.Footer = append(t.Footer, "  "+c.Case+": "+c.Problem)
			}
		}
		if idle, ok := isoCase(iso, CaseIdle); ok && idle.ITLMs.P99 > 0 {
			for _, c := range iso.Cases {
				if c.Case != CaseIdle && c.Skipped == "" && c.ITLMs.N > 0 {
					t.Footer = append(t.Footer, fmt.Sprintf("  %s: itl p99 %.2fx idle", c.Case, c.ITLMs.P99/idle.ITLMs.P99))
				}
			}
		}
		t.Render(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
}

// modelName is the model as the user named it (a local cluster's generated model by its name, not the
// temporary directory it was written to), else the decode instance's.
func (r *PDReport) modelName() string {
	if r.Options.Model != "" {
		return r.Options.Model
	}
	return r.Setup.Decode.Model
}

func sideBackend(s SideSummary) string {
	parts := []string{}
	if s.Engine != "" {
		parts = append(parts, s.Engine)
	}
	if s.Backend != "" {
		parts = append(parts, s.Backend)
	}
	if len(parts) == 0 {
		return "?"
	}
	return strings.Join(parts, "/")
}

func findPhase(ps []PhaseSummary, phase string) (PhaseSummary, bool) {
	for _, s := range ps {
		if s.Phase == phase {
			return s, true
		}
	}
	return PhaseSummary{}, false
}

func isoCase(iso *Isolation, name string) (IsolationCase, bool) {
	for _, c := range iso.Cases {
		if c.Case == name {
			return c, true
		}
	}
	return IsolationCase{}, false
}

// Chart draws the report: elapsed time, TTFT and generation speed per pair and phase, and the isolation
// case's inter-token latencies.
func (r *PDReport) Chart() Chart {
	c := Chart{Title: "duet bench pd: disaggregated prefill/decode"}
	c.Subtitle = append(c.Subtitle, fmt.Sprintf("prefill %s on %s (%s), decode %s on %s (%s); model %s",
		r.Setup.Prefill.InstanceID, r.Setup.Prefill.Node, sideBackend(r.Setup.Prefill),
		r.Setup.Decode.InstanceID, r.Setup.Decode.Node, sideBackend(r.Setup.Decode), r.modelName()))
	if r.Setup.Pinning != "" {
		c.Subtitle = append(c.Subtitle, r.Setup.Pinning)
	}
	c.Subtitle = append(c.Subtitle, fmt.Sprintf("%d repeat(s) per pair and phase, means; %s", r.Options.Repeat, r.StartedAt.UTC().Format("2006-01-02 15:04 UTC")))
	var groups []string
	for _, p := range r.Summary {
		groups = append(groups, fmt.Sprintf("pp=%d tg=%d", p.PPTokens, p.TG))
	}
	var present []string
	for _, phase := range phaseOrder {
		for _, p := range r.Summary {
			if s, ok := findPhase(p.Phases, phase); ok && s.Runs > 0 {
				present = append(present, phase)
				break
			}
		}
	}
	panel := func(title, unit string, f func(PhaseSummary) float64) Panel {
		pn := Panel{Title: title, Unit: unit, Groups: groups, Series: present}
		for _, p := range r.Summary {
			row := make([]float64, len(present))
			for i, phase := range present {
				row[i] = math.NaN()
				if s, ok := findPhase(p.Phases, phase); ok && s.Runs > 0 {
					row[i] = f(s)
				}
			}
			pn.Values = append(pn.Values, row)
		}
		return pn
	}
	c.Panels = append(c.Panels,
		panel("End-to-end time per request (lower is better)", "seconds", func(s PhaseSummary) float64 { return s.ElapsedS }),
		panel("Time to first token, p50 (lower is better)", "ms", func(s PhaseSummary) float64 { return s.TTFTMs.P50 }),
		panel("Generation speed (higher is better)", "tokens/s", func(s PhaseSummary) float64 { return s.GenerationTPS }),
	)
	if iso := r.Isolation; iso != nil {
		pn := Panel{Title: fmt.Sprintf("Decode isolation: a running stream's inter-token latency while %d-token prompts arrive", iso.LongPromptTokens),
			Unit: "ms", Series: []string{"p50", "p90", "p99"}}
		for _, cs := range iso.Cases {
			if cs.Skipped != "" || cs.ITLMs.N == 0 {
				continue
			}
			pn.Groups = append(pn.Groups, strings.ReplaceAll(cs.Case, "_", " "))
			pn.Values = append(pn.Values, []float64{cs.ITLMs.P50, cs.ITLMs.P90, cs.ITLMs.P99})
		}
		if len(pn.Groups) > 0 {
			c.Panels = append(c.Panels, pn)
		}
	}
	return c
}

// problems lists the runs left out of the summary, for the notes.
func problems(runs []PDRun) []string {
	var out []string
	for _, r := range runs {
		if r.Problem != "" {
			out = append(out, fmt.Sprintf("%s pp=%d tg=%d run %d: %s", r.Phase, r.PPTokens, r.TG, r.RepeatIndex, r.Problem))
		}
	}
	return slices.Compact(out)
}
