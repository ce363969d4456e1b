package kvwire_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

var smallShape = kvwiretest.Shape{NumLayers: 4, StartPos: 10, EndPos: 300, ChunkTokens: 64, NHeads: 2,
	HeadDim: 16, DType: kvwire.BFloat16}

func requestFor(s kvwiretest.Shape) *kvwire.Request {
	ids := make([]int32, s.EndPos)
	for i := range ids {
		ids[i] = int32(i * 7)
	}
	return &kvwire.Request{RequestID: "req-42", ModelID: "test-model", TokenIDs: ids, StartPos: s.StartPos}
}

func TestFetchStreamsEveryChunk(t *testing.T) {
	t.Parallel()
	secret := []byte("cluster-secret")
	tests := map[string]struct {
		cfg  kvwire.ServerConfig
		opts kvwire.FetchOptions
		sums bool
	}{
		"plain":               {},
		"checksums":           {opts: kvwire.FetchOptions{Checksum: true}, sums: true},
		"checksums disabled":  {cfg: kvwire.ServerConfig{DisableChecksums: true}, opts: kvwire.FetchOptions{Checksum: true}},
		"auth required":       {cfg: kvwire.ServerConfig{Secrets: [][]byte{secret}, RequireAuth: true}, opts: kvwire.FetchOptions{Secret: secret}},
		"auth and checksums":  {cfg: kvwire.ServerConfig{Secrets: [][]byte{secret}, RequireAuth: true}, opts: kvwire.FetchOptions{Secret: secret, Checksum: true}, sums: true},
		"auth optional, none": {cfg: kvwire.ServerConfig{Secrets: [][]byte{secret}}},
		"rotated secret":      {cfg: kvwire.ServerConfig{Secrets: [][]byte{[]byte("new"), secret}, RequireAuth: true}, opts: kvwire.FetchOptions{Secret: secret}},
		"tiny send buffer":    {cfg: kvwire.ServerConfig{SendBuffer: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var released, authenticated atomic.Int32
			_, addr := startServer(t, tc.cfg, func(j *kvwire.Job) {
				if j.Authenticated {
					authenticated.Add(1)
				}
				stream(t, j, smallShape, func(kvwire.KVChunk) { released.Add(1) })
			})
			rx := newReceiver(t)
			res, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, requestFor(smallShape), &tc.opts, rx.handler())
			if err != nil {
				t.Fatal(err)
			}
			rx.check(smallShape)
			chunks := len(kvwiretest.Chunks(smallShape))
			tensor := int64(2 * smallShape.NumLayers * (smallShape.EndPos - smallShape.StartPos) * smallShape.NHeads * smallShape.HeadDim * 2)
			if res.Chunks != chunks || res.TensorBytes != tensor || res.TotalTokens != smallShape.EndPos-smallShape.StartPos ||
				res.Checksummed != tc.sums || res.BytesReceived <= tensor || res.Header.RequestID != "req-42" ||
				res.Header.ModelID != "test-model" || res.Header.NumLayers != 4 {
				t.Fatalf("result %+v; want %d chunks, %d tensor bytes, checksummed %v", res, chunks, tensor, tc.sums)
			}
			eventually(t, "every chunk released", func() bool { return released.Load() == int32(chunks) })
			if wantAuth := len(tc.opts.Secret) > 0; (authenticated.Load() == 1) != wantAuth {
				t.Fatalf("Job.Authenticated = %v, want %v", authenticated.Load() == 1, wantAuth)
			}
		})
	}
}

func TestFetchReusesBufferAcrossFetches(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	buf := new(kvwire.Buffer)
	for range 3 {
		rx := newReceiver(t)
		if _, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape),
			&kvwire.FetchOptions{Buffer: buf}, rx.handler()); err != nil {
			t.Fatal(err)
		}
		rx.check(smallShape)
	}
}

