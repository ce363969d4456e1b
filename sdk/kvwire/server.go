package kvwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// errTooManyFiles is the accept error that passes once connections close.
var errTooManyFiles = syscall.EMFILE

// Defaults for ServerConfig's zero fields.
const (
	DefaultPickupTimeout       = 5 * time.Second
	DefaultFirstByteTimeout    = 2 * time.Second
	DefaultRequestTimeout      = 10 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultMaxJobDuration      = 10 * time.Minute
	DefaultMaxRequestSize      = 16 << 20
	DefaultSendBuffer          = 256 << 20
	DefaultMaxConns            = 256
	DefaultMaxPending          = 256
	DefaultMaxPendingPerSource = 64
	DefaultMaxNonces           = 1 << 20

	DefaultMaxUnauthenticatedBytes   = 32 << 20
	DefaultMaxAnonymousJobs          = 4
	DefaultMaxAnonymousJobsPerSource = 2
)

// ServerConfig configures a Server. Only Dispatch is required.
type ServerConfig struct {
	// Dispatch hands a decoded (and, with auth, verified) job to the engine. It runs on the connection's
	// goroutine and must not block: typically it puts the job on the engine's queue, or calls Job.Reject when
	// the queue is full. The engine's compute loop later calls Job.Accept; a job not accepted within
	// PickupTimeout is answered 503 by the server.
	Dispatch func(*Job)

	// PickupTimeout is how long a dispatched job waits for Job.Accept.
	PickupTimeout time.Duration
	// FirstByteTimeout bounds the wait for a new connection's first bytes (its request's length prefix);
	// RequestTimeout bounds reading the whole request frame.
	FirstByteTimeout, RequestTimeout time.Duration
	// WriteTimeout bounds every write to the socket, so a stalled client cannot hold a job forever.
	WriteTimeout time.Duration
	// MaxJobDuration bounds a job from Accept to its last byte; past it the job is aborted.
	MaxJobDuration time.Duration
	// MaxRequestSize caps the request frame (16 MiB holds millions of token IDs).
	MaxRequestSize int
	// MaxUnauthenticatedBytes bounds, across all connections, the memory held by requests that are not
	// authenticated: the buffers of requests still arriving (which grow only as bytes arrive), their decoded
	// strings and token IDs, and the token IDs of jobs running without a proof. A request that would pass it is
	// answered 503 at once; an authenticated request gives its share back once its proof is verified.
	MaxUnauthenticatedBytes int64
	// MaxAnonymousJobs caps the jobs in progress without a valid proof (every job, when the server has no
	// Secrets), and MaxAnonymousJobsPerSource those of one client address; a request beyond either is answered
	// 503 at once, so unauthenticated peers cannot take the engine's whole compute from its own requests.
	MaxAnonymousJobs, MaxAnonymousJobsPerSource int
	// SendBuffer bounds, in tensor bytes, what a job's Writer holds queued and not yet written; the engine
	// blocks in Writer.Chunk beyond it (backpressure).
	SendBuffer int64
	// MaxConns caps the jobs in progress (dispatched, waiting for pickup, or streaming); a complete request
	// beyond it is answered 503. Connections still sending their request hold no job slot.
	MaxConns int
	// MaxPending caps the connections that have not yet sent a complete request, and MaxPendingPerSource
	// those of one client address. Beyond either, the oldest such connection (of that address) is closed to make
	// room: a client that opens connections and sends nothing cannot keep a well-formed request out, it only
	// loses its own oldest connections.
	MaxPending, MaxPendingPerSource int

	// Secrets enables the authentication extension: the first secret is current, the others are still
	// accepted (rotation). Requests that carry a proof are verified against them and rejected (401) when the
	// proof is bad, stale or replayed.
	Secrets [][]byte
	// RequireAuth rejects (401) requests without a proof. It needs Secrets.
	RequireAuth bool
	// AuthWindow is how far a proof's timestamp may be from this server's clock (default DefaultAuthWindow).
	AuthWindow time.Duration
	// MaxNonces bounds the replay cache; when it is full of unexpired nonces, authenticated requests are
	// answered 503 until entries expire.
	MaxNonces int

	// DisableChecksums makes the server ignore requests for per-chunk checksums.
	DisableChecksums bool

	// Logger receives one line per rejected request or failed job (nil: discard).
	Logger *slog.Logger
	// Now is the clock for auth timestamps (nil: time.Now). For tests.
	Now func() time.Time
}

