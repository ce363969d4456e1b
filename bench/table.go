package bench

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Table is a block of text output: a title, aligned columns, and lines after it (speedups, notes).
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Footer []string
}

// Render writes the table: the first column left-aligned, the others right-aligned (they hold figures), two
// spaces between columns, framed by rules as wide as the table, as exo's summary prints it.
func (t Table) Render(w io.Writer) {
	widths := make([]int, len(t.Header))
	for i, h := range t.Header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range cells {
			if i >= len(widths) {
				break
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	header := line(t.Header)
	width := utf8.RuneCountInString(header)
	for _, f := range append([]string{"  " + t.Title}, t.Footer...) {
		width = max(width, utf8.RuneCountInString(f))
	}
	rule := strings.Repeat("─", width)
	fmt.Fprintln(w, rule)
	fmt.Fprintln(w, "  "+t.Title)
	fmt.Fprintln(w, rule)
	fmt.Fprintln(w, header)
	for _, r := range t.Rows {
		fmt.Fprintln(w, line(r))
	}
	for _, f := range t.Footer {
		fmt.Fprintln(w, f)
	}
	fmt.Fprintln(w, rule)
}

// Figures as tables show them; a dash for a figure that was not measured.
const dash = "—"

func fmtSeconds(s float64) string {
	if s <= 0 {
		return dash
	}
	return fmt.Sprintf("%.2fs", s)
}

func fmtMs(v float64) string {
	switch {
	case v <= 0:
		return dash
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f s", v/1000)
	}
}

func fmtRate(v float64) string {
	if v <= 0 {
		return dash
	}
	if v >= 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtBytes(b float64) string {
	switch {
	case b <= 0:
		return dash
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
}

func fmtUs(v float64) string {
	switch {
	case v == 0:
		return dash
	case v >= 10000 || v <= -10000:
		return fmt.Sprintf("%.1f ms", v/1000)
	default:
		return fmt.Sprintf("%.0f µs", v)
	}
}