func TestBadAuth(t *testing.T) {
	t.Parallel()
	secret := []byte("cluster-secret")
	cfg := kvwire.ServerConfig{Secrets: [][]byte{secret}, RequireAuth: true, AuthWindow: time.Minute}
	_, addr := startServer(t, cfg, func(j *kvwire.Job) { stream(t, j, smallShape, nil) })

	tests := map[string]struct {
		opts kvwire.FetchOptions
		want string
	}{
		"no proof":        {kvwire.FetchOptions{}, "authentication required"},
		"wrong secret":    {kvwire.FetchOptions{Secret: []byte("guess")}, "wrong MAC"},
		"stale":           {kvwire.FetchOptions{Secret: secret, Now: func() time.Time { return time.Now().Add(-2 * time.Minute) }}, "outside the accepted window"},
		"from the future": {kvwire.FetchOptions{Secret: secret, Now: func() time.Time { return time.Now().Add(2 * time.Minute) }}, "outside the accepted window"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), &tc.opts, kvwire.Handler{})
			var re *kvwire.RemoteError
			if !errors.As(err, &re) || re.Code != kvwire.CodeUnauthorized || !strings.Contains(re.Message, tc.want) {
				t.Fatalf("got %v, want a 401 saying %q", err, tc.want)
			}
		})
	}

	t.Run("replay", func(t *testing.T) {
		t.Parallel()
		r := requestFor(smallShape)
		if err := kvwire.SignRequest(r, secret, time.Now()); err != nil {
			t.Fatal(err)
		}
		body, _ := kvwire.AppendRequest(nil, r)
		first := frames(t, rawExchange(t, addr, frameOf(body)))
		if len(first) < 3 {
			t.Fatalf("first use of the proof: %d frames", len(first))
		}
		second := frames(t, rawExchange(t, addr, frameOf(body)))
		m, err := kvwire.DecodeMessage(second[len(second)-1])
		if e, ok := m.(*kvwire.Error); err != nil || !ok || e.Code != 401 || !strings.Contains(e.Message, "replay") {
			t.Fatalf("replayed request answered %+v, %v", m, err)
		}
	})

	t.Run("tampered tokens", func(t *testing.T) {
		t.Parallel()
		r := requestFor(smallShape)
		kvwire.SignRequest(r, secret, time.Now())
		r.TokenIDs[5]++
		body, _ := kvwire.AppendRequest(nil, r)
		out := frames(t, rawExchange(t, addr, frameOf(body)))
		if m, _ := kvwire.DecodeMessage(out[len(out)-1]); m == nil || m.(*kvwire.Error).Code != 401 {
			t.Fatalf("tampered request answered %+v", m)
		}
	})
}

func TestBusyAnswers503(t *testing.T) {
	t.Parallel()
	jobs := make(chan *kvwire.Job, 1)
	_, addr := startServer(t, kvwire.ServerConfig{
		PickupTimeout: 100 * time.Millisecond,
		Dispatch:      func(j *kvwire.Job) { jobs <- j }, // the engine never gets to it in time
	}, nil)
	_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != kvwire.CodeBusy || !strings.Contains(re.Message, "not picked up") {
		t.Fatalf("got %v, want 503 not picked up", err)
	}
	j := <-jobs
	if _, err := j.Accept(); !errors.Is(err, kvwire.ErrJobExpired) {
		t.Fatalf("late Accept: %v, want ErrJobExpired", err)
	}
	if err := j.Reject(500, "x"); !errors.Is(err, kvwire.ErrJobExpired) {
		t.Fatalf("late Reject: %v, want ErrJobExpired", err)
	}
}

func TestRejectAnswersTheEnginesCode(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{
		Dispatch: func(j *kvwire.Job) { j.Reject(kvwire.CodeBadRequest, "model "+j.Request.ModelID+" not loaded") },
	}, nil)
	_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 400 || re.Message != "model test-model not loaded" {
		t.Fatalf("got %v", err)
	}
}