func (c *ServerConfig) setDefaults() error {
	if c.Dispatch == nil {
		return errors.New("kvwire: ServerConfig.Dispatch is required")
	}
	if c.RequireAuth && len(c.Secrets) == 0 {
		return errors.New("kvwire: ServerConfig.RequireAuth needs Secrets")
	}
	for _, s := range c.Secrets {
		if len(s) == 0 {
			return errors.New("kvwire: empty secret in ServerConfig.Secrets")
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PickupTimeout, DefaultPickupTimeout)
	def(&c.RequestTimeout, DefaultRequestTimeout)
	def(&c.FirstByteTimeout, min(DefaultFirstByteTimeout, c.RequestTimeout))
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.MaxJobDuration, DefaultMaxJobDuration)
	def(&c.AuthWindow, DefaultAuthWindow)
	if c.MaxRequestSize <= 0 {
		c.MaxRequestSize = DefaultMaxRequestSize
	}
	if c.MaxUnauthenticatedBytes <= 0 {
		c.MaxUnauthenticatedBytes = DefaultMaxUnauthenticatedBytes
	}
	if c.MaxAnonymousJobs <= 0 {
		c.MaxAnonymousJobs = DefaultMaxAnonymousJobs
	}
	if c.MaxAnonymousJobsPerSource <= 0 {
		c.MaxAnonymousJobsPerSource = min(DefaultMaxAnonymousJobsPerSource, c.MaxAnonymousJobs)
	}
	if c.SendBuffer <= 0 {
		c.SendBuffer = DefaultSendBuffer
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxPendingPerSource <= 0 {
		c.MaxPendingPerSource = min(DefaultMaxPendingPerSource, c.MaxPending)
	}
	if c.MaxNonces <= 0 {
		c.MaxNonces = DefaultMaxNonces
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Server accepts KV requests over TCP and hands them to an engine as Jobs. Each connection carries one request
// and one response stream, as in exo.
type Server struct {
	cfg  ServerConfig
	auth *authVerifier
	warn *rateLog

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	pending   pendingConns // connections still sending their request
	jobs      int          // connections past their request: job slots in use
	anonJobs  int          // of jobs, those without a valid proof
	anonBySrc map[string]int
	unauth    byteBudget    // memory held by unauthenticated requests
	stopping  chan struct{} // closed by Stop and Close: no new jobs; pending ones are answered 503
	closed    bool
	wg        sync.WaitGroup
}

// NewServer checks cfg, fills its defaults and returns a server that is not yet serving.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*serverConn]struct{}),
		pending:   newPendingConns(),
		anonBySrc: map[string]int{},
		unauth:    byteBudget{max: cfg.MaxUnauthenticatedBytes},
		stopping:  make(chan struct{}),
		warn:      newRateLog(cfg.Logger, time.Second, 10),
	}
	if len(cfg.Secrets) > 0 {
		s.auth = newAuthVerifier(cfg.Secrets, cfg.AuthWindow, cfg.MaxNonces)
	}
	return s, nil
}

// Serve accepts connections on l until Stop or Close, then returns ErrServerClosed. It closes l.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.isStopping() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()

	backoff := time.Duration(0)
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isStopping() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("kvwire: accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		sc := &serverConn{srv: s, conn: c, source: sourceOf(c.RemoteAddr())}
		s.mu.Lock()
		if s.isStopping() {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		evicted := s.pending.add(sc, s.cfg.MaxPending, s.cfg.MaxPendingPerSource)
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		for _, old := range evicted {
			old.evict()
		}
		if len(evicted) > 0 {
			s.warn.Warn("kvwire: too many connections without a request; closed the oldest", "reason", "pending",
				"source", sc.source, "closed", len(evicted))
		}
		go sc.serve()
	}
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// beginStop closes the listeners and answers every pending (not yet accepted) job 503.
func (s *Server) beginStop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isStopping() {
		close(s.stopping)
	}
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.interruptRead()
	}
}

