package cost

import (
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/router"
)

func TestPrefillTPSBands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		bands [router.PrefillBands]float64
		u     int
		want  float64
	}{
		{"own band", [4]float64{900, 800, 600, 400}, 3000, 600},
		{"nearest band, shorter on a tie", [4]float64{900, 0, 600, 0}, 1000, 900},
		{"nearest band above", [4]float64{0, 0, 600, 0}, 100, 600},
		{"nothing measured", [4]float64{}, 100, 0},
	}
	for _, tc := range tests {
		if got := PrefillTPS(&router.Speed{PrefillTPS: tc.bands}, tc.u); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRemoteOverlap: the transfer counts only where it outlasts the prefill, plus its last chunk.
func TestRemoteOverlap(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.IngestBPS = 1e18 // out of the way
	mk := func(id, node string, prefill float64) *router.Instance {
		in := &router.Instance{ID: id, Node: node}
		in.Speed.PrefillTPS = [4]float64{prefill, prefill, prefill, prefill}
		in.Speed.DecodeTPS, in.Speed.KVBytesPerToken = 10, 1000
		return in
	}
	d, pi := mk("d", "n1", 100), mk("p", "n2", 1000)
	tests := []struct {
		name     string
		mbps     int64
		transfer time.Duration
	}{
		// 2000 tokens × 1000 B = 2 MB; prefill 2 s; tail 512 kB.
		{"fast link hides under the prefill", 8000, seconds(512e3 / (8000e6 / 8 * 0.6))},
		{"slow link outlasts it", 8, seconds(2e6/(8e6/8*0.6)-2) + seconds(512e3/(8e6/8*0.6))},
	}
	for _, tc := range tests {
		e := p.Remote(pi, d, &router.Path{From: "n2", To: "n1", SpeedMbps: tc.mbps}, 2000, 11, 0)
		if !e.Known() || !e.Nominal {
			t.Fatalf("%s: %+v", tc.name, e)
		}
		if diff := e.Transfer - tc.transfer; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: transfer %v, want %v", tc.name, e.Transfer, tc.transfer)
		}
		if want := e.Queue + e.Prefill + e.Transfer + e.Ingest + 100*time.Millisecond; e.FirstToken != want {
			t.Errorf("%s: first token %v, want %v", tc.name, e.FirstToken, want)
		}
		if e.Total != e.FirstToken+time.Second {
			t.Errorf("%s: total %v, want first token + 10 tokens at 10/s", tc.name, e.Total)
		}
	}
	if e := p.Remote(pi, d, nil, 2000, 11, 0); e.Missing != MissingLink {
		t.Errorf("no path and no measurement: %+v, want missing link", e)
	}
}

// TestRemoteStateBytes: a hybrid's linear-layer states cross once per transfer, after the prefill (with the
// last chunk), and are ingested with the tokens' KV; the decode instance's figures are preferred, the prefill
// instance's stand in, and a model of linear layers alone has no bytes per token but a known size.
func TestRemoteStateBytes(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.IngestBPS = 1e6
	const hybrid = 77266944 // Qwen3-Next's 36 Gated DeltaNet states, bf16 conv windows and float32 recurrences
	mk := func(id, node string, prefill float64, perToken, state int64) *router.Instance {
		in := &router.Instance{ID: id, Node: node}
		in.Speed.PrefillTPS = [4]float64{prefill, prefill, prefill, prefill}
		in.Speed.DecodeTPS, in.Speed.KVBytesPerToken, in.Speed.KVStateBytes = 10, perToken, state
		return in
	}
	tests := []struct {
		name     string
		mbps     int64
		d, pi    *router.Instance
		transfer float64 // seconds
		ingest   float64
		missing  Missing
	}{
		// 2000 tokens × 1000 B = 2 MB computed in 2 s; the last chunk is 512 tokens.
		{name: "dense", mbps: 8000, d: mk("d", "n1", 100, 1000, 0), pi: mk("p", "n2", 1000, 1000, 0),
			transfer: 512e3 / 6e8, ingest: 2},
		{name: "hybrid", mbps: 8000, d: mk("d", "n1", 100, 1000, hybrid), pi: mk("p", "n2", 1000, 1000, hybrid),
			transfer: (512e3 + hybrid) / 6e8, ingest: (2e6 + hybrid) / 1e6},
		{name: "hybrid over a slow link", mbps: 8, d: mk("d", "n1", 100, 1000, hybrid), pi: mk("p", "n2", 1000, 1000, hybrid),
			transfer: 2e6/6e5 - 2 + (512e3+hybrid)/6e5, ingest: (2e6 + hybrid) / 1e6},
		{name: "size known at the prefill instance only", mbps: 8000, d: mk("d", "n1", 100, 0, 0), pi: mk("p", "n2", 1000, 1000, hybrid),
			transfer: (512e3 + hybrid) / 6e8, ingest: (2e6 + hybrid) / 1e6},
		{name: "linear layers alone", mbps: 8000, d: mk("d", "n1", 100, 0, 5e6), pi: mk("p", "n2", 1000, 0, 5e6),
			transfer: 5e6 / 6e8, ingest: 5},
		{name: "size unknown", mbps: 8000, d: mk("d", "n1", 100, 0, 0), pi: mk("p", "n2", 1000, 0, 0), missing: MissingKVSize},
	}
	for _, tc := range tests {
		e := p.Remote(tc.pi, tc.d, &router.Path{From: "n2", To: "n1", SpeedMbps: tc.mbps}, 2000, 11, 0)
		if e.Missing != tc.missing {
			t.Errorf("%s: missing %q, want %q", tc.name, e.Missing, tc.missing)
			continue
		}
		if tc.missing != MissingNone {
			continue
		}
		if diff := e.Transfer - seconds(tc.transfer); diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: transfer %v, want %v", tc.name, e.Transfer, seconds(tc.transfer))
		}
		if diff := e.Ingest - seconds(tc.ingest); diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: ingest %v, want %v", tc.name, e.Ingest, seconds(tc.ingest))
		}
		if want := e.Queue + e.Prefill + e.Transfer + e.Ingest + 100*time.Millisecond; e.FirstToken != want {
			t.Errorf("%s: first token %v, want %v", tc.name, e.FirstToken, want)
		}
	}
}