func TestEngineErrorBeforeHeader(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		w.Error(kvwire.CodeInternal, "out of memory")
	})
	r := requestFor(smallShape)
	out := frames(t, rawExchange(t, addr, frameOf(must(kvwire.AppendRequest(nil, r)))))
	// exo's shape: a header with no layers and float32, then the error.
	h, err := kvwire.DecodeHeader(out[0])
	if err != nil || h.NumLayers != 0 || h.DType != kvwire.Float32 || len(out) != 2 {
		t.Fatalf("frames %d, header %+v, %v", len(out), h, err)
	}
	_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, r, nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 500 || re.Message != "out of memory" {
		t.Fatalf("got %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestEngineErrorMidStream(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		w.Header(kvwire.Header{NumLayers: 4, DType: kvwire.BFloat16})
		w.Chunk(*kvwiretest.Chunks(smallShape)[0], nil)
		w.Error(kvwire.CodeInternal, "NaN in layer 2")
	})
	var chunks int
	res, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil,
		kvwire.Handler{OnChunk: func(*kvwire.KVChunk) error { chunks++; return nil }})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 500 || chunks != 1 || res.Chunks != 1 {
		t.Fatalf("got %v after %d chunks", err, chunks)
	}
}

func TestBadRequestsAnswered400(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{MaxRequestSize: 1 << 10}, func(j *kvwire.Job) {
		t.Errorf("job %+v dispatched", j.Request)
	})
	tests := map[string]struct {
		frame []byte
		want  string
	}{
		"garbage":           {frameOf([]byte{0xc1}), "bad request"},
		"token not an int":  {frameOf(hx(t, `81 a9 "token_ids" 91 a1 "x"`)), "expected integer"},
		"start beyond ids":  {frameOf(hx(t, `82 a9 "token_ids" 91 01 a9 "start_pos" 05`)), "start_pos 5 is beyond"},
		"frame too large":   {append(hx(t, "00 00 10 00"), make([]byte, 4096)...), "exceeds the maximum of 1024"},
		"4 GiB frame claim": {hx(t, "ff ff ff ff"), "exceeds the maximum"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := frames(t, rawExchange(t, addr, tc.frame))
			if len(out) != 2 {
				t.Fatalf("%d frames", len(out))
			}
			m, err := kvwire.DecodeMessage(out[1])
			if e, ok := m.(*kvwire.Error); err != nil || !ok || e.Code != 400 || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("answered %+v, %v; want 400 with %q", m, err, tc.want)
			}
		})
	}
}

func TestTooManyJobsAnswered503(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	accepted := make(chan struct{})
	_, addr := startServer(t, kvwire.ServerConfig{MaxConns: 1}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		close(accepted)
		<-hold
		w.Error(500, "released")
	})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	first.Write(frameOf(must(kvwire.AppendRequest(nil, requestFor(smallShape)))))
	<-accepted
	_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 503 {
		t.Fatalf("got %v, want 503", err)
	}
}

func TestClientGoneAbortsJobPromptly(t *testing.T) {
	t.Parallel()
	type outcome struct {
		cause    error
		released int32
		calls    int32
	}
	done := make(chan outcome, 1)
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		w.Header(kvwire.Header{NumLayers: 4, DType: kvwire.BFloat16})
		var released, calls atomic.Int32
		chunks := kvwiretest.Chunks(smallShape)
		for i := 0; ; i++ { // an endless prefill: only the client leaving stops it
			c := chunks[i%len(chunks)]
			calls.Add(1)
			if err := w.Chunk(*c, func(kvwire.KVChunk) { released.Add(1) }); err != nil {
				if !errors.Is(err, kvwire.ErrJobAborted) {
					t.Errorf("Chunk after the client left: %v", err)
				}
				break
			}
		}
		<-j.Context().Done()
		<-w.Finished()
		done <- outcome{context.Cause(j.Context()), released.Load(), calls.Load()}
	})
	stop := errors.New("enough")
	_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil,
		kvwire.Handler{OnChunk: func(*kvwire.KVChunk) error { return stop }})
	if err != stop {
		t.Fatalf("Fetch returned %v, want the handler's error", err)
	}
	select {
	case o := <-done:
		if !errors.Is(o.cause, kvwire.ErrConnLost) && !errors.Is(o.cause, kvwire.ErrProtocol) {
			t.Fatalf("job cause %v", o.cause)
		}
		if o.released != o.calls {
			t.Fatalf("%d chunks released of %d handed over", o.released, o.calls)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine was not told that the client left")
	}
}

