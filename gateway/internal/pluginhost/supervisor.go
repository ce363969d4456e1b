package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Spec says how to start one plugin and what "ready" means for it.
type Spec[T any] struct {
	// Name identifies the plugin in logs and errors, e.g. "engine echo".
	Name string
	// Command builds the command of a fresh process; it is called on every (re)start.
	Command func() *exec.Cmd
	// ClientConfig returns the kind's go-plugin client configuration (engine.ClientConfig, router.ClientConfig).
	ClientConfig func() *plugin.ClientConfig
	// Connect starts the process and dispenses the plugin (engine.Connect, router.Connect).
	Connect func(*plugin.ClientConfig) (T, *plugin.Client, error)
	// Ready runs after every start, before the plugin is handed out: an engine loads its models here. An
	// error fails the start.
	Ready func(ctx context.Context, p T) error
	// OnExit runs when the process is seen to have died (before the restart): the gateway marks the plugin's
	// instances unavailable at once.
	OnExit func()
	// Env replaces the environment the plugin process gets (nil: this process's).
	Env []string
	// Checksum, when set, is the SHA-256 the plugin binary must have (go-plugin's SecureConfig).
	Checksum []byte
	// SocketDir is where each process gets a directory of its own for go-plugin's unix socket (os.TempDir()
	// when empty). The supervisor removes that directory when the process exits, however it exits: a plugin
	// killed with SIGKILL cannot remove its socket itself.
	SocketDir string
	Logger    *slog.Logger
	// PluginLog receives the plugin's own log lines; nil discards them.
	PluginLog io.Writer
	// LogLevel is the level of the plugin's log lines that are kept ("info" when empty).
	LogLevel string
	// StartTimeout bounds the handshake; ReadyTimeout bounds Ready (loading a model can take minutes).
	StartTimeout, ReadyTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between restarts; it doubles after each crash and resets once
	// the plugin has stayed up for StableAfter.
	MinBackoff, MaxBackoff, StableAfter time.Duration
}