// Stop stops accepting, answers jobs not yet accepted with 503, and waits for accepted jobs to finish writing
// (Done or Error flushed, or failed). If ctx ends first it aborts the remaining jobs as Close does and returns
// ctx's error.
func (s *Server) Stop(ctx context.Context) error {
	s.beginStop()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close stops at once: listeners close and every job in flight is aborted (its writer reports ErrJobAborted
// with cause ErrServerClosed). It waits for the connection goroutines to exit.
func (s *Server) Close() error {
	s.beginStop()
	s.mu.Lock()
	s.closed = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.abort(ErrServerClosed)
	}
	s.wg.Wait()
	return nil
}

// Job is one request handed to the engine. The engine calls Accept (or Reject) from its compute loop.
type Job struct {
	// Request is the decoded request; the job owns its memory.
	Request Request
	// RemoteAddr is the client's address.
	RemoteAddr net.Addr
	// Authenticated reports that the request carried a valid, fresh proof of the cluster secret.
	Authenticated bool

	state   atomic.Int32 // jobPending, jobAccepted, jobRejected, jobExpired
	decided chan struct{}
	code    int
	message string
	w       *Writer
	ctx     context.Context
}

const (
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 256 << 10
)

const (
	jobPending int32 = iota
	jobAccepted
	jobRejected
	jobExpired
)

// Context is done once the job cannot proceed (the client left, a write failed or stalled, the job ran past
// MaxJobDuration, the server was closed; context.Cause tells which) or has finished.
func (j *Job) Context() context.Context { return j.ctx }

// Accept claims the job for the engine and returns its Writer. It fails with ErrJobExpired when the server has
// already answered the job: the pickup timeout passed, the client left, or the server is stopping.
func (j *Job) Accept() (*Writer, error) {
	if !j.state.CompareAndSwap(jobPending, jobAccepted) {
		return nil, ErrJobExpired
	}
	close(j.decided)
	return j.w, nil
}

// Reject answers the job with an error (e.g. 503 when the engine's queue is full, 400 for an unknown model)
// instead of accepting it. It fails with ErrJobExpired when the job was already accepted or answered.
func (j *Job) Reject(code int, message string) error {
	if !j.state.CompareAndSwap(jobPending, jobRejected) {
		return ErrJobExpired
	}
	j.code, j.message = code, message
	close(j.decided)
	return nil
}

// serverConn is one connection: it reads the request, dispatches the job, waits for pickup, and then runs the
// job's send loop.
type serverConn struct {
	srv    *Server
	conn   net.Conn
	source string // the client's IP address

	mu      sync.Mutex
	reading bool // still reading the request: Stop interrupts it
	evicted bool // closed to make room for newer connections
	w       *Writer
	started atomic.Bool  // its first bytes arrived (the pending list evicts idle connections first)
	elem    *pendingElem // on the server's pending list; guarded by the server's mutex

	// What the request holds, given back by release (on the connection's goroutine only): its share of the
	// unauthenticated budget (its body while it arrives and is decoded, then its decoded fields until its
	// proof is verified or, without one, until its job ends), its job slot, and whether that slot is an
	// anonymous one.
	body, fields         hold
	holdsSlot, anonymous bool
}

// release gives back what the request holds. It runs before the last frame of an answer is written, so a
// client that sends its next request as soon as it has read this one's end finds the slot free.
func (c *serverConn) release() {
	c.body.release()
	c.fields.release()
	if !c.holdsSlot {
		return
	}
	s := c.srv
	s.mu.Lock()
	s.jobs--
	if c.anonymous {
		s.anonJobs--
		if s.anonBySrc[c.source]--; s.anonBySrc[c.source] <= 0 {
			delete(s.anonBySrc, c.source)
		}
	}
	s.mu.Unlock()
	c.holdsSlot, c.anonymous = false, false
}

func (c *serverConn) hasStarted() bool { return c.started.Load() }

// evict closes a connection that has not sent its request, to make room.
func (c *serverConn) evict() {
	c.mu.Lock()
	c.evicted = true
	c.mu.Unlock()
	c.conn.Close()
}

func (c *serverConn) interruptRead() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading {
		c.conn.SetReadDeadline(time.Now())
	}
}

func (c *serverConn) abort(cause error) {
	c.mu.Lock()
	w := c.w
	c.mu.Unlock()
	if w != nil {
		w.fail(cause)
	} else {
		c.conn.Close()
	}
}

