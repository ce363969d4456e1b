package cpu

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const denseGoldenFile = "testdata/dense_golden.txt"

// TestDenseGolden pins the logits of every family (the dense llama, mistral, qwen2, qwen3 first of all) bit for
// bit: every variant of matrix() on every kernel path this CPU has, with float32 and stored weights, as a SHA-256 of the logits of a prefill (in chunks of
// 5) and 8 greedy decode steps. New blocks must leave these models computing exactly what they computed before.
// The hashes were recorded on amd64 (where every kernel path is deterministic); -update rewrites them.
func TestDenseGolden(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the golden hashes are amd64's (other architectures may round the Go path's math differently)")
	}
	if fusedBuild {
		// The compiler fuses the Go code's multiply-adds here, which rounds once where the recorded build rounds
		// twice: other bits, as exact across batching and kernel paths as before (the other tests check that).
		t.Skip("the golden hashes are GOAMD64=v1's, whose Go code rounds every multiply and add")
	}
	t.Parallel()
	want := readGolden(t)
	var mu sync.Mutex
	got := map[string]string{}
	t.Run("variants", func(t *testing.T) {
		for _, v := range matrix() {
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				m := backendtest.Generate(t, v.Options)
				prompt := backendtest.Prompt(24, m.Config.VocabSize, 5)
				for _, k := range kernelPaths() {
					for _, w := range []backend.Weights{backend.WeightsFloat32, backend.WeightsStored} {
						key := v.Name + " " + k.String() + " " + string(w)
						bm, err := loadOn(m, backend.Options{PrefillChunk: 5, Threads: 2, Weights: w}, k)
						if err != nil {
							t.Fatal(err)
						}
						c := backendtest.NewCache(t, bm)
						_, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), 8)
						bm.Close()
						h := hashLogits(logits)
						mu.Lock()
						got[key] = h
						mu.Unlock()
						if *update {
							continue
						}
						if w, ok := want[key]; !ok {
							t.Errorf("%s: no golden hash (run with -update on a CPU with every path)", key)
						} else if w != h {
							t.Errorf("%s: logits hash %s, golden %s: a dense model computes something else than before", key, h, w)
						}
					}
				}
			})
		}
	})
	if *update {
		writeGolden(t, got)
	}
}

func hashLogits(steps [][]float32) string {
	h := sha256.New()
	var b [4]byte
	for _, l := range steps {
		for _, v := range l {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func readGolden(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	f, err := os.Open(denseGoldenFile)
	if err != nil {
		if *update && os.IsNotExist(err) {
			return out
		}
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// "variant path weights hash"
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("%s: bad line %q", denseGoldenFile, line)
		}
		out[line[:i]] = line[i+1:]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeGolden(t *testing.T, got map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	sb.WriteString("# TestDenseGolden: variant, kernel path, weights, SHA-256 of the logits (go test -run TestDenseGolden -update)\n")
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s %s\n", k, got[k])
	}
	if err := os.MkdirAll(filepath.Dir(denseGoldenFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(denseGoldenFile, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