func (s *Spec[T]) defaults() {
	if s.StartTimeout == 0 {
		s.StartTimeout = time.Minute
	}
	if s.ReadyTimeout == 0 {
		s.ReadyTimeout = 30 * time.Minute
	}
	if s.MinBackoff == 0 {
		s.MinBackoff = 250 * time.Millisecond
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = 30 * time.Second
	}
	if s.StableAfter == 0 {
		s.StableAfter = time.Minute
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
}

// State is where a supervised plugin is in its life.
type State string

// States.
const (
	StateStarting   State = "starting"
	StateRunning    State = "running"
	StateRestarting State = "restarting"
	StateStopped    State = "stopped"
)

// Status is a supervisor's state for the admin API.
type Status struct {
	Name      string    `json:"name"`
	State     State     `json:"state"`
	PID       int       `json:"pid,omitempty"`
	Restarts  int       `json:"restarts"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// LastError says what went wrong last, in the gateway's own words: a plugin's output (its stderr, a
	// handshake line it printed) goes to the gateway's log only, never to a client.
	LastError string `json:"last_error,omitempty"`
}

// Supervisor keeps one plugin process running.
type Supervisor[T any] struct {
	spec Spec[T]

	mu        sync.Mutex
	cur       T
	pc        *plugin.Client
	tail      *Tail
	gen       uint64 // bumped on every start
	state     State
	startedAt time.Time
	restarts  int
	lastErr   string        // with the plugin's stderr, for the log and Get's error (which callers log)
	lastState string        // lastErr without anything the plugin wrote, for Status
	lastWords string        // a short version of lastErr's stderr, for the log
	exited    chan struct{} // closed when the current process is seen to exit, after OnExit ran
	sockDir   string        // the current process's socket directory

	stop chan struct{}
	done chan struct{}
}

// Start starts the plugin and waits until it is ready. After that, the supervisor restarts it whenever it
// dies, until Stop.
func Start[T any](ctx context.Context, spec Spec[T]) (*Supervisor[T], error) {
	spec.defaults()
	s := &Supervisor[T]{spec: spec, state: StateStarting, stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.start(ctx); err != nil {
		s.state = StateStopped
		close(s.done)
		return nil, err
	}
	go s.watch()
	return s, nil
}

// start launches one process and runs Ready on it.
func (s *Supervisor[T]) start(ctx context.Context) error {
	tail := NewTail(200, 4096)
	cfg := s.spec.ClientConfig()
	cfg.Cmd = s.spec.Command()
	if cfg.Cmd.Env == nil {
		cfg.Cmd.Env = os.Environ()
		if s.spec.Env != nil {
			cfg.Cmd.Env = append([]string(nil), s.spec.Env...)
		}
	}
	sockDir, err := os.MkdirTemp(s.spec.SocketDir, "plugin-")
	if err != nil {
		return fmt.Errorf("start plugin %s: a directory for its socket: %w", s.spec.Name, err)
	}
	removeSockDir := true
	defer func() {
		if removeSockDir {
			os.RemoveAll(sockDir)
		}
	}()
	// The SDK's plugins exit when this process is gone (sdk/internal/pluginrpc.HostPIDEnv). go-plugin's server
	// creates its socket in PLUGIN_UNIX_SOCKET_DIR.
	// The SDK's plugins log at DUET_PLUGIN_LOG_LEVEL (sdk/internal/pluginrpc.LogLevel): the host's level, so
	// that --log-level debug shows a plugin's debug records too (the host drops lines below it anyway).
	cfg.Cmd.Env = append(cfg.Cmd.Env, "DUET_PLUGIN_HOST_PID="+strconv.Itoa(os.Getpid()), plugin.EnvUnixSocketDir+"="+sockDir,
		"DUET_PLUGIN_LOG_LEVEL="+s.spec.LogLevel)
	cfg.AutoMTLS = true
	cfg.Stderr = tail
	cfg.StartTimeout = s.spec.StartTimeout
	out := s.spec.PluginLog
	if out == nil {
		out = io.Discard
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: s.spec.Name, Output: out, Level: hclog.LevelFromString(s.spec.LogLevel)})
	if s.spec.Checksum != nil {
		cfg.SecureConfig = &plugin.SecureConfig{Checksum: s.spec.Checksum, Hash: newSHA256()}
	}
	p, pc, err := s.spec.Connect(cfg)
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		err = fmt.Errorf("%w: %s has SHA-256 %s, but %x is pinned; it was not run", err, cfg.Cmd.Path, fileSHA256(cfg.Cmd.Path), s.spec.Checksum)
	}
	if err != nil {
		return s.failure("start", err, tail)
	}
	if s.spec.Ready != nil {
		rctx, cancel := context.WithTimeout(ctx, s.spec.ReadyTimeout)
		err = s.spec.Ready(rctx, p)
		cancel()
		if err != nil {
			pc.Kill()
			return s.failure("prepare", err, tail)
		}
	}
	s.mu.Lock()
	if s.state == StateStopped {
		s.mu.Unlock()
		pc.Kill()
		return fmt.Errorf("plugin %s: stopped while starting", s.spec.Name)
	}
	s.cur, s.pc, s.tail = p, pc, tail
	s.sockDir, removeSockDir = sockDir, false
	s.gen++
	s.state = StateRunning
	s.startedAt = time.Now()
	s.exited = make(chan struct{})
	s.mu.Unlock()
	s.spec.Logger.Info("plugin ready", "plugin", s.spec.Name, "pid", pid(pc))
	return nil
}

func (s *Supervisor[T]) failure(what string, err error, tail *Tail) error {
	if last := tail.Summary(2048); last != "" {
		return fmt.Errorf("%s plugin %s: %w\nplugin stderr:\n%s", what, s.spec.Name, err, last)
	}
	return fmt.Errorf("%s plugin %s: %w", what, s.spec.Name, err)
}

func pid(pc *plugin.Client) int {
	if rc := pc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// pollInterval is how often the supervisor checks whether the process is alive. go-plugin offers no exit
// channel; requests in flight do not wait for this, their streams break at once.
const pollInterval = 50 * time.Millisecond

func (s *Supervisor[T]) watch() {
	defer close(s.done)
	backoff := s.spec.MinBackoff
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
		}
		s.mu.Lock()
		pc := s.pc
		s.mu.Unlock()
		if pc != nil && !pc.Exited() {
			continue
		}
		s.mu.Lock()
		var exited chan struct{}
		if pc != nil {
			if time.Since(s.startedAt) > s.spec.StableAfter {
				backoff = s.spec.MinBackoff
			}
			s.lastErr = "plugin exited unexpectedly"
			s.lastState = s.lastErr
			s.lastWords = s.tail.Summary(512)
			if last := s.tail.Summary(2048); last != "" {
				s.lastErr += ": " + last
			}
			exited = s.exited
			s.pc = nil
			os.RemoveAll(s.sockDir)
			s.sockDir = ""
		}
		s.state = StateRestarting
		s.restarts++
		lastErr := s.lastErr
		s.mu.Unlock()
		if s.spec.OnExit != nil {
			s.spec.OnExit()
		}
		// Only now: a request that broke with the process learns of the death from Explain, and must find
		// what OnExit did (its instances unavailable) already done when it answers its client.
		if exited != nil {
			close(exited)
		}
		s.spec.Logger.Error("plugin died; restarting", "plugin", s.spec.Name, "in", backoff, "last_error", lastErr)

		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.spec.MaxBackoff)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := s.start(ctx)
		cancel()
		if err != nil {
			s.mu.Lock()
			s.lastErr = err.Error()
			s.lastState = "plugin restart failed (the gateway's log has why)"
			s.mu.Unlock()
			s.spec.Logger.Error("plugin restart failed", "plugin", s.spec.Name, "error", err)
		}
	}
}

// ErrUnavailable wraps the error of a plugin that is not running.
var ErrUnavailable = errors.New("plugin unavailable")

// Get returns the running plugin and its generation (for Explain), or an error wrapping ErrUnavailable.
func (s *Supervisor[T]) Get() (T, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateRunning {
		var zero T
		msg := fmt.Sprintf("%s: plugin %s is %s", ErrUnavailable, s.spec.Name, s.state)
		if s.lastErr != "" {
			msg += " (" + s.lastErr + ")"
		}
		return zero, s.gen, errors.New(msg)
	}
	return s.cur, s.gen, nil
}

// Explain says whether the plugin of generation gen died (or was restarted) under a call that failed, and
// what it said last on stderr, for the log: its stderr can name temporary paths and carry unrelated records,
// so it is never for clients. It waits up to a second for the supervisor to notice an exit, since a broken
// stream usually arrives first; call it only for errors that can mean a dead plugin.
func (s *Supervisor[T]) Explain(gen uint64) (died bool, lastWords string) {
	s.mu.Lock()
	exited, cur := s.exited, s.gen
	s.mu.Unlock()
	if cur != gen {
		return true, "restarted during the call"
	}
	select {
	case <-exited:
	case <-time.After(time.Second):
		return false, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return true, s.lastWords
}

// Status reports the supervisor's state.
func (s *Supervisor[T]) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Name: s.spec.Name, State: s.state, Restarts: s.restarts, StartedAt: s.startedAt, LastError: s.lastState}
	if s.pc != nil {
		st.PID = pid(s.pc)
	}
	return st
}

// Stop stops the plugin and the restarts. It waits for the process to exit.
func (s *Supervisor[T]) Stop() {
	s.mu.Lock()
	if s.state == StateStopped {
		s.mu.Unlock()
		return
	}
	s.state = StateStopped
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	pc, sockDir := s.pc, s.sockDir
	s.pc, s.sockDir = nil, ""
	s.mu.Unlock()
	if pc != nil {
		pc.Kill()
	}
	if sockDir != "" {
		os.RemoveAll(sockDir)
	}
}
