package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/duet-ai/duet/bench"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// The `duet bench` tests run the built binary's subcommand as a user would, with tiny sizes, and check the
// JSON it writes: every phase present, sane figures, and (for pd) the disaggregated phase really prefilled
// remotely. They assert no timings.
//
//	go test ./gateway/e2e -run 'TestBench' -v

// runBench runs `duet bench args...` and returns its stdout; it fails the test, with stderr, if it fails.
func runBench(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, duetBin, append([]string{"bench"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("duet bench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func readJSON(t *testing.T, path string, out any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// checkSVGFile parses an SVG file to its end.
func checkSVGFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed: %v", path, err)
		}
	}
	if !bytes.HasPrefix(b, []byte("<svg ")) {
		t.Errorf("%s does not start with <svg", path)
	}
}

// TestBenchPDLocal runs exo's benchmark on a local cluster of a tiny generated model, every phase and the
// isolation case.
func TestBenchPDLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster")
	}
	dir := t.TempDir()
	out := runBench(t, 3*time.Minute, "pd", "--local", "--model", "tiny", "--pp", "64,96", "--tg", "8", "--repeat", "1", "--allow-short",
		"--compare-baseline", "--auto", "--cooldown", "0", "--isolation-prompts", "1", "--isolation-idle", "300ms", "--quiet",
		"--out", filepath.Join(dir, "pd.json"), "--svg", filepath.Join(dir, "pd.svg"))
	for _, want := range []string{"pp=64  tg=8", "pp=96  tg=8", "speedup vs decode_alone:", "speedup vs prefill_alone:", "decode isolation", "pinned"} {
		if !strings.Contains(out, want) { // "pinned" also matches "not pinned", where taskset is missing
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	var rep bench.PDReport
	readJSON(t, filepath.Join(dir, "pd.json"), &rep)
	checkSVGFile(t, filepath.Join(dir, "pd.svg"))
	if rep.Bench != "pd" || !rep.Setup.Local || rep.Setup.Pinning == "" || rep.Setup.Prefill.Node == rep.Setup.Decode.Node {
		t.Errorf("setup %+v", rep.Setup)
	}
	phases := map[string]int{}
	for _, r := range rep.Runs {
		phases[r.Phase]++
		if r.Problem != "" {
			t.Errorf("%s pp=%d: %s", r.Phase, r.PPTokens, r.Problem)
		}
		if r.ElapsedS <= 0 || r.TTFTMs <= 0 || r.TTFTMs/1000 > r.ElapsedS || r.Stats.GenerationTokens != 8 || r.Stats.PromptTokens != r.PPTokens ||
			r.Stats.PromptTPS <= 0 || r.Stats.GenerationTPS <= 0 || r.ITLMs.N != 7 {
			t.Errorf("%s pp=%d: elapsed %vs, ttft %vms, stats %+v, itl %+v", r.Phase, r.PPTokens, r.ElapsedS, r.TTFTMs, r.Stats, r.ITLMs)
		}
		if r.PrefillInstanceID != rep.Setup.Prefill.InstanceID || r.DecodeInstanceID != rep.Setup.Decode.InstanceID {
			t.Errorf("%s: instances %s → %s", r.Phase, r.PrefillInstanceID, r.DecodeInstanceID)
		}
		switch r.Phase {
		case bench.PhaseDisaggregated:
			rp := r.RemotePrefill
			if r.PrefillSource != "remote" || rp == nil || rp.InstanceID != rep.Setup.Prefill.InstanceID || rp.Tokens != r.PPTokens-1 ||
				rp.Bytes != int64(r.PPTokens-1)*rep.Setup.Decode.KVBytesPerTok+rep.Setup.Decode.KVStateBytes || rp.TransferMs <= 0 {
				t.Errorf("disaggregated pp=%d was not prefilled remotely by %s: %q %+v", r.PPTokens, rep.Setup.Prefill.InstanceID, r.PrefillSource, rp)
			}
			if r.DecodedOn != rep.Setup.Decode.InstanceID {
				t.Errorf("disaggregated decoded on %s", r.DecodedOn)
			}
		case bench.PhasePrefillAlone:
			if r.PrefillSource != "local" || r.DecodedOn != rep.Setup.Prefill.InstanceID {
				t.Errorf("prefill_alone: %q on %s", r.PrefillSource, r.DecodedOn)
			}
		case bench.PhaseDecodeAlone:
			if r.PrefillSource != "local" || r.DecodedOn != rep.Setup.Decode.InstanceID {
				t.Errorf("decode_alone: %q on %s", r.PrefillSource, r.DecodedOn)
			}
		case bench.PhaseAuto:
			// Prompts this short stay where they are decoded, on the node they were sent to (PD auto's MinTokens).
			if r.PrefillSource == "remote" || r.DecodedOn != rep.Setup.Decode.InstanceID {
				t.Errorf("auto pp=%d: %q on %s, want a local prefill on the decode instance", r.PPTokens, r.PrefillSource, r.DecodedOn)
			}
		}
	}
	for _, p := range []string{bench.PhasePrefillAlone, bench.PhaseDisaggregated, bench.PhaseAuto, bench.PhaseDecodeAlone} {
		if phases[p] != 2 {
			t.Errorf("phase %s has %d runs, want 2 (two pairs, one repeat)", p, phases[p])
		}
	}
	if len(rep.Summary) != 2 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	for _, s := range rep.Summary {
		if len(s.Phases) != 4 || s.SpeedupVsDecodeAlone <= 0 || s.SpeedupVsPrefillAlone <= 0 {
			t.Errorf("pair pp=%d: %+v", s.PPTokens, s)
		}
	}
	if rep.Isolation == nil || len(rep.Isolation.Cases) != 3 {
		t.Fatalf("isolation %+v", rep.Isolation)
	}
	for _, c := range rep.Isolation.Cases {
		if c.Problem != "" || c.Skipped != "" || c.ITLMs.N == 0 || c.WindowS <= 0 {
			t.Errorf("isolation case %+v", c)
		}
		if c.Case != bench.CaseIdle && (len(c.LongPrefill) != 1 || (c.LongPrefill[0] == "remote") != (c.Case == bench.CaseDisaggregated)) {
			t.Errorf("isolation case %s: long prompts prefilled %v", c.Case, c.LongPrefill)
		}
	}
}

// TestBenchPDURL benchmarks a running cluster of two nodes: with --create (the benchmark's own instances, in
// exo's order) and with the cluster's instances named, where prefill_alone and decode_alone cannot run.
func TestBenchPDURL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster")
	}
	secret := writeSecret(t, "the benchmark cluster's secret, long enough")
	// The nodes let the API load models from the directory the benchmark's model is made in (--models-dir).
	dir := t.TempDir()
	n1 := benchNode(t, "127.0.0.1", secret, "", "--models-dir", dir)
	n2 := benchNode(t, "127.0.0.2", secret, n1.gossip, "--models-dir", dir)
	id1, id2 := n1.nodeID(t), n2.nodeID(t)
	waitFor(t, 20*time.Second, "two ready instances", func() bool { return len(n1.readyOn(t)) == 2 && len(n2.readyOn(t)) == 2 })

	// A model of the benchmark's own: the cluster serves the embedded one already.
	model := filepath.Join(dir, "tiny")
	if err := modelgen.Generate(model, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	runBench(t, 3*time.Minute, "pd", "--url", n1.url, "--create", "--model", model, "--prefill-node", id2, "--decode-node", id1,
		"--pp", "128", "--tg", "4", "--allow-short", "--compare-baseline", "--cooldown", "0", "--isolation=false", "--quiet",
		"--out", filepath.Join(dir, "create.json"))
	var rep bench.PDReport
	readJSON(t, filepath.Join(dir, "create.json"), &rep)
	phases := map[string]int{}
	for _, r := range rep.Runs {
		phases[r.Phase]++
		if r.Problem != "" {
			t.Errorf("%s: %s", r.Phase, r.Problem)
		}
	}
	if phases[bench.PhasePrefillAlone] != 1 || phases[bench.PhaseDisaggregated] != 1 || phases[bench.PhaseDecodeAlone] != 1 {
		t.Errorf("phases %v", phases)
	}
	if rep.Setup.Prefill.Node != id2 || rep.Setup.Decode.Node != id1 || rep.Setup.Decode.Model != model {
		t.Errorf("setup %+v", rep.Setup)
	}
	waitFor(t, 10*time.Second, "the benchmark's instances unloaded and its link removed", func() bool {
		return len(n1.instances(t)) == 2 && len(n2.instances(t)) == 2 && len(n1.links(t)) == 0
	})

	// --create refuses a model the cluster serves.
	cmd := exec.Command(duetBin, "bench", "pd", "--url", n1.url, "--create", "--model", "embedded", "--pp", "128", "--tg", "4", "--allow-short", "--quiet")
	if msg, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(msg), "the cluster already serves embedded") {
		t.Errorf("--create with a model the cluster serves: %v\n%s", err, msg)
	}

	// The cluster's own instances, named: the decode instance (role both) would prefill for the prefill
	// instance without a link, and the prefill instance is not the benchmark's to unload.
	ready := n1.readyOn(t)
	runBench(t, 2*time.Minute, "pd", "--url", n2.url, "--prefill-instance", ready[id1].ID, "--decode-instance", ready[id2].ID,
		"--pp", "128", "--tg", "4", "--allow-short", "--compare-baseline", "--cooldown", "0", "--isolation=false", "--quiet",
		"--out", filepath.Join(dir, "existing.json"))
	rep = bench.PDReport{}
	readJSON(t, filepath.Join(dir, "existing.json"), &rep)
	if len(rep.Runs) != 1 || rep.Runs[0].Phase != bench.PhaseDisaggregated || rep.Runs[0].Problem != "" || rep.Runs[0].PrefillSource != "remote" {
		t.Errorf("runs %+v", rep.Runs)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "prefill_alone is not measured") || !strings.Contains(notes, "decode_alone is not measured") {
		t.Errorf("notes:\n%s", notes)
	}
	if len(n2.readyOn(t)) != 2 {
		t.Errorf("the cluster's instances did not survive the benchmark: %+v", n2.readyOn(t))
	}
}

