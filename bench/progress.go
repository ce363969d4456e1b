package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress reports what a benchmark is doing on stderr: on a terminal, one line redrawn in place with a bar
// of the steps done; elsewhere (a log, a CI job) a line per step, so the output stays readable.
type progress struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	quiet  bool
	total  int
	done   int
	label  string
	start  time.Time
	drawn  bool
	ticker *time.Ticker
	stop   chan struct{}
}

func newProgress(w io.Writer, total int, quiet bool) *progress {
	p := &progress{w: w, tty: isTerminal(w), quiet: quiet, total: total, start: time.Now(), stop: make(chan struct{})}
	if p.tty && !quiet {
		// Redraw every second, so the elapsed time moves during a long step.
		p.ticker = time.NewTicker(time.Second)
		go func() {
			for {
				select {
				case <-p.ticker.C:
					p.mu.Lock()
					p.draw()
					p.mu.Unlock()
				case <-p.stop:
					return
				}
			}
		}()
	}
	return p
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// addTotal grows the number of steps (a phase that learns its work late).
func (p *progress) addTotal(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total += n
}

// step starts a step; it counts toward the bar when it is done.
func (p *progress) step(format string, args ...any) {
	p.show(func() string { return fmt.Sprintf("[%d/%d] ", p.done+1, p.total) }, format, args...)
}

// note says what the benchmark is doing between counted steps (starting a node, linking): the label on a
// terminal, a line elsewhere.
func (p *progress) note(format string, args ...any) {
	p.show(func() string { return "  · " }, format, args...)
}

// show sets the label and draws it: the bar on a terminal, else a line after prefix (which runs with p.mu held).
func (p *progress) show(prefix func() string, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = fmt.Sprintf(format, args...)
	if p.quiet {
		return
	}
	if p.tty {
		p.draw()
		return
	}
	fmt.Fprintf(p.w, "%s%s\n", prefix(), p.label)
}

// update changes the label of the current step on a terminal; elsewhere it prints nothing (for labels that
// change every second).
func (p *progress) update(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = fmt.Sprintf(format, args...)
	if p.tty {
		p.draw()
	}
}

// advance marks a step done.
func (p *progress) advance() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.tty && !p.quiet {
		p.draw()
	}
}

// logf prints a line that stays (a warning, a setup message) above the bar.
func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
	if p.tty {
		p.draw()
	}
}

// finish clears the bar.
func (p *progress) finish() {
	if p.ticker != nil {
		p.ticker.Stop()
		close(p.stop)
		p.ticker = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

func (p *progress) draw() {
	if p.quiet || !p.tty {
		return
	}
	const width = 24
	filled := 0
	if p.total > 0 {
		filled = min(width, width*p.done/p.total)
	}
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	el := time.Since(p.start).Round(time.Second)
	fmt.Fprintf(p.w, "\r\x1b[K%s %d/%d  %s  %s", bar, p.done, p.total, el, p.label)
	p.drawn = true
}