func TestClientGoneBeforePickup(t *testing.T) {
	t.Parallel()
	jobs := make(chan *kvwire.Job, 1)
	_, addr := startServer(t, kvwire.ServerConfig{PickupTimeout: time.Minute,
		Dispatch: func(j *kvwire.Job) { jobs <- j }}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(frameOf(must(kvwire.AppendRequest(nil, requestFor(smallShape)))))
	j := <-jobs
	c.Close()
	<-j.Context().Done()
	if !errors.Is(context.Cause(j.Context()), kvwire.ErrConnLost) {
		t.Fatalf("cause %v", context.Cause(j.Context()))
	}
	eventually(t, "the job to expire", func() bool {
		_, err := j.Accept()
		return errors.Is(err, kvwire.ErrJobExpired)
	})
}

// A client that stops reading makes the writer hold at most SendBuffer bytes and then block the engine;
// when the client leaves, the blocked call returns and every buffer comes back.
func TestWriterBackpressure(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	shape := kvwiretest.Shape{NumLayers: 8, StartPos: 0, EndPos: 4096, ChunkTokens: 256, NHeads: 4, HeadDim: 64, DType: kvwire.BFloat16}
	chunkBytes := int64(2 * 256 * 4 * 64 * 2)
	var calls, returned, released atomic.Int64
	var maxQueued atomic.Int64
	writer := make(chan *kvwire.Writer, 1)
	finished := make(chan error, 1)
	_, addr := startServer(t, kvwire.ServerConfig{SendBuffer: limit, WriteTimeout: time.Minute}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		writer <- w
		w.Header(kvwire.Header{NumLayers: 8, DType: kvwire.BFloat16})
		chunks := kvwiretest.Chunks(shape)
		var err error
		for i := 0; err == nil; i++ {
			c := chunks[i%len(chunks)]
			calls.Add(1)
			err = w.Chunk(*c, func(kvwire.KVChunk) { released.Add(1) })
			returned.Add(1)
			if q := w.Queued(); q > maxQueued.Load() {
				maxQueued.Store(q)
			}
		}
		<-w.Finished()
		finished <- err
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(frameOf(must(kvwire.AppendRequest(nil, requestFor(shape)))))
	w := <-writer
	// Wait until the engine is blocked in Chunk with the queue at its bound.
	eventually(t, "the engine to block", func() bool {
		n := returned.Load()
		if calls.Load() != n+1 || w.Queued()+chunkBytes <= limit {
			return false
		}
		time.Sleep(50 * time.Millisecond)
		return returned.Load() == n
	})
	if q := maxQueued.Load(); q > limit {
		t.Fatalf("queue reached %d bytes, bound %d", q, limit)
	}
	c.Close()
	select {
	case err := <-finished:
		if !errors.Is(err, kvwire.ErrJobAborted) {
			t.Fatalf("blocked Chunk returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Chunk did not return after the client left")
	}
	if released.Load() != calls.Load() {
		t.Fatalf("%d of %d chunks released", released.Load(), calls.Load())
	}
}

func TestWriterMisuse(t *testing.T) {
	t.Parallel()
	errs := make(chan []error, 1)
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		var got []error
		var released int
		rel := func(kvwire.KVChunk) { released++ }
		c := *kvwiretest.Chunks(smallShape)[0]
		got = append(got, w.Chunk(c, rel))                       // before Header
		got = append(got, w.Done(1))                             // before Header
		got = append(got, w.Header(kvwire.Header{NumLayers: 1})) // no dtype
		got = append(got, nilIfOK(w.Header(kvwire.Header{NumLayers: 1, DType: kvwire.BFloat16})))
		got = append(got, w.Header(kvwire.Header{NumLayers: 1, DType: kvwire.BFloat16})) // twice
		c.LayerIdx = 1
		got = append(got, w.Chunk(c, rel)) // beyond the header's layers
		c.LayerIdx, c.Keys = 0, c.Keys[:10]
		got = append(got, w.Chunk(c, rel)) // bytes do not match the shape
		got = append(got, nilIfOK(w.Done(0)))
		c = *kvwiretest.Chunks(smallShape)[0]
		got = append(got, w.Done(0))            // twice
		got = append(got, w.Chunk(c, rel))      // after Done
		got = append(got, w.Error(500, "late")) // after Done
		if released != 4 {
			got = append(got, errors.New("release not called for every refused chunk"))
		}
		errs <- got
	})
	kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	got := <-errs
	for i, err := range got {
		if wantOK := i == 3 || i == 7; (err == nil) != wantOK {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if !errors.Is(got[8], kvwire.ErrWriterClosed) || !errors.Is(got[9], kvwire.ErrWriterClosed) {
		t.Errorf("after Done: %v, %v", got[8], got[9])
	}
}

func nilIfOK(err error) error { return err }

func TestMaxJobDuration(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	_, addr := startServer(t, kvwire.ServerConfig{MaxJobDuration: 200 * time.Millisecond}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		w.Header(kvwire.Header{NumLayers: 1, DType: kvwire.BFloat16})
		<-j.Context().Done() // a stuck engine
		causes <- w.Err()
	})
	_, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
	if !errors.Is(err, kvwire.ErrConnLost) {
		t.Fatalf("client got %v", err)
	}
	if cause := <-causes; !errors.Is(cause, kvwire.ErrTimeout) {
		t.Fatalf("writer cause %v", cause)
	}
}

func TestStopDrainsAcceptedJobs(t *testing.T) {
	t.Parallel()
	accepted := make(chan struct{})
	proceed := make(chan struct{})
	pending := make(chan *kvwire.Job, 1)
	srv, addr := startServer(t, kvwire.ServerConfig{PickupTimeout: time.Minute,
		Dispatch: func(j *kvwire.Job) {
			if j.Request.RequestID == "pending" {
				pending <- j // never accepted
				return
			}
			go func() { // the engine's loop for this test
				w, err := j.Accept()
				if err != nil {
					t.Error(err)
					return
				}
				w.Header(kvwire.Header{NumLayers: smallShape.NumLayers, DType: smallShape.DType, StartPos: smallShape.StartPos})
				close(accepted)
				<-proceed
				for _, c := range kvwiretest.Chunks(smallShape) {
					w.Chunk(*c, nil)
				}
				w.Done(smallShape.EndPos - smallShape.StartPos)
			}()
		}}, nil)

	fetched := make(chan error, 2)
	rx := newReceiver(t)
	go func() {
		_, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, requestFor(smallShape), nil, rx.handler())
		fetched <- err
	}()
	<-accepted
	pendingReq := requestFor(smallShape)
	pendingReq.RequestID = "pending"
	go func() {
		_, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, pendingReq, nil, kvwire.Handler{})
		fetched <- err
	}()
	<-pending

	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(ctxTimeout(t, 20*time.Second)) }()
	var re *kvwire.RemoteError
	if err := <-fetched; !errors.As(err, &re) || re.Code != 503 {
		t.Fatalf("pending job during Stop: %v, want 503", err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a job was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("Stop left the listener open")
	}
	close(proceed)
	if err := <-fetched; err != nil {
		t.Fatalf("accepted job during Stop: %v", err)
	}
	rx.check(smallShape)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func TestStopDeadlineAbortsJobs(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	accepted := make(chan struct{})
	srv, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) {
		w, _ := j.Accept()
		w.Header(kvwire.Header{NumLayers: 1, DType: kvwire.BFloat16})
		close(accepted)
		<-j.Context().Done()
		causes <- context.Cause(j.Context())
	})
	fetched := make(chan error, 1)
	go func() {
		_, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, requestFor(smallShape), nil, kvwire.Handler{})
		fetched <- err
	}()
	<-accepted
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Stop(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Stop: %v", err)
	}
	if cause := <-causes; !errors.Is(cause, kvwire.ErrServerClosed) {
		t.Fatalf("job cause %v", cause)
	}
	if err := <-fetched; !errors.Is(err, kvwire.ErrConnLost) {
		t.Fatalf("client got %v", err)
	}
}