func (c *serverConn) serve() {
	s := c.srv
	log := s.cfg.Logger.With("remote", c.conn.RemoteAddr().String())
	c.body, c.fields = hold{b: &s.unauth}, hold{b: &s.unauth}
	body, fields := &c.body, &c.fields
	defer func() {
		c.release()
		s.mu.Lock()
		s.pending.remove(c)
		s.mu.Unlock()
		c.mu.Lock()
		watched := c.w != nil
		c.mu.Unlock()
		if !watched {
			// Lingering close: drain what the client may still send (briefly, boundedly) so that closing does
			// not reset the connection and destroy the answer in flight.
			c.conn.SetReadDeadline(time.Now().Add(lingerTimeout))
			io.CopyN(io.Discard, c.conn, lingerBytes)
		}
		c.conn.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := c.conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}

	// The request: its length prefix within FirstByteTimeout, the whole frame within RequestTimeout. Under c.mu,
	// so that Stop either sees reading and interrupts the read, or has already begun and is seen.
	start := time.Now()
	c.mu.Lock()
	c.reading = true
	deadline := start.Add(s.cfg.FirstByteTimeout)
	if s.isStopping() {
		deadline = time.Now()
	}
	c.conn.SetReadDeadline(deadline)
	c.mu.Unlock()
	var prefix [4]byte
	n, err := io.ReadFull(c.conn, prefix[:])
	var frame []byte
	if err == nil {
		c.started.Store(true)
		c.mu.Lock()
		if !s.isStopping() {
			c.conn.SetReadDeadline(start.Add(s.cfg.RequestTimeout))
		}
		c.mu.Unlock()
		// Nothing is allocated before the first bytes (an idle connection costs its goroutine), and then only
		// as bytes arrive, within the budget of every unauthenticated request together. The body is read
		// exactly, without read-ahead, so what the client sends after it is the watcher's to see.
		if size := int(binary.BigEndian.Uint32(prefix[:])); size > s.cfg.MaxRequestSize {
			err = &FrameTooLargeError{Size: int64(size), Max: int64(s.cfg.MaxRequestSize)}
		} else {
			frame, err = readRequestBody(c.conn, size, body)
		}
	}
	c.mu.Lock()
	c.reading = false
	evicted := c.evicted
	c.mu.Unlock()
	s.mu.Lock()
	s.pending.remove(c)
	s.mu.Unlock()
	if evicted {
		return
	}
	if s.isStopping() {
		c.answer(nil, CodeBusy, "server is stopping")
		return
	}
	if err != nil && n < len(prefix) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			s.warn.Info("kvwire: no request within the first-byte deadline", "reason", "idle", "remote", c.conn.RemoteAddr().String(), "timeout", s.cfg.FirstByteTimeout)
		} else if !errors.Is(err, io.EOF) {
			s.warn.Info("kvwire: reading request failed", "reason", "read", "remote", c.conn.RemoteAddr().String(), "err", err)
		}
		return
	}
	if err != nil {
		var tooLarge *FrameTooLargeError
		switch {
		case errors.As(err, &tooLarge):
			log.Info("kvwire: request rejected", "err", err)
			c.answer(nil, CodeBadRequest, "bad request: "+err.Error())
		case errors.Is(err, errUnauthBudget):
			c.answerBudget()
		case !errors.Is(err, io.EOF):
			log.Info("kvwire: reading request failed", "err", err)
		}
		return
	}
	req, err := decodeRequest(frame, fields.take)
	frame = nil
	body.release()
	if errors.Is(err, errUnauthBudget) {
		c.answerBudget()
		return
	}
	if err != nil {
		s.warn.Info("kvwire: request rejected", "reason", "decode", "remote", c.conn.RemoteAddr().String(), "err", err)
		c.answer(nil, CodeBadRequest, "bad request: "+err.Error())
		return
	}
	if req.StartPos > len(req.TokenIDs) {
		c.answer(&req, CodeBadRequest, fmt.Sprintf("bad request: start_pos %d is beyond the %d tokens",
			req.StartPos, len(req.TokenIDs)))
		return
	}
	authenticated := false
	if s.auth != nil && (req.Auth != nil || s.cfg.RequireAuth) {
		if code, msg := s.auth.verify(&req, s.cfg.Now()); code != 0 {
			s.warn.Info("kvwire: request rejected", "reason", "auth", "remote", c.conn.RemoteAddr().String(),
				"request_id", req.RequestID, "code", code, "why", msg)
			c.answer(&req, code, msg)
			return
		}
		authenticated = true
		fields.release()
	}
	c.conn.SetReadDeadline(time.Time{})
	var busy string
	s.mu.Lock()
	switch {
	case s.jobs >= s.cfg.MaxConns:
		busy = fmt.Sprintf("server has %d prefill jobs in progress; retry later", s.cfg.MaxConns)
	case !authenticated && s.anonBySrc[c.source] >= s.cfg.MaxAnonymousJobsPerSource:
		busy = fmt.Sprintf("%s has %d prefill jobs in progress without authentication, the most one address may; retry later",
			c.source, s.cfg.MaxAnonymousJobsPerSource)
	case !authenticated && s.anonJobs >= s.cfg.MaxAnonymousJobs:
		busy = fmt.Sprintf("server has %d prefill jobs in progress without authentication, the most it takes; retry later",
			s.cfg.MaxAnonymousJobs)
	default:
		s.jobs++
		c.holdsSlot = true
		if !authenticated {
			s.anonJobs++
			s.anonBySrc[c.source]++
			c.anonymous = true
		}
	}
	s.mu.Unlock()
	if !c.holdsSlot {
		s.warn.Warn("kvwire: too many jobs in progress", "reason", "busy", "remote", c.conn.RemoteAddr().String(), "why", busy)
		c.answer(&req, CodeBusy, busy)
		return
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	job := &Job{Request: req, RemoteAddr: c.conn.RemoteAddr(), Authenticated: authenticated,
		decided: make(chan struct{}), ctx: ctx}
	checksum := ChecksumNone
	if !s.cfg.DisableChecksums {
		checksum = req.Checksum
	}
	w := newWriter(job, c.conn, cancel, checksum, s.cfg.WriteTimeout, s.cfg.SendBuffer)
	w.beforeFinal = c.release
	job.w = w
	// Publish the writer before looking at s.closed; Close sets closed before it aborts the writers it sees,
	// so either it aborts this one or this connection sees closed.
	c.mu.Lock()
	c.w = w
	c.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	go w.watchClient(c.conn)

	if !c.dispatch(job, log) {
		return
	}
	pickup := time.NewTimer(s.cfg.PickupTimeout)
	defer pickup.Stop()
	var code int
	var why string
	select {
	case <-job.decided:
	case <-pickup.C:
		code, why = CodeBusy, fmt.Sprintf("prefill not picked up within %s (engine busy)", s.cfg.PickupTimeout)
	case <-s.stopping:
		code, why = CodeBusy, "server is stopping"
	case <-ctx.Done():
	}
	if code != 0 || ctx.Err() != nil {
		if job.state.CompareAndSwap(jobPending, jobExpired) {
			if ctx.Err() == nil {
				log.Info("kvwire: job not picked up", "request_id", req.RequestID, "reason", why)
				c.answer(&req, code, why)
			}
			return
		}
		<-job.decided // Accept or Reject won the race and is closing decided right now
	}
	if job.state.Load() == jobRejected {
		c.answer(&req, job.code, job.message)
		return
	}
	jobTimer := time.AfterFunc(s.cfg.MaxJobDuration, func() {
		w.fail(&TimeoutError{Op: fmt.Sprintf("job ran past its maximum duration of %s", s.cfg.MaxJobDuration)})
	})
	defer jobTimer.Stop()
	if err := w.sendLoop(); err != nil {
		log.Info("kvwire: job aborted", "request_id", req.RequestID, "err", err)
	}
}

