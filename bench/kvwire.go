package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/duet-ai/duet/sdk/clustersecret"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// `duet bench kvwire` measures the KV wire's goodput (tensor bytes per second) against raw TCP carrying the
// same bytes in the same pieces, between two hosts: a --serve side runs a KV wire server that streams
// synthetic KV of the shape the client asks for, as a prefill engine streams it (a chunk per layer per prefill
// step, from a pool of reused buffers), and a raw TCP server on the next port that sends the same bytes from as
// many buffers in turn; the client side fetches from both in turn. --local runs both sides on loopback.

// KVWireOptions are `duet bench kvwire`'s flags.
type KVWireOptions struct {
	Local       bool   `json:"local"`
	Serve       string `json:"serve,omitempty"`
	Connect     string `json:"connect,omitempty"`
	Layers      int    `json:"layers"`
	KVHeads     int    `json:"kv_heads"`
	HeadDim     int    `json:"head_dim"`
	DType       string `json:"dtype"`
	Tokens      int    `json:"tokens"`
	ChunkTokens int    `json:"chunk_tokens"`
	Repeat      int    `json:"repeat"`
	Warmup      int    `json:"warmup"`
	Checksum    bool   `json:"checksum"`
	SecretFile  string `json:"secret_file,omitempty"`
	Out         string `json:"-"`
	SVG         string `json:"-"`
	Quiet       bool   `json:"-"`
}

const kvwireUsage = `Measure the KV wire's goodput against raw TCP. On the prefill host run the server side, on the decode host
the client side; or both on loopback with --local. The client asks for KV of the shape given (default: a
Llama-3.1-8B prompt, 32 layers × 8 KV heads × 128, bf16: 128 KiB per token), streamed a chunk per layer per
prefill step as an engine streams it, then the same bytes in the same pieces over plain TCP, alternating which
goes first.

Examples:
  duet bench kvwire --local
  duet bench kvwire --serve 0.0.0.0:7450                              # KV wire on 7450, raw TCP on 7451
  duet bench kvwire --connect prefill-host:7450 --tokens 8192 --repeat 5`

// ParseKVWire reads `duet bench kvwire`'s flags.
func ParseKVWire(args []string, stderr io.Writer) (KVWireOptions, error) {
	var o KVWireOptions
	fs := newFlagSet("kvwire", kvwireUsage, stderr)
	fs.BoolVar(&o.Local, "local", false, "run the server and the client on loopback")
	fs.StringVar(&o.Serve, "serve", "", "run the server side on this address (host:port; raw TCP on port+1) until interrupted")
	fs.StringVar(&o.Connect, "connect", "", "run the client side against a --serve address (host:port)")
	fs.IntVar(&o.Layers, "layers", 32, "layers of the KV")
	fs.IntVar(&o.KVHeads, "kv-heads", 8, "KV heads per layer")
	fs.IntVar(&o.HeadDim, "head-dim", 128, "head dimension")
	fs.StringVar(&o.DType, "dtype", "bfloat16", "element type: bfloat16, float16 or float32")
	fs.IntVar(&o.Tokens, "tokens", 4096, "prompt tokens per transfer")
	fs.IntVar(&o.ChunkTokens, "chunk-tokens", 512, "tokens per chunk (a prefill step)")
	fs.IntVar(&o.Repeat, "repeat", 5, "measured transfers each way")
	fs.IntVar(&o.Warmup, "warmup", 1, "warm-up transfers each way, not measured")
	fs.BoolVar(&o.Checksum, "checksum", false, "ask for a CRC-32C per chunk (the kv_checksum extension)")
	fs.StringVar(&o.SecretFile, "secret-file", "", "cluster secret file: the server requires, and the client sends, the KV wire's authentication proof")
	fs.StringVar(&o.Out, "out", "", "write the results as JSON to this file (client side)")
	fs.StringVar(&o.SVG, "svg", "", "write a chart as SVG to this file (client side)")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress output")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	var errs []error
	modes := 0
	for _, on := range []bool{o.Local, o.Serve != "", o.Connect != ""} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		errs = append(errs, errors.New("give one of --local (both sides on loopback), --serve host:port (the server side) or --connect host:port (the client side)"))
	}
	for flag, addr := range map[string]string{"--serve": o.Serve, "--connect": o.Connect} {
		if addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %v", flag, addr, err))
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65534 {
			errs = append(errs, fmt.Errorf("%s %q: want a port between 1 and 65534 (raw TCP uses the next one)", flag, addr))
		}
	}
	if _, err := kvShapeOf(o); err != nil {
		errs = append(errs, err)
	}
	if o.Repeat < 1 || o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--repeat must be at least 1 and --warmup not negative"))
	}
	return o, errors.Join(errs...)
}

