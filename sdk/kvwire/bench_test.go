package kvwire_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

// BenchmarkGoodput streams the KV of a Llama-3.1-8B-shaped prompt (32 layers, 8 KV heads x 128, bf16) over
// loopback, as a prefill engine streams it: for each prefill step (512 tokens; 256 in _step256), a chunk per
// layer, from a pool of reused buffers that the writer hands back. Each iteration also copies the same tensor
// bytes, from the same buffers in the same pieces (keys then values, read a chunk at a time), over a plain TCP
// connection, alternating which goes first; the figures are goodput (tensor bytes per second) of both and their
// ratio (kvwire / raw, target >= 0.9).
//
//	go test ./sdk/kvwire -run '^$' -bench 'Goodput/4096tok' -benchtime 5x   # 512 MiB per transfer
//	go test ./sdk/kvwire -run '^$' -bench 'Goodput/512tok'                  # 64 MiB, quick
func BenchmarkGoodput(b *testing.B) {
	for _, tc := range []struct {
		name   string
		tokens int
		step   int
		crc    bool
	}{
		{"4096tok", 4096, 512, false},
		{"4096tok_step256", 4096, 256, false},
		{"4096tok_crc32c", 4096, 512, true},
		{"512tok", 512, 512, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchGoodput(b, kvwiretest.Shape{NumLayers: 32, StartPos: 0, EndPos: tc.tokens, ChunkTokens: tc.step,
				NHeads: 8, HeadDim: 128, DType: kvwire.BFloat16}, tc.crc)
		})
	}
}

// bufferPool stands for the engine's KV buffers: a fixed set of chunk-sized key/value pairs.
type bufferPool chan [2][]byte

func newBufferPool(n, size int) bufferPool {
	p := make(bufferPool, n)
	for i := range n {
		k, v := make([]byte, size), make([]byte, size)
		kvwiretest.Fill(k, i, 0, 0)
		kvwiretest.Fill(v, i, 0, 1)
		p <- [2][]byte{k, v}
	}
	return p
}

func benchGoodput(b *testing.B, s kvwiretest.Shape, crc bool) {
	chunkSize := s.ChunkTokens * s.NHeads * s.HeadDim * s.DType.Size()
	steps := (s.EndPos - s.StartPos + s.ChunkTokens - 1) / s.ChunkTokens
	total := int64(steps * s.NumLayers * 2 * chunkSize)
	pool := newBufferPool(64, chunkSize)

	// kvwire: a server whose compute loop streams chunks from the pool.
	_, addr := benchServer(b, func(j *kvwire.Job) {
		w, err := j.Accept()
		if err != nil {
			b.Error(err)
			return
		}
		w.Header(kvwire.Header{NumLayers: s.NumLayers, DType: s.DType})
		release := func(c kvwire.KVChunk) { pool <- [2][]byte{c.Keys, c.Values} }
		for range steps {
			for layer := range s.NumLayers {
				kv := <-pool
				c := kvwire.KVChunk{LayerIdx: layer, NumTokens: s.ChunkTokens, NHeads: s.NHeads, HeadDim: s.HeadDim,
					DType: s.DType, Keys: kv[0], Values: kv[1]}
				if err := w.Chunk(c, release); err != nil {
					b.Error(err)
					return
				}
			}
		}
		w.Done(s.EndPos - s.StartPos)
	})
	req := &kvwire.Request{RequestID: "bench", ModelID: "llama", TokenIDs: make([]int32, s.EndPos)}
	opts := &kvwire.FetchOptions{Buffer: new(kvwire.Buffer), Checksum: crc}
	fetch := func() {
		res, err := kvwire.Fetch(context.Background(), addr, req, opts, kvwire.Handler{})
		if err != nil || res.TensorBytes != total {
			b.Fatalf("fetch: %v (%d of %d bytes)", err, res.TensorBytes, total)
		}
	}

	// raw: the same bytes in the same pieces over plain TCP.
	rawAddr := rawServer(b, func(c net.Conn) {
		for range steps * s.NumLayers {
			kv := <-pool
			_, err := c.Write(kv[0])
			if err == nil {
				_, err = c.Write(kv[1])
			}
			pool <- kv
			if err != nil {
				return
			}
		}
	})
	// The receiver reads each chunk's keys and values into one reused buffer, as a chunk must arrive whole for
	// its consumer.
	rawBuf := make([]byte, 2*chunkSize)
	raw := func() {
		c, err := net.Dial("tcp", rawAddr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte{1})
		for got := int64(0); got < total; got += int64(len(rawBuf)) {
			if _, err := io.ReadFull(c, rawBuf); err != nil {
				b.Fatal(err)
			}
		}
	}

	fetch() // warm up: buffers, connections, page faults
	raw()
	b.ReportAllocs()
	b.ResetTimer()
	var tKV, tRaw time.Duration
	for i := 0; b.Loop(); i++ {
		run := func(f func(), d *time.Duration) {
			start := time.Now()
			f()
			*d += time.Since(start)
		}
		if i%2 == 0 {
			run(fetch, &tKV)
			run(raw, &tRaw)
		} else {
			run(raw, &tRaw)
			run(fetch, &tKV)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(total)*n/tKV.Seconds()/1e6, "kvwire-MB/s")
	b.ReportMetric(float64(total)*n/tRaw.Seconds()/1e6, "raw-MB/s")
	b.ReportMetric(tRaw.Seconds()/tKV.Seconds(), "goodput-ratio")
}

func benchServer(b *testing.B, compute func(*kvwire.Job)) (*kvwire.Server, string) {
	b.Helper()
	jobs := make(chan *kvwire.Job, 1)
	srv, err := kvwire.NewServer(kvwire.ServerConfig{Dispatch: func(j *kvwire.Job) { jobs <- j }})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	done := make(chan struct{})
	go func() { // the compute loop
		defer close(done)
		for j := range jobs {
			compute(j)
		}
	}()
	b.Cleanup(func() {
		srv.Close()
		close(jobs)
		<-done
	})
	return srv, l.Addr().String()
}

func rawServer(b *testing.B, send func(net.Conn)) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var one [1]byte
			if _, err := io.ReadFull(c, one[:]); err == nil {
				send(c)
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}