// Our server answers an exo client with exactly the bytes exo's server would send.
func TestServerSpeaksPlainExo(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{}, func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	req := *requestFor(smallShape)
	resp, err := kvwiretest.PlainFetch(ctxTimeout(t, 10*time.Second), addr, req)
	if err != nil {
		t.Fatal(err)
	}
	want := smallShape.Response(req)
	var got, exo bytes.Buffer
	kvwiretest.WriteResponse(&got, resp)
	kvwiretest.WriteResponse(&exo, want)
	if !bytes.Equal(got.Bytes(), exo.Bytes()) {
		t.Fatal("plain exo client received other values than exo would send")
	}
	raw := rawExchange(t, addr, must(kvwiretest.EncodeRequest(req)))
	if !bytes.Equal(raw, exo.Bytes()) {
		t.Fatalf("raw response differs from exo's encoding (%d vs %d bytes)", len(raw), exo.Len())
	}
}

func TestServerRequiringAuthTellsPlainExoClient(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, kvwire.ServerConfig{Secrets: [][]byte{[]byte("s")}, RequireAuth: true},
		func(j *kvwire.Job) { t.Error("unauthenticated job dispatched") })
	_, err := kvwiretest.PlainFetch(ctxTimeout(t, 10*time.Second), addr, *requestFor(smallShape))
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != kvwire.CodeUnauthorized {
		t.Fatalf("got %v, want 401", err)
	}
}