// kvShape is the KV a client asks for. It travels in the request's model_id, so the server needs no
// configuration of its own: "duet-bench-kv?layers=32&kv_heads=8&head_dim=128&dtype=bfloat16&chunk_tokens=512".
type kvShape struct {
	Layers, KVHeads, HeadDim, ChunkTokens int
	DType                                 kvwire.DType
}

const kvShapePrefix = "duet-bench-kv?"

func kvShapeOf(o KVWireOptions) (kvShape, error) {
	dt, _ := kvwire.ParseDType(o.DType)
	s := kvShape{Layers: o.Layers, KVHeads: o.KVHeads, HeadDim: o.HeadDim, ChunkTokens: o.ChunkTokens, DType: dt}
	if err := s.check(); err != nil {
		return s, err
	}
	if o.Tokens < 1 || o.Tokens > 1<<20 {
		return s, fmt.Errorf("--tokens %d: want 1 to %d", o.Tokens, 1<<20)
	}
	return s, nil
}

func (s kvShape) check() error {
	switch {
	case s.Layers < 1 || s.Layers > 1024:
		return fmt.Errorf("--layers %d: want 1 to 1024", s.Layers)
	case s.KVHeads < 1 || s.KVHeads > 1024:
		return fmt.Errorf("--kv-heads %d: want 1 to 1024", s.KVHeads)
	case s.HeadDim < 1 || s.HeadDim > 4096:
		return fmt.Errorf("--head-dim %d: want 1 to 4096", s.HeadDim)
	case !s.DType.Valid():
		return errors.New("--dtype: want bfloat16, float16 or float32")
	case s.ChunkTokens < 1 || s.chunkBytes() > 64<<20:
		return fmt.Errorf("--chunk-tokens %d: a chunk must hold at least one token and at most 64 MiB per tensor (this one is %d MiB)", s.ChunkTokens, s.chunkBytes()>>20)
	}
	return nil
}

func (s kvShape) chunkBytes() int { return s.ChunkTokens * s.KVHeads * s.HeadDim * s.DType.Size() }

func (s kvShape) modelID() string {
	v := url.Values{}
	v.Set("layers", strconv.Itoa(s.Layers))
	v.Set("kv_heads", strconv.Itoa(s.KVHeads))
	v.Set("head_dim", strconv.Itoa(s.HeadDim))
	v.Set("dtype", s.DType.String())
	v.Set("chunk_tokens", strconv.Itoa(s.ChunkTokens))
	return kvShapePrefix + v.Encode()
}

func parseKVShape(modelID string) (kvShape, error) {
	q, ok := strings.CutPrefix(modelID, kvShapePrefix)
	if !ok {
		return kvShape{}, fmt.Errorf("model_id %q is not a duet bench kvwire request", modelID)
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		return kvShape{}, err
	}
	num := func(k string) int { n, _ := strconv.Atoi(v.Get(k)); return n }
	dt, _ := kvwire.ParseDType(v.Get("dtype"))
	s := kvShape{Layers: num("layers"), KVHeads: num("kv_heads"), HeadDim: num("head_dim"), ChunkTokens: num("chunk_tokens"), DType: dt}
	return s, s.check()
}

// transfer is how one transfer streams: steps of ChunkTokens (the last one shorter), a chunk per layer each.
func (s kvShape) steps(tokens int) []int {
	var out []int
	for left := tokens; left > 0; left -= s.ChunkTokens {
		out = append(out, min(left, s.ChunkTokens))
	}
	return out
}

func (s kvShape) totalBytes(tokens int) int64 {
	return int64(tokens) * int64(s.Layers) * 2 * int64(s.KVHeads*s.HeadDim*s.DType.Size())
}

// kvServer is the server side: the KV wire on one listener, raw TCP on another.
type kvServer struct {
	kv       *kvwire.Server
	kvLn     net.Listener
	rawLn    net.Listener
	jobs     chan *kvwire.Job
	done     chan struct{}
	poolSize int
	pools    map[int]chan [2][]byte // by chunk size; the compute loop's alone

	rawMu sync.Mutex
	raw   map[int][][]byte // read-only pieces for raw TCP, by size
}