// benchNode is startNode with a gossip port of its own (not 7946, which other tests may hold).
func benchNode(t *testing.T, ip, secret, join string, extra ...string) *benchClusterNode {
	t.Helper()
	port, gport := clusterPort(t), clusterPort(t)
	n := &benchClusterNode{node: &node{ip: ip, dataDir: t.TempDir()}, gossip: net.JoinHostPort(ip, gport)}
	args := []string{"--data-dir", n.dataDir, "--cluster-secret-file", secret, "--cluster-bind", n.gossip,
		"--engine-opt", "remote_prefill_threshold=64,kv_frame_timeout=20s"}
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, extra...)
	n.gateway = startDuetWith(t, duetOptions{listen: net.JoinHostPort(ip, port), setup: routerEnv}, args...)
	return n
}

type benchClusterNode struct {
	*node
	gossip string
}

func TestBenchGateway(t *testing.T) {
	dir := t.TempDir()
	out := runBench(t, 2*time.Minute, "gateway", "--requests", "50", "--warmup", "10", "--stream-tokens", "2000", "--streams", "1", "--quiet",
		"--out", filepath.Join(dir, "gw.json"), "--svg", filepath.Join(dir, "gw.svg"))
	if !strings.Contains(out, "added p50") {
		t.Errorf("table:\n%s", out)
	}
	var rep bench.GatewayReport
	readJSON(t, filepath.Join(dir, "gw.json"), &rep)
	checkSVGFile(t, filepath.Join(dir, "gw.svg"))
	if len(rep.Latency) != 2 {
		t.Fatalf("latency cases %+v", rep.Latency)
	}
	for _, c := range rep.Latency {
		if c.DirectUs.N != 50 || c.GatewayUs.N != 50 || c.DirectUs.P50 <= 0 || c.GatewayUs.P50 <= 0 || c.GatewayUs.Max < c.GatewayUs.P50 {
			t.Errorf("case %+v", c)
		}
	}
	if s := rep.Stream; s == nil || s.Tokens != 2000 || s.DirectTokPerS <= 0 || s.GatewayTokPerS <= 0 || s.Ratio <= 0 {
		t.Errorf("stream %+v", rep.Stream)
	}
}

