package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/client"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test ./bench -run %s -update to accept):\n--- got\n%s\n--- want\n%s", name, t.Name(), got, want)
	}
}

var started = time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

// samplePD is a report as a local run of two pairs with every phase would make, with made-up figures.
func samplePD() *PDReport {
	o := PDOptions{Local: true, Model: "pd-bench", PP: []int{2000, 8000}, TG: []int{64}, Repeat: 2, Cooldown: Seconds(2 * time.Second),
		CompareBaseline: true, CPUs: "0,1", Isolation: true, IsolationPP: 4096, IsolationPrompts: 2, IsolationIdle: Seconds(3 * time.Second),
		Timeout: Seconds(30 * time.Minute), SettleTimeout: Seconds(2 * time.Minute),
		PrefillOpts: map[string]string{"backend": "cpu"}, DecodeOpts: map[string]string{}}
	cpu0, cpu1 := 0, 1
	rep := &PDReport{Bench: "pd", Version: "test", StartedAt: started, Options: o,
		Setup: PDSetup{Local: true, Threshold: 1000, ModelNote: "pd-bench: a generated model",
			Pinning: "pinned with taskset: the prefill node (gateway, engine and router) on CPU 0, the decode node on CPU 1, one core each",
			Prefill: SideSummary{InstanceID: "p-0", Node: "p", Model: "/tmp/model-pd-bench", Backend: "cpu", Engine: "mlx-engine", URL: "http://127.0.0.1:1000",
				KVEndpoint: "127.0.0.1:2000", ContextLength: 16384, KVBytesPerTok: 2048, CPU: &cpu0, EngineOptions: map[string]string{"prefix_cache_mb": "0", "backend": "cpu"}},
			Decode: SideSummary{InstanceID: "d-0", Node: "d", Model: "/tmp/model-pd-bench", Backend: "cpu", Engine: "mlx-engine", URL: "http://127.0.0.2:1000",
				ContextLength: 16384, KVBytesPerTok: 2048, CPU: &cpu1, EngineOptions: map[string]string{"prefix_cache_mb": "0", "remote_prefill_threshold": "1000"}}}}
	// Per phase: seconds per prompt token, and a decode step.
	type speed struct {
		prefill, step float64
		remote        bool
	}
	speeds := map[string]speed{PhasePrefillAlone: {0.0021, 0.011, false}, PhaseDisaggregated: {0.0022, 0.009, true}, PhaseDecodeAlone: {0.0020, 0.009, false}}
	for _, phase := range []string{PhasePrefillAlone, PhaseDisaggregated, PhaseDecodeAlone} {
		sp := speeds[phase]
		for _, pr := range o.pairs() {
			for r := range o.Repeat {
				pp, tg := pr[0], pr[1]
				ttft := sp.prefill*float64(pp) + 0.01*float64(r)
				elapsed := ttft + sp.step*float64(tg-1)
				itls := make([]float64, tg-1)
				for i := range itls {
					itls[i] = sp.step*1000 + float64(i%5)*0.25
				}
				run := PDRun{Phase: phase, PhaseModelID: "/tmp/model-pd-bench", PPTokens: pp, TG: tg, RepeatIndex: r,
					ElapsedS: round(elapsed, 6), OutputTextPreview: "the lighthouse",
					Stats:         RunStats{PromptTPS: round(float64(pp)/ttft, 5), GenerationTPS: round(1/sp.step, 5), PromptTokens: pp, GenerationTokens: tg},
					DecodeModelID: "/tmp/model-pd-bench", PrefillModelID: "/tmp/model-pd-bench", PrefillInstanceID: "p-0", PrefillNodes: []string{"p"},
					DecodeInstanceID: "d-0", DecodeNodes: []string{"d"}, TTFTMs: round(ttft*1000, 6), itls: itls, ITLMs: Summarize(itls).rounded(),
					DecodedOn: "d-0", PrefillSource: "local",
					ServerTimings: &ServerTimings{PrefillMs: round(ttft*1000-2, 6), FirstTokenMs: round(ttft*1000-1, 6), DecodeMs: round(sp.step*1000*float64(tg-1), 6), TotalMs: round(elapsed*1000-1, 6)}}
				if phase == PhasePrefillAlone {
					run.DecodedOn = "p-0"
				}
				if sp.remote {
					run.PrefillSource = "remote"
					run.RemotePrefill = &client.RemotePrefill{Endpoint: "127.0.0.1:2000", InstanceID: "p-0", Exact: true, Tokens: pp - 1, Bytes: int64(pp-1) * 2048, WaitMs: 12.5, TransferMs: round(ttft*1000-20, 6), IngestMs: 3.25, Attempts: 1}
				}
				rep.Runs = append(rep.Runs, run)
			}
		}
	}
	// One run that fell back: kept, left out of the summary.
	rep.Runs[5].PrefillSource, rep.Runs[5].Problem = "local", "prefilled local, not remotely: peer busy"
	rep.Summary = summarize(o.pairs(), rep.Runs)
	rep.Isolation = &Isolation{StreamPromptTokens: isolationStreamPrompt, LongPromptTokens: 4096, LongPrompts: 2, Cases: []IsolationCase{
		{Case: CaseIdle, WindowS: 3, Tokens: 330, ITLMs: Percentiles{N: 330, Mean: 9.1, P50: 9, P90: 9.8, P99: 12.5, Max: 14}},
		{Case: CaseDisaggregated, WindowS: 18.2, Tokens: 1900, ITLMs: Percentiles{N: 1900, Mean: 9.6, P50: 9.2, P90: 10.4, P99: 15.1, Max: 31}, LongTTFTMs: []float64{9050, 9100}, LongPrefill: []string{"remote", "remote"}},
		{Case: CaseLocalPrefill, WindowS: 17.9, Tokens: 310, ITLMs: Percentiles{N: 310, Mean: 57.7, P50: 10.1, P90: 212, P99: 390, Max: 421}, LongTTFTMs: []float64{8900, 9000}, LongPrefill: []string{"local", "local"}},
	}}
	rep.Notes = problems(rep.Runs)
	return rep
}