func (c *serverConn) dispatch(job *Job, log *slog.Logger) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("kvwire: Dispatch panicked", "panic", p)
			if job.state.CompareAndSwap(jobPending, jobExpired) {
				c.answer(&job.Request, CodeInternal, "internal error dispatching the job")
			}
			ok = false
		}
	}()
	c.srv.cfg.Dispatch(job)
	return true
}

// answerBudget answers a request that would pass the unauthenticated memory budget.
func (c *serverConn) answerBudget() {
	s := c.srv
	s.warn.Warn("kvwire: request refused: unauthenticated requests hold their whole memory budget", "reason", "memory",
		"remote", c.conn.RemoteAddr().String(), "max_bytes", s.cfg.MaxUnauthenticatedBytes)
	c.answer(nil, CodeBusy, fmt.Sprintf("server is holding its %d KiB for requests not yet authenticated; retry later",
		s.cfg.MaxUnauthenticatedBytes>>10))
}

// answer writes an error response the way exo does, a header with no layers followed by an error message,
// within one WriteTimeout.
func (c *serverConn) answer(req *Request, code int, message string) {
	c.release()
	h := Header{NumLayers: 0, DType: Float32}
	if req != nil {
		h.RequestID, h.ModelID, h.StartPos = req.RequestID, req.ModelID, req.StartPos
	}
	b, err := appendFrame(nil, func(b []byte) ([]byte, error) { return AppendHeader(b, &h) })
	if err == nil {
		b, err = appendFrame(b, func(b []byte) ([]byte, error) {
			return AppendMessage(b, &Error{Code: code, Message: message})
		})
	}
	if err != nil {
		return
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
	if _, err := c.conn.Write(b); err == nil {
		closeWrite(c.conn)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