// Our client, with every extension asked for, fetches from a plain exo server, which ignores them.
func TestClientWithExtensionsAgainstPlainExo(t *testing.T) {
	t.Parallel()
	srv := kvwiretest.NewPlainServer(t, smallShape.Response)
	rx := newReceiver(t)
	res, err := kvwire.Fetch(ctxTimeout(t, 10*time.Second), srv.Addr, requestFor(smallShape),
		&kvwire.FetchOptions{Secret: []byte("s"), Checksum: true}, rx.handler())
	if err != nil {
		t.Fatal(err)
	}
	rx.check(smallShape)
	if res.Checksummed {
		t.Fatal("Checksummed without the server's acknowledgement")
	}
	if got := srv.Requests(); len(got) != 1 || len(got[0].TokenIDs) != smallShape.EndPos || got[0].StartPos != smallShape.StartPos {
		t.Fatalf("plain server saw %+v", got)
	}
	_, err = kvwire.Fetch(ctxTimeout(t, 10*time.Second), kvwiretest.NewPlainServer(t, func(kvwire.Request) kvwiretest.Response {
		return kvwiretest.ErrorResponse(503, "No payload ready")
	}).Addr, requestFor(smallShape), nil, kvwire.Handler{})
	var re *kvwire.RemoteError
	if !errors.As(err, &re) || re.Code != 503 {
		t.Fatalf("exo error response: %v", err)
	}
}

// TestConcurrentJobs runs 8 jobs at once from one address. They are signed: without a proof, one address gets
// only MaxAnonymousJobsPerSource jobs at a time (TestAnonymousJobsLimitedPerSource).
func TestConcurrentJobs(t *testing.T) {
	t.Parallel()
	secret := []byte("kv secret")
	_, addr := startServer(t, kvwire.ServerConfig{Secrets: [][]byte{secret}, RequireAuth: true},
		func(j *kvwire.Job) { stream(t, j, smallShape, nil) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rx := newReceiver(t)
			opts := &kvwire.FetchOptions{Secret: secret}
			if _, err := kvwire.Fetch(ctxTimeout(t, 20*time.Second), addr, requestFor(smallShape), opts, rx.handler()); err != nil {
				t.Error(err)
				return
			}
			if rx.bad != nil {
				t.Error(rx.bad)
			}
		})
	}
	wg.Wait()
}