func startKVServer(addr string, secret []byte) (*kvServer, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	kvLn, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	rawPort := "0"
	if port != "0" {
		p, _ := strconv.Atoi(port)
		rawPort = strconv.Itoa(p + 1)
	}
	rawLn, err := net.Listen("tcp", net.JoinHostPort(host, rawPort))
	if err != nil {
		kvLn.Close()
		return nil, err
	}
	s := &kvServer{kvLn: kvLn, rawLn: rawLn, jobs: make(chan *kvwire.Job, 16), done: make(chan struct{}), poolSize: 32,
		pools: map[int]chan [2][]byte{}, raw: map[int][][]byte{}}
	cfg := kvwire.ServerConfig{Dispatch: func(j *kvwire.Job) {
		select {
		case s.jobs <- j:
		default:
			_ = j.Reject(kvwire.CodeBusy, "the benchmark server is busy")
		}
	}}
	if secret != nil {
		cfg.Secrets, cfg.RequireAuth = [][]byte{secret}, true
	}
	if s.kv, err = kvwire.NewServer(cfg); err != nil {
		kvLn.Close()
		rawLn.Close()
		return nil, err
	}
	go func() { _ = s.kv.Serve(kvLn) }()
	go s.compute()
	go s.serveRaw()
	return s, nil
}

// compute is the "engine": one job at a time, as an engine's compute loop.
func (s *kvServer) compute() {
	defer close(s.done)
	for j := range s.jobs {
		s.serveJob(j)
	}
}

func (s *kvServer) serveJob(j *kvwire.Job) {
	shape, err := parseKVShape(j.Request.ModelID)
	if err != nil {
		_ = j.Reject(kvwire.CodeBadRequest, err.Error())
		return
	}
	w, err := j.Accept()
	if err != nil {
		return
	}
	tokens := len(j.Request.TokenIDs) - j.Request.StartPos
	if err := w.Header(kvwire.Header{RequestID: j.Request.RequestID, ModelID: j.Request.ModelID, NumLayers: shape.Layers, DType: shape.DType, StartPos: j.Request.StartPos}); err != nil {
		return
	}
	// The buffers are made once per chunk size and reused, as an engine's are: filling them is no part of a
	// transfer.
	pool := s.pools[shape.chunkBytes()]
	if pool == nil {
		pool = newKVPool(s.poolSize, shape.chunkBytes())
		s.pools[shape.chunkBytes()] = pool
	}
	release := func(c kvwire.KVChunk) { pool <- [2][]byte{c.Keys[:cap(c.Keys)], c.Values[:cap(c.Values)]} }
	for _, n := range shape.steps(tokens) {
		size := n * shape.KVHeads * shape.HeadDim * shape.DType.Size()
		for layer := range shape.Layers {
			kv := <-pool
			c := kvwire.KVChunk{LayerIdx: layer, NumTokens: n, NHeads: shape.KVHeads, HeadDim: shape.HeadDim, DType: shape.DType,
				Keys: kv[0][:size], Values: kv[1][:size]}
			if err := w.Chunk(c, release); err != nil {
				return
			}
		}
	}
	_ = w.Done(tokens)
}

// newKVPool stands for an engine's KV buffers: chunk-sized key/value pairs, filled once.
func newKVPool(n, size int) chan [2][]byte {
	p := make(chan [2][]byte, n)
	for i := range n {
		k, v := make([]byte, size), make([]byte, size)
		for j := range k {
			k[j], v[j] = byte(i+j), byte(i*7+j*3)
		}
		p <- [2][]byte{k, v}
	}
	return p
}

// serveRaw answers raw TCP requests: 16 bytes (total bytes, piece size, big-endian), then the bytes in pieces.
func (s *kvServer) serveRaw() {
	for {
		c, err := s.rawLn.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var hdr [16]byte
			_ = c.SetReadDeadline(time.Now().Add(rawStall))
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			total, piece := int64(binary.BigEndian.Uint64(hdr[:8])), int(binary.BigEndian.Uint64(hdr[8:]))
			if piece < 1 || piece > 64<<20 || total < 0 {
				return
			}
			bufs := s.rawBufs(piece)
			for i, sent := 0, int64(0); sent < total; i++ {
				n := int(min(int64(piece), total-sent))
				_ = c.SetWriteDeadline(time.Now().Add(rawStall))
				if _, err := c.Write(bufs[i%len(bufs)][:n]); err != nil {
					return
				}
				sent += int64(n)
			}
		}()
	}
}