func TestBenchKVWireLocal(t *testing.T) {
	dir := t.TempDir()
	secret := writeSecret(t, "a secret for the KV wire benchmark")
	out := runBench(t, time.Minute, "kvwire", "--local", "--layers", "4", "--tokens", "300", "--chunk-tokens", "128", "--repeat", "2",
		"--checksum", "--secret-file", secret, "--quiet", "--out", filepath.Join(dir, "kv.json"), "--svg", filepath.Join(dir, "kv.svg"))
	if !strings.Contains(out, "goodput ratio") {
		t.Errorf("table:\n%s", out)
	}
	var rep bench.KVWireReport
	readJSON(t, filepath.Join(dir, "kv.json"), &rep)
	checkSVGFile(t, filepath.Join(dir, "kv.svg"))
	if rep.BytesPerOp != 300*4*2*8*128*2 || rep.KVWireMBps <= 0 || rep.RawMBps <= 0 || rep.Ratio <= 0 || !rep.Checksummed || rep.KVWireMs.N != 2 {
		t.Errorf("report %+v", rep)
	}
}

// TestBenchKVWireHosts runs the two sides as two processes, as on two hosts.
func TestBenchKVWireHosts(t *testing.T) {
	var port int
	for range 20 {
		_, p, _ := net.SplitHostPort(freeAddr(t))
		port, _ = strconv.Atoi(p)
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1)); err == nil {
			ln.Close()
			break
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := exec.Command(duetBin, "bench", "kvwire", "--serve", addr)
	stderr, _ := srv.StderrPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(syscall.SIGINT)
		if err := srv.Wait(); err != nil {
			t.Errorf("the server side did not stop cleanly on SIGINT: %v", err)
		}
	}()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "serving the KV wire on "+addr) {
		t.Fatalf("the server side said %q (%v)", line, err)
	}
	go io.Copy(io.Discard, stderr)
	dir := t.TempDir()
	runBench(t, time.Minute, "kvwire", "--connect", addr, "--layers", "2", "--tokens", "256", "--repeat", "1", "--quiet", "--out", filepath.Join(dir, "kv.json"))
	var rep bench.KVWireReport
	readJSON(t, filepath.Join(dir, "kv.json"), &rep)
	if rep.Server != addr || rep.KVWireMBps <= 0 || rep.RawMBps <= 0 {
		t.Errorf("report %+v", rep)
	}
}