func TestPDReportJSON(t *testing.T) {
	t.Parallel()
	data, err := json.MarshalIndent(samplePD(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "pd.json.golden", append(data, '\n'))
	// exo's row fields are where exo's consumers look for them.
	var rows struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(data, &rows); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"phase", "phase_model_id", "pp_tokens", "tg", "repeat_index", "elapsed_s", "output_text_preview", "stats",
		"decode_model_id", "prefill_model_id", "prefill_instance_id", "prefill_nodes", "decode_instance_id", "decode_nodes"} {
		if _, ok := rows.Runs[0][k]; !ok {
			t.Errorf("a run has no %q, which exo's rows have", k)
		}
	}
	stats := rows.Runs[0]["stats"].(map[string]any)
	for _, k := range []string{"prompt_tps", "generation_tps", "prompt_tokens", "generation_tokens"} {
		if _, ok := stats[k]; !ok {
			t.Errorf("stats has no %q", k)
		}
	}
}

func TestPDSummary(t *testing.T) {
	t.Parallel()
	rep := samplePD()
	if len(rep.Summary) != 2 {
		t.Fatalf("%d pairs in the summary", len(rep.Summary))
	}
	p := rep.Summary[0]
	if p.PPTokens != 2000 || len(p.Phases) != 3 || p.Phases[0].Phase != PhaseDisaggregated {
		t.Fatalf("first pair %+v", p)
	}
	// The run with a problem is left out: pair 2000's disaggregated phase has one of its two runs.
	dis, _ := findPhase(p.Phases, PhaseDisaggregated)
	if dis.Runs != 1 || dis.Excluded != 1 {
		t.Errorf("excluded runs: %+v", dis)
	}
	q := rep.Summary[1]
	da, _ := findPhase(q.Phases, PhaseDecodeAlone)
	dis, _ = findPhase(q.Phases, PhaseDisaggregated)
	if want := round(da.ElapsedS/dis.ElapsedS, 4); q.SpeedupVsDecodeAlone != want {
		t.Errorf("speedup vs decode_alone %v, want exo's ratio of mean elapsed times %v", q.SpeedupVsDecodeAlone, want)
	}
	if math.Abs(dis.KVBytes-7999*2048) > 100 || dis.TransferMs == 0 {
		t.Errorf("KV figures %+v", dis)
	}
	if da.KVBytes != 0 {
		t.Errorf("a phase without P/D moved KV: %+v", da)
	}
	if dis.ITLMs.N != 2*63 {
		t.Errorf("ITL sample of %d, want every gap of both runs", dis.ITLMs.N)
	}
}

func TestPDTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	samplePD().RenderTables(&b)
	golden(t, "pd_table.golden", b.Bytes())
}

func TestPDChart(t *testing.T) {
	t.Parallel()
	svg := samplePD().Chart().SVG()
	checkSVG(t, svg)
	golden(t, "pd.svg.golden", svg)
}

// checkSVG parses an SVG document to its end: well-formed XML with an <svg> root in the SVG namespace.
func checkSVG(t *testing.T, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element %v", e.Name)
				}
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		t.Errorf("%d root elements, depth %d at the end", roots, depth)
	}
}

func TestChartEdgeCases(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Chart{
		"no panels":       {Title: "empty"},
		"no groups":       {Title: "t", Panels: []Panel{{Title: "nothing", Unit: "ms"}}},
		"missing values":  {Title: "t", Panels: []Panel{{Title: "p", Series: []string{"a", "b"}, Groups: []string{"g1", "g2"}, Values: [][]float64{{1, math.NaN()}, {}}}}},
		"all zero":        {Title: "t", Panels: []Panel{{Title: "p", Series: []string{"a"}, Groups: []string{"g"}, Values: [][]float64{{0}}}}},
		"markup in names": {Title: `<b>"x" & 'y'</b>`, Subtitle: []string{"a < b"}, Panels: []Panel{{Title: "p&q", Unit: "<ms>", Series: []string{"s<1>"}, Groups: []string{"g&"}, Values: [][]float64{{2.5}}}}},
		"huge values":     {Title: "t", Panels: []Panel{{Title: "p", Series: []string{"a"}, Groups: []string{"g"}, Values: [][]float64{{123456789}}}}},
	} {
		t.Run(name, func(t *testing.T) { checkSVG(t, c.SVG()) })
	}
	svg := string(Chart{Title: "<x>", Panels: []Panel{{Series: []string{"a&b"}, Groups: []string{"g"}, Values: [][]float64{{1}}}}}.SVG())
	if !strings.Contains(svg, "&lt;x&gt;") || !strings.Contains(svg, "a&amp;b") {
		t.Errorf("text is not escaped:\n%s", svg)
	}
}

func TestNiceTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		hi    float64
		step  float64
		ticks int
	}{
		{10, 2, 5}, {9.1, 2, 5}, {0.0076, 0.002, 4}, {78827, 20000, 4}, {1, 0.2, 5}, {0, 1, 4}, {3.3, 1, 4},
	} {
		step, ticks := niceTicks(c.hi)
		if math.Abs(step-c.step) > 1e-12 || ticks != c.ticks {
			t.Errorf("niceTicks(%v) = %v × %d, want %v × %d", c.hi, step, ticks, c.step, c.ticks)
		}
		if step*float64(ticks) < c.hi {
			t.Errorf("niceTicks(%v): the axis ends at %v, below the value", c.hi, step*float64(ticks))
		}
	}
}

func TestTableRender(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	Table{Title: "pp=2048  tg=128", Header: []string{"phase", "elapsed", "µs"},
		Rows:   [][]string{{"disaggregated", "1.00s", "7"}, {"decode_alone", "12.50s", "1234"}},
		Footer: []string{"  speedup vs decode_alone:  12.50x"}}.Render(&b)
	golden(t, "table.golden", b.Bytes())
}