// rawBufs are as many filled pieces of size bytes as the KV side's pool holds keys and values, made once and
// shared (raw connections only read them). Raw TCP sends them in turn, as the KV side sends its pool's buffers:
// sending one piece over and over would send it from the CPU's cache, and the ratio would measure the cache
// rather than the wire's format.
func (s *kvServer) rawBufs(size int) [][]byte {
	s.rawMu.Lock()
	defer s.rawMu.Unlock()
	b := s.raw[size]
	if b == nil {
		pool := newKVPool(s.poolSize, size)
		for range s.poolSize {
			kv := <-pool
			b = append(b, kv[0], kv[1])
		}
		s.raw[size] = b
	}
	return b
}

func (s *kvServer) close() {
	s.kv.Close()
	s.rawLn.Close()
	close(s.jobs)
	<-s.done
}

// KVWireReport is `duet bench kvwire`'s JSON.
type KVWireReport struct {
	Bench      string        `json:"bench"` // "kvwire"
	Version    string        `json:"duet_version"`
	StartedAt  time.Time     `json:"started_at"`
	Options    KVWireOptions `json:"options"`
	Server     string        `json:"server"`
	BytesPerOp int64         `json:"tensor_bytes_per_transfer"`
	// Goodput figures are tensor bytes per second (MB = 10^6 bytes), over every measured transfer.
	KVWireMBps  float64     `json:"kvwire_mb_per_s"`
	RawMBps     float64     `json:"raw_mb_per_s"`
	Ratio       float64     `json:"goodput_ratio"`
	KVWireMs    Percentiles `json:"kvwire_ms"`
	RawMs       Percentiles `json:"raw_ms"`
	Checksummed bool        `json:"checksummed"`
}

// RunKVWire runs `duet bench kvwire`.
func RunKVWire(ctx context.Context, o KVWireOptions, version string, stdout, stderr io.Writer) error {
	var secret []byte
	if o.SecretFile != "" {
		raw, err := clustersecret.ReadFile(o.SecretFile)
		if err != nil {
			return err
		}
		keys, err := clustersecret.Derive(raw)
		if err != nil {
			return err
		}
		secret = keys.KV
	}
	if o.Serve != "" {
		s, err := startKVServer(o.Serve, secret)
		if err != nil {
			return err
		}
		defer s.close()
		fmt.Fprintf(stderr, "serving the KV wire on %s and raw TCP on %s; run duet bench kvwire --connect %s on the other host; Ctrl-C stops\n",
			s.kvLn.Addr(), s.rawLn.Addr(), s.kvLn.Addr())
		<-ctx.Done()
		return nil
	}
	addr, rawAddr := o.Connect, ""
	if o.Local {
		s, err := startKVServer("127.0.0.1:0", secret)
		if err != nil {
			return err
		}
		defer s.close()
		addr, rawAddr = s.kvLn.Addr().String(), s.rawLn.Addr().String()
	} else {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		rawAddr = net.JoinHostPort(host, strconv.Itoa(p+1))
	}
	shape, _ := kvShapeOf(o)
	total := shape.totalBytes(o.Tokens)
	req := &kvwire.Request{RequestID: "duet-bench", ModelID: shape.modelID(), TokenIDs: make([]int32, o.Tokens)}
	opts := &kvwire.FetchOptions{Buffer: new(kvwire.Buffer), Checksum: o.Checksum, Secret: secret}
	rep := &KVWireReport{Bench: "kvwire", Version: version, StartedAt: time.Now().UTC(), Options: o, Server: addr, BytesPerOp: total}
	fetch := func() (time.Duration, error) {
		start := time.Now()
		res, err := kvwire.Fetch(ctx, addr, req, opts, kvwire.Handler{})
		if err != nil {
			return 0, fmt.Errorf("KV wire fetch from %s: %w", addr, err)
		}
		if res.TensorBytes != total {
			return 0, fmt.Errorf("KV wire fetch: %d tensor bytes of %d", res.TensorBytes, total)
		}
		rep.Checksummed = res.Checksummed
		return time.Since(start), nil
	}
	raw := func() (time.Duration, error) { return rawFetch(ctx, rawAddr, total, shape.chunkBytes()) }
	prog := newProgress(stderr, 2*(o.Warmup+o.Repeat), o.Quiet)
	defer prog.finish()
	var kvTimes, rawTimes []time.Duration
	for i := range o.Warmup + o.Repeat {
		order := []struct {
			name string
			f    func() (time.Duration, error)
			out  *[]time.Duration
		}{{"kvwire", fetch, &kvTimes}, {"raw TCP", raw, &rawTimes}}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, step := range order {
			what := "measured"
			if i < o.Warmup {
				what = "warm-up"
			}
			prog.step("%s: %s transfer of %s", step.name, what, fmtBytes(float64(total)))
			d, err := step.f()
			if err != nil {
				return err
			}
			if i >= o.Warmup {
				*step.out = append(*step.out, d)
			}
			prog.advance()
		}
	}
	prog.finish()
	sum := func(ds []time.Duration) time.Duration {
		var t time.Duration
		for _, d := range ds {
			t += d
		}
		return t
	}
	n := float64(o.Repeat)
	rep.KVWireMBps = round(float64(total)*n/sum(kvTimes).Seconds()/1e6, 5)
	rep.RawMBps = round(float64(total)*n/sum(rawTimes).Seconds()/1e6, 5)
	rep.Ratio = round(rep.KVWireMBps/rep.RawMBps, 4)
	rep.KVWireMs, rep.RawMs = SummarizeDurations(kvTimes).rounded(), SummarizeDurations(rawTimes).rounded()
	rep.Table().Render(stdout)
	return writeFiles(rep, o.Out, o.SVG)
}