func TestBenchLoad(t *testing.T) {
	dir := t.TempDir()
	out := runBench(t, 2*time.Minute, "load", "--local", "--engine", "echo", "--engine-opt", "token_delay=1ms", "--clients", "4",
		"--mix", "16:0.5,64:0.5", "--max-tokens", "8", "--duration", "2s", "--quiet",
		"--out", filepath.Join(dir, "load.json"), "--svg", filepath.Join(dir, "load.svg"))
	if !strings.Contains(out, "throughput:") {
		t.Errorf("table:\n%s", out)
	}
	var rep bench.LoadReport
	readJSON(t, filepath.Join(dir, "load.json"), &rep)
	checkSVGFile(t, filepath.Join(dir, "load.svg"))
	if rep.Requests < 4 || rep.Errors != 0 || rep.OK != rep.Requests || rep.TTFTMs.P50 <= 0 || rep.ITLMs.N == 0 || rep.OutputTokensPerS <= 0 || len(rep.Buckets) != 2 {
		t.Errorf("report: %d requests, %d errors %v, ttft %+v, itl %+v, buckets %+v", rep.Requests, rep.Errors, rep.ErrorKinds, rep.TTFTMs, rep.ITLMs, rep.Buckets)
	}
	for _, r := range rep.Results {
		if r.Tokens != 8 || r.LatencyMs < r.TTFTMs {
			t.Errorf("result %+v", r)
		}
	}

	// Against a running gateway, one that refuses some requests: they count as errors by kind.
	g := startGateway(t, "--max-inflight", "1", "--max-queue", "0", "--engine-opt", "token_delay=2ms")
	runBench(t, time.Minute, "load", "--url", g.url, "--clients", "3", "--mix", "16", "--max-tokens", "8", "--duration", "1s", "--quiet",
		"--out", filepath.Join(dir, "url.json"))
	rep = bench.LoadReport{}
	readJSON(t, filepath.Join(dir, "url.json"), &rep)
	if rep.OK == 0 || rep.Errors == 0 {
		t.Errorf("with one slot and no queue, %d ok and %d errors (%v)", rep.OK, rep.Errors, rep.ErrorKinds)
	}
	for k := range rep.ErrorKinds {
		if !strings.HasPrefix(k, "HTTP 429") {
			t.Errorf("error kind %q, want HTTP 429", k)
		}
	}
}

