package mlxengine_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/clustersecret"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// procStatus reads a process's VmRSS and VmHWM (its peak RSS) in bytes.
func procStatus(t testing.TB, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		for prefix, v := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				*v = kb << 10
			}
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatal("no VmRSS or VmHWM")
	}
	return rss, peak
}

// unauthRSSBound is what 64 unauthenticated 16 MiB frames may add to an engine's peak RSS: the server's
// budget for unauthenticated requests (kvwire.DefaultMaxUnauthenticatedBytes, 32 MiB of live buffers), twice
// over for the garbage collector's headroom, and 64 MiB for the connections' goroutines and the runtime.
const unauthRSSBound = 2*kvwire.DefaultMaxUnauthenticatedBytes + 64<<20

var (
	engineBinOnce sync.Once
	engineBin     string
	engineBinErr  error
)

// engineBinary builds the engine plugin as it ships (cmd/duet-mlx-engine, without this test's -race: the race
// detector's shadow memory would count in the RSS measured) once per test run, and returns its path.
func engineBinary(t testing.TB) string {
	t.Helper()
	engineBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "duet-mlx-engine-")
		if err != nil {
			engineBinErr = err
			return
		}
		engineBin = filepath.Join(dir, "duet-mlx-engine")
		out, err := exec.Command("go", "build", "-o", engineBin, "./cmd/duet-mlx-engine").CombinedOutput()
		if err != nil {
			engineBinErr = fmt.Errorf("go build ./cmd/duet-mlx-engine: %v\n%s", err, out)
		}
	})
	if engineBinErr != nil {
		t.Fatal(engineBinErr)
	}
	return engineBin
}

// TestKVUnauthenticatedMemoryBounded opens 64 KV wire connections to a real engine plugin process (the binary
// as built for users), each claiming a 16 MiB request frame (the largest the server takes) and sending all of it
// but the last byte, as an attacker that knows no secret would; the engine's peak RSS may rise by at most unauthRSSBound, without a
// cluster secret and with one. Then an ordinary request is served. Before, each connection's buffer grew to its
// frame's size once a quarter of it had arrived: the engine grew by about 1 GiB.
func TestKVUnauthenticatedMemoryBounded(t *testing.T) {
	dir := pdModel(t, "llama-bf16")
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"NoSecret", nil}, {"Secret", key}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.secret != nil {
				t.Setenv(clustersecret.KVKeyEnv, hex.EncodeToString(tc.secret))
			}
			p := startEngineCmd(t, exec.Command(engineBinary(t)), dir, prefillOpts())
			addr := p.desc.PrefillEndpoint
			req := &kvwire.Request{RequestID: "ok", ModelID: p.desc.ModelID, TokenIDs: randomPrompt(1, 64, p.desc.VocabSize)}
			fetch := func(what string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := kvwire.Fetch(ctx, addr, req, &kvwire.FetchOptions{Secret: tc.secret}, kvwire.Handler{}); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			fetch("a request before") // the KV path warm: its buffers count in the baseline
			if tc.secret != nil {     // the engine took the key: an unsigned request is refused
				_, err := kvwire.Fetch(context.Background(), addr, req, nil, kvwire.Handler{})
				var re *kvwire.RemoteError
				if !errors.As(err, &re) || re.Code != kvwire.CodeUnauthorized {
					t.Fatalf("an unsigned request to an engine with a secret: %v, want 401", err)
				}
			}
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
				t.Skipf("cannot reset the peak RSS: %v", err)
			}
			base, _ := procStatus(t, p.pid)

			const conns, frame = 64, kvwire.DefaultMaxRequestSize
			var wg sync.WaitGroup
			var mu sync.Mutex
			var open []net.Conn
			sent := make([]int, conns)
			for i := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Errorf("dial %d: %v", i, err)
						return
					}
					mu.Lock()
					open = append(open, c)
					mu.Unlock()
					c.SetWriteDeadline(time.Now().Add(60 * time.Second))
					k, err := c.Write(binary.BigEndian.AppendUint32(nil, frame))
					sent[i] += k
					piece := make([]byte, 1<<20)
					for left := frame - 1; left > 0 && err == nil; left -= k {
						k, err = c.Write(piece[:min(len(piece), left)])
						sent[i] += k
					} // an error: the server answered and closed, it refused this one
				}()
			}
			wg.Wait()
			_, peak := procStatus(t, p.pid)
			total := 0
			for _, n := range sent {
				total += n
			}
			t.Logf("engine RSS %d MiB before; peak %d MiB (+%d MiB) while %d connections sent %d MiB of frames (bound +%d MiB)",
				base>>20, peak>>20, (peak-base)>>20, conns, total>>20, unauthRSSBound>>20)
			if peak-base > unauthRSSBound {
				t.Errorf("peak RSS rose by %d MiB, more than the bound of %d MiB", (peak-base)>>20, unauthRSSBound>>20)
			}
			for _, c := range open {
				c.Close()
			}
			fetch("a request after")
		})
	}
}