// rawStall bounds each step of a raw TCP transfer (the request, a piece), as the KV wire's frame timeout
// bounds each of its frames: a peer that stalls fails the benchmark instead of hanging it.
const rawStall = kvwire.DefaultFrameTimeout

// rawFetch reads total bytes from the raw server into one reused buffer of a chunk's keys and values, as a
// chunk must arrive whole for its consumer.
func rawFetch(ctx context.Context, addr string, total int64, piece int) (time.Duration, error) {
	start := time.Now()
	d := net.Dialer{Timeout: rawStall}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("raw TCP to %s: %w", addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // Ctrl-C ends a transfer in flight
	defer stop()
	var hdr [16]byte
	binary.BigEndian.PutUint64(hdr[:8], uint64(total))
	binary.BigEndian.PutUint64(hdr[8:], uint64(piece))
	_ = c.SetDeadline(time.Now().Add(rawStall))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("raw TCP to %s: %w", addr, err)
	}
	buf := make([]byte, 2*piece)
	for got := int64(0); got < total; {
		n := int(min(int64(len(buf)), total-got))
		_ = c.SetReadDeadline(time.Now().Add(rawStall))
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return 0, fmt.Errorf("raw TCP from %s: %w", addr, err)
		}
		got += int64(n)
	}
	return time.Since(start), nil
}

// Table is the report as text.
func (rep *KVWireReport) Table() Table {
	o := rep.Options
	t := Table{
		Title: fmt.Sprintf("kvwire: %d tokens × %d layers × %d KV heads × %d, %s (%s per transfer, chunks of %d tokens), %d transfers each way",
			o.Tokens, o.Layers, o.KVHeads, o.HeadDim, o.DType, fmtBytes(float64(rep.BytesPerOp)), o.ChunkTokens, o.Repeat),
		Header: []string{"transport", "goodput", "transfer p50", "transfer p99"},
		Rows: [][]string{
			{"kv wire", fmt.Sprintf("%.0f MB/s", rep.KVWireMBps), fmtMs(rep.KVWireMs.P50), fmtMs(rep.KVWireMs.P99)},
			{"raw TCP", fmt.Sprintf("%.0f MB/s", rep.RawMBps), fmtMs(rep.RawMs.P50), fmtMs(rep.RawMs.P99)},
		},
		Footer: []string{fmt.Sprintf("  goodput ratio (kv wire / raw TCP): %.3f; server %s; checksummed %v", rep.Ratio, rep.Server, rep.Checksummed)},
	}
	return t
}

// Chart draws both goodputs.
func (rep *KVWireReport) Chart() Chart {
	return Chart{Title: "duet bench kvwire", Subtitle: []string{rep.Table().Title},
		Panels: []Panel{{Title: "Goodput (tensor bytes per second)", Unit: "MB/s", Series: []string{"kv wire", "raw TCP"},
			Groups: []string{rep.Server}, Values: [][]float64{{rep.KVWireMBps, rep.RawMBps}}}}}
}