// TestBenchErrors runs the subcommand with bad flags (exit status 2) and against nothing (exit status 1): each
// says what is wrong, in one message, without a stack or a usage dump for a failed run.
func TestBenchErrors(t *testing.T) {
	t.Parallel()
	closed := freeAddr(t) // nothing listens there
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no benchmark", nil, 2, []string{"Usage: duet bench <benchmark>"}},
		{"unknown benchmark", []string{"pdd"}, 2, []string{`no benchmark "pdd"`}},
		{"pd without a target", []string{"pd", "--pp", "2048", "--tg", "64"}, 2, []string{"give --url"}},
		{"pd short prompt", []string{"pd", "--local", "--pp", "512", "--tg", "64"}, 2, []string{"--pp 512 must be > 1000", "--allow-short"}},
		{"pd bad tg", []string{"pd", "--local", "--pp", "2048", "--tg", "1,x"}, 2, []string{`"x" is not an integer`}},
		{"pd opts without local", []string{"pd", "--url", "http://" + closed, "--pp", "2048", "--tg", "64", "--prefill-opt", "backend=mlx"}, 2, []string{"--prefill-opt and --decode-opt configure"}},
		{"pd bad cpus", []string{"pd", "--local", "--pp", "2048", "--tg", "64", "--cpus", "1,1"}, 2, []string{"the two nodes need different CPUs"}},
		{"pd unreachable", []string{"pd", "--url", "http://" + closed, "--pp", "2048", "--tg", "64", "--quiet"}, 1, []string{"/v1/instances: cannot reach duet there", "connection refused"}},
		{"load unreachable", []string{"load", "--url", "http://" + closed, "--duration", "1s", "--quiet"}, 1, []string{"/v1/instances: cannot reach duet there"}},
		{"load bad mix", []string{"load", "--local", "--mix", "100:-1"}, 2, []string{"the weight must be a positive number"}},
		{"kvwire two modes", []string{"kvwire", "--local", "--connect", closed}, 2, []string{"give one of --local"}},
		{"kvwire unreachable", []string{"kvwire", "--connect", closed, "--quiet"}, 1, []string{"KV wire fetch from " + closed}},
		{"gateway bad requests", []string{"gateway", "--requests", "0"}, 2, []string{"--requests 0: must be at least 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, duetBin, append([]string{"bench"}, c.args...)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Fatalf("duet bench %s: %v, want exit status %d\nstderr:\n%s", strings.Join(c.args, " "), err, c.code, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "goroutine ") {
				t.Errorf("a stack trace:\n%s", stderr.String())
			}
			if c.code == 1 && strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("a failed run printed the usage:\n%s", stderr.String())
			}
		})
	}
}