func sampleLoad() *LoadReport {
	rep := &LoadReport{Bench: "load", Version: "test", StartedAt: started, Model: "echo",
		Options: LoadOptions{Local: true, Engine: "echo", Model: "echo", Clients: 4, Mix: []MixItem{{100, 0.7}, {4000, 0.3}}, MaxTokens: 16,
			Duration: Seconds(10 * time.Second), Timeout: Seconds(time.Minute), Seed: 1}}
	for i := range 40 {
		n := 100
		if i%3 == 0 {
			n = 4000
		}
		r := LoadResult{Client: i % 4, StartS: float64(i) / 4, PromptTokens: n, Tokens: 16, TTFTMs: float64(n)/100 + float64(i%7), LatencyMs: float64(n)/100 + 40 + float64(i%5)}
		r.itls = []float64{2, 2.5, 3, 2, 8}
		if i == 7 {
			r = LoadResult{Client: 3, StartS: 1.75, PromptTokens: 100, LatencyMs: 0.5, Error: "HTTP 429: too many requests"}
		}
		rep.Results = append(rep.Results, r)
	}
	rep.summarize(10*time.Second, 10500*time.Millisecond)
	return rep
}

func TestLoadReport(t *testing.T) {
	t.Parallel()
	rep := sampleLoad()
	if rep.Requests != 40 || rep.OK != 39 || rep.Errors != 1 || rep.ErrorKinds["HTTP 429: too many requests"] != 1 {
		t.Errorf("counts %d %d %d %v", rep.Requests, rep.OK, rep.Errors, rep.ErrorKinds)
	}
	if len(rep.Buckets) != 2 || rep.Buckets[0].PromptTokens != 100 || rep.Buckets[1].Requests != 14 {
		t.Errorf("buckets %+v", rep.Buckets)
	}
	var b bytes.Buffer
	rep.Table().Render(&b)
	golden(t, "load_table.golden", b.Bytes())
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "load.json.golden", append(data, '\n'))
	svg := rep.Chart().SVG()
	checkSVG(t, svg)
	golden(t, "load.svg.golden", svg)
}

func TestGatewayAndKVWireTables(t *testing.T) {
	t.Parallel()
	gw := &GatewayReport{Bench: "gateway", Version: "test", StartedAt: started, Options: GatewayOptions{Requests: 2000, Warmup: 200, StreamTokens: 200000, Streams: 3},
		Latency: []GatewayCase{
			{Case: "short", PromptBytes: 11, DirectUs: Percentiles{N: 2000, P50: 240, P99: 900}, GatewayUs: Percentiles{N: 2000, P50: 610, P99: 1800}, AddedP50Us: 370, AddedP99Us: 900},
			{Case: "long-tokenized", PromptBytes: 2160, DirectUs: Percentiles{N: 2000, P50: 430, P99: 1500}, GatewayUs: Percentiles{N: 2000, P50: 1200, P99: 15000}, AddedP50Us: 770, AddedP99Us: 13500},
		},
		Stream: &GatewayStreams{Tokens: 200000, Streams: 3, DirectTokPerS: 150000, GatewayTokPerS: 120000, Ratio: 0.8}}
	kv := &KVWireReport{Bench: "kvwire", Version: "test", StartedAt: started, Server: "127.0.0.1:7450", BytesPerOp: 512 << 20,
		Options:    KVWireOptions{Local: true, Layers: 32, KVHeads: 8, HeadDim: 128, DType: "bfloat16", Tokens: 4096, ChunkTokens: 512, Repeat: 5, Warmup: 1},
		KVWireMBps: 1650, RawMBps: 1800, Ratio: 0.9167, KVWireMs: Percentiles{N: 5, P50: 325, P99: 340}, RawMs: Percentiles{N: 5, P50: 298, P99: 310}}
	var b bytes.Buffer
	gw.Table().Render(&b)
	kv.Table().Render(&b)
	golden(t, "gateway_kvwire_table.golden", b.Bytes())
	checkSVG(t, gw.Chart().SVG())
	checkSVG(t, kv.Chart().SVG())
}
