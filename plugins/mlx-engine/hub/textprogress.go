package hub

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// TextProgress is the default Progress: on a terminal, one line redrawn in place with a bar, bytes done and
// total, rate and ETA; elsewhere (a log, the gateway collecting a plugin's stderr), a line at the start, one
// every Every while bytes flow, one per retry or warning, and one at the end.
type TextProgress struct {
	W     io.Writer
	Bar   bool          // redraw one line with "\r" instead of writing log lines
	Every time.Duration // between two progress log lines when not Bar; default 10s
	// Prefix starts every log line; default "hub: ".
	Prefix string

	start    time.Time
	lastLog  time.Time
	samples  []sample // recent (time, transferred) pairs for the rate
	barDrawn int      // width of the bar line on screen, 0 if none
	files    int
	done     int
}

type sample struct {
	t time.Time
	n int64
}

// rateWindow is how far back the rate looks, so it follows the current speed rather than the average.
const rateWindow = 5 * time.Second

// NewTextProgress writes to w, with a bar if w is a terminal.
func NewTextProgress(w io.Writer) *TextProgress {
	return &TextProgress{W: w, Bar: isTerminal(w)}
}

// isTerminal reports whether w is a character device that is not known to be dumb.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Report implements Progress.
func (p *TextProgress) Report(e Event) {
	name := e.Repo
	switch e.Kind {
	case EventStart:
		p.start, p.lastLog = e.Time, e.Time
		p.samples = []sample{{e.Time, 0}}
		p.files, p.done = e.Files, 0
		p.logf("%s@%s (commit %.12s): downloading %d file(s), %s%s", name, e.Revision, e.Commit, e.Files,
			formatBytes(e.Total), cachedNote(e))
		p.draw(e)
	case EventProgress:
		p.sample(e)
		if p.Bar {
			p.draw(e)
		} else if e.Time.Sub(p.lastLog) >= p.every() {
			p.lastLog = e.Time
			p.logf("%s: %s", name, p.status(e))
		}
	case EventFileDone:
		p.done++
		if p.Bar {
			p.draw(e)
		}
	case EventRetry:
		what := e.File
		if what == "" {
			what = "listing"
		}
		p.logf("%s: %s: %v; retry %d in %s", name, what, e.Err, e.Attempt, e.Wait.Round(time.Millisecond))
		p.draw(e)
	case EventWarning:
		p.logf("%s: %s", name, e.Message)
		p.draw(e)
	case EventDone:
		switch {
		case e.Err != nil:
			p.logf("%s", strings.TrimPrefix(e.Err.Error(), "hub: "))
		case p.start.IsZero():
			p.logf("%s@%s: cached at %s", name, e.Revision, e.Dir)
		default:
			el := e.Time.Sub(p.start)
			p.logf("%s: downloaded %s in %s (%s/s) to %s", name, formatBytes(e.Transferred), formatDuration(el),
				formatBytes(rate(e.Transferred, el)), e.Dir)
		}
	}
}

func cachedNote(e Event) string {
	var notes []string
	if e.Cached > 0 {
		notes = append(notes, fmt.Sprintf("%d cached", e.Cached))
	}
	if e.Bytes > 0 {
		notes = append(notes, formatBytes(e.Bytes)+" resumed")
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

func (p *TextProgress) every() time.Duration {
	if p.Every > 0 {
		return p.Every
	}
	return 10 * time.Second
}

func (p *TextProgress) sample(e Event) {
	p.samples = append(p.samples, sample{e.Time, e.Transferred})
	cut := 0
	for cut < len(p.samples)-2 && e.Time.Sub(p.samples[cut+1].t) >= rateWindow {
		cut++
	}
	p.samples = p.samples[cut:]
}

// currentRate is bytes per second over the recent samples.
func (p *TextProgress) currentRate() int64 {
	if len(p.samples) < 2 {
		return 0
	}
	a, b := p.samples[0], p.samples[len(p.samples)-1]
	return rate(b.n-a.n, b.t.Sub(a.t))
}

// status is "1.13 GiB / 2.70 GiB (42%), 35.2 MiB/s, ETA 45s".
func (p *TextProgress) status(e Event) string {
	s := fmt.Sprintf("%s / %s (%d%%), %s/s", formatBytes(e.Bytes), formatBytes(e.Total), percent(e.Bytes, e.Total), formatBytes(p.currentRate()))
	if eta := p.eta(e); eta != "" {
		s += ", ETA " + eta
	}
	return s
}

// eta is the time left at the current rate, in whole seconds, or "" if unknown.
func (p *TextProgress) eta(e Event) string {
	r := p.currentRate()
	if r <= 0 || e.Total <= e.Bytes {
		return ""
	}
	left := time.Duration(float64(e.Total-e.Bytes) / float64(r) * float64(time.Second))
	return formatDuration(max(left.Round(time.Second), time.Second))
}

// draw redraws the bar line (terminal mode only).
func (p *TextProgress) draw(e Event) {
	if !p.Bar || p.start.IsZero() || e.Total == 0 && e.Kind != EventStart {
		return
	}
	// Short enough for an 80-column terminal: a wrapped line cannot be redrawn with "\r".
	const width = 20
	fill := int(int64(width) * min(e.Bytes, e.Total) / max(e.Total, 1))
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	line := fmt.Sprintf("[%s] %3d%% %s/%s %s/s", bar, percent(e.Bytes, e.Total), formatBytes(e.Bytes),
		formatBytes(e.Total), formatBytes(p.currentRate()))
	if eta := p.eta(e); eta != "" {
		line += " ETA " + eta
	}
	line += fmt.Sprintf(" %d/%d files", p.done, p.files)
	pad := max(p.barDrawn-len(line), 0)
	fmt.Fprintf(p.W, "\r%s%s", line, strings.Repeat(" ", pad))
	p.barDrawn = len(line)
}

// logf writes one line; on a terminal it first moves past the bar, which the next draw puts back.
func (p *TextProgress) logf(format string, args ...any) {
	prefix := p.Prefix
	if prefix == "" {
		prefix = "hub: "
	}
	if p.barDrawn > 0 {
		fmt.Fprintf(p.W, "\r%s\r", strings.Repeat(" ", p.barDrawn))
		p.barDrawn = 0
	}
	fmt.Fprintf(p.W, prefix+format+"\n", args...)
}

func percent(a, b int64) int64 {
	if b <= 0 {
		return 100
	}
	return a * 100 / b
}

func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// formatBytes writes n with binary units: "512 B", "1.50 KiB", "35.2 MiB", "2.70 GiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, units[i])
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, units[i])
	}
	return fmt.Sprintf("%.2f %s", v, units[i])
}

// formatDuration writes "45s", "12m05s", "3h04m".
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case d < time.Second && d > 0:
		return d.Round(time.Millisecond).String()
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
}
