package kvwire_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// bigRequest is a request of n tokens, each a one-byte msgpack fixint: its frame is about n bytes and its
// decoded token IDs 4n.
func bigRequest(n int) *kvwire.Request {
	return &kvwire.Request{RequestID: "big", ModelID: "test-model", TokenIDs: make([]int32, n)}
}

// want503 checks that err is the wire's typed busy error and that its message says why.
func want503(t *testing.T, what string, err error) *kvwire.RemoteError {
	t.Helper()
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != kvwire.CodeBusy {
		t.Fatalf("%s: got %v, want a remote 503", what, err)
	}
	return re
}

// TestUnauthenticatedBudgetAnswers503 gives the server 300 KiB for every unauthenticated request together.
// A request whose frame (100 KB) arrives within it but whose decoded token IDs (400 KB) would not is answered
// 503, as is one whose frame alone would pass it, whether or not it carries a proof (the proof is checked after
// decoding); requests that fit are served one after another, so every byte a request held came back. Before, the
// server read and decoded any request up to 16 MiB, whatever the others held.
func TestUnauthenticatedBudgetAnswers503(t *testing.T) {
	t.Parallel()
	secret := []byte("kv secret")
	for _, tc := range []struct {
		name string
		cfg  kvwire.ServerConfig
		opts *kvwire.FetchOptions
	}{
		{"NoSecret", kvwire.ServerConfig{}, nil},
		{"Signed", kvwire.ServerConfig{Secrets: [][]byte{secret}, RequireAuth: true}, &kvwire.FetchOptions{Secret: secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.MaxUnauthenticatedBytes = 300 << 10
			_, addr := startServer(t, cfg, func(j *kvwire.Job) {
				w, err := j.Accept()
				if err == nil {
					w.Header(kvwire.Header{NumLayers: 1, DType: kvwire.BFloat16})
					w.Done(0)
				}
			})
			// The frame fits (its buffer grows to 128 KiB); its 400 KB of token IDs do not.
			_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, bigRequest(100_000), tc.opts, kvwire.Handler{})
			want503(t, "100,000 tokens", err)
			// The frame alone passes the budget while it arrives: refused before it is read whole.
			_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, bigRequest(200_000), tc.opts, kvwire.Handler{})
			want503(t, "200,000 tokens", err)
			for i := range 8 { // each holds 40 KB of frame and 160 KB of token IDs, more than half the budget
				if _, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, bigRequest(40_000), tc.opts, kvwire.Handler{}); err != nil {
					t.Fatalf("request %d of 40,000 tokens, after the refusals: %v", i, err)
				}
			}
		})
	}
}

// heldJobs is a server whose engine holds every job it is given, without accepting it, until the test ends.
func heldJobs(t *testing.T, cfg kvwire.ServerConfig) (addr string, jobs chan *kvwire.Job) {
	t.Helper()
	jobs = make(chan *kvwire.Job, 64)
	cfg.Dispatch = func(j *kvwire.Job) { jobs <- j }
	cfg.PickupTimeout = time.Hour
	_, addr = startServer(t, cfg, nil)
	t.Cleanup(func() {
		for {
			select {
			case j := <-jobs:
				j.Reject(kvwire.CodeInternal, "test over")
			default:
				return
			}
		}
	})
	return addr, jobs
}

// fetchFrom fetches from addr over a connection from the loopback address src.
func fetchFrom(ctx context.Context, addr, src string, req *kvwire.Request, opts kvwire.FetchOptions) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	opts.DialContext = d.DialContext
	_, err := kvwire.Fetch(ctx, addr, req, &opts, kvwire.Handler{})
	return err
}

// TestAnonymousJobsLimitedPerSource holds every job in the engine and sends requests without a proof over real
// TCP from several loopback addresses: each address gets two jobs at a time and the server four in all; past
// either, a request is answered 503 at once (the engine never sees it), and a signed request still gets a job.
// Before, every request became a job until the 256 job slots were full.
func TestAnonymousJobsLimitedPerSource(t *testing.T) {
	t.Parallel()
	secret := []byte("kv secret")
	addr, jobs := heldJobs(t, kvwire.ServerConfig{Secrets: [][]byte{secret}}) // proofs verified, not required
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	hold := func(src string, opts kvwire.FetchOptions) {
		t.Helper()
		wg.Add(1)
		go func() {
			defer wg.Done()
			fetchFrom(ctx, addr, src, requestFor(smallShape), opts)
		}()
		select {
		case <-jobs:
		case <-time.After(10 * time.Second):
			t.Fatalf("a request from %s never reached the engine", src)
		}
	}
	try := func(src string) error {
		return fetchFrom(ctxTimeout(t, 10*time.Second), addr, src, requestFor(smallShape), kvwire.FetchOptions{})
	}

	hold("127.0.0.1", kvwire.FetchOptions{})
	hold("127.0.0.1", kvwire.FetchOptions{})
	re := want503(t, "a third job from 127.0.0.1", try("127.0.0.1"))
	t.Logf("third from one address: %s", re.Message)
	hold("127.0.0.2", kvwire.FetchOptions{})
	hold("127.0.0.3", kvwire.FetchOptions{})
	re = want503(t, "a fifth job without a proof", try("127.0.0.4"))
	t.Logf("fifth in all: %s", re.Message)
	hold("127.0.0.1", kvwire.FetchOptions{Secret: secret})
	select {
	case j := <-jobs:
		t.Fatalf("the engine got a job past the limits: %+v", j.Request)
	default:
	}
}

// TestAnonymousJobSlotsComeBack runs more jobs without a proof from one address, one after another, than the
// limits allow at once: a slot comes back when its job ends, whichever way it ends.
func TestAnonymousJobSlotsComeBack(t *testing.T) {
	t.Parallel()
	n := 0
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		n++
		if n%2 == 0 {
			j.Reject(kvwire.CodeBadRequest, "every other one")
			return
		}
		stream(t, j, smallShape, nil)
	})
	for i := range 3 * kvwire.DefaultMaxAnonymousJobs {
		_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
		var re *kvwire.RemoteError
		if err != nil && !(errors.As(err, &re) && re.Code == kvwire.CodeBadRequest) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
}
