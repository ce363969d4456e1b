package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"strconv"
)

// Chart is an SVG figure of bar panels, written by hand (no dependency): a title, a few lines of context under
// it, and panels of grouped bars, one group per x category and one bar per series, each labelled with its
// value. It is meant to be committed next to a README and read in a browser or on GitHub.
type Chart struct {
	Title    string
	Subtitle []string
	Panels   []Panel
}

// Panel is one bar chart. Values[g][s] is series s in group g; NaN (or a missing entry) leaves the bar out.
type Panel struct {
	Title  string
	Unit   string // the y axis' label
	Groups []string
	Series []string
	Values [][]float64
}

// The chart's geometry and palette (colour-blind safe, Okabe–Ito).
const (
	chartWidth  = 960
	panelHeight = 300
	marginLeft  = 80
	marginRight = 24
	plotTop     = 44 // within a panel: title and legend above the plot
	plotBottom  = 44 // x labels below it
)

var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// SVG renders the chart.
func (c Chart) SVG() []byte {
	var b bytes.Buffer
	head := 40 + 18*len(c.Subtitle)
	height := head + panelHeight*len(c.Panels) + 16
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="18" font-weight="bold">%s</text>`+"\n", marginLeft-60, esc(c.Title))
	for i, s := range c.Subtitle {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#444444">%s</text>`+"\n", marginLeft-60, 46+18*i, esc(s))
	}
	for i, p := range c.Panels {
		p.render(&b, head+panelHeight*i)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func (p Panel) render(b *bytes.Buffer, top int) {
	fmt.Fprintf(b, `<g transform="translate(0,%d)">`+"\n", top)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft-60, esc(p.Title))
	// Legend, right-aligned on the title's line.
	x := chartWidth - marginRight
	for s := len(p.Series) - 1; s >= 0; s-- {
		w := 18 + 7*len([]rune(p.Series[s]))
		x -= w + 12
		fmt.Fprintf(b, `<rect x="%d" y="10" width="12" height="12" fill="%s"/><text x="%d" y="20">%s</text>`+"\n",
			x, palette[s%len(palette)], x+16, esc(p.Series[s]))
	}

	plotH := panelHeight - plotTop - plotBottom
	plotW := chartWidth - marginLeft - marginRight
	top0, base := plotTop, plotTop+plotH
	hi := 0.0
	for _, g := range p.Values {
		for _, v := range g {
			if !math.IsNaN(v) && v > hi {
				hi = v
			}
		}
	}
	step, ticks := niceTicks(hi)
	yMax := step * float64(ticks)
	y := func(v float64) float64 { return float64(base) - v/yMax*float64(plotH) }
	for t := 0; t <= ticks; t++ {
		v := step * float64(t)
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#dddddd"/>`+"\n", marginLeft, f1(y(v)), marginLeft+plotW, f1(y(v)))
		fmt.Fprintf(b, `<text x="%d" y="%s" text-anchor="end" fill="#444444">%s</text>`+"\n", marginLeft-6, f1(y(v)+4), esc(tickLabel(v)))
	}
	fmt.Fprintf(b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle" fill="#444444">%s</text>`+"\n",
		marginLeft-58, top0+plotH/2, esc(p.Unit))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444444"/>`+"\n", marginLeft, base, marginLeft+plotW, base)

	if len(p.Groups) == 0 {
		b.WriteString("</g>\n")
		return
	}
	groupW := float64(plotW) / float64(len(p.Groups))
	nSeries := max(1, len(p.Series))
	barW := math.Min(48, groupW*0.8/float64(nSeries))
	for g, name := range p.Groups {
		cx := float64(marginLeft) + groupW*(float64(g)+0.5)
		x0 := cx - barW*float64(nSeries)/2
		for s := range nSeries {
			if g >= len(p.Values) || s >= len(p.Values[g]) || math.IsNaN(p.Values[g][s]) {
				continue
			}
			v := p.Values[g][s]
			bx, by := x0+barW*float64(s), y(v)
			fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
				f1(bx+1), f1(by), f1(barW-2), f1(float64(base)-by), palette[s%len(palette)], esc(seriesName(p, s)+": "+valueLabel(v)+" "+p.Unit))
			fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" font-size="10" fill="#222222">%s</text>`+"\n",
				f1(bx+barW/2), f1(by-3), esc(valueLabel(v)))
		}
		fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", f1(cx), base+18, esc(name))
	}
	b.WriteString("</g>\n")
}

func seriesName(p Panel, s int) string {
	if s < len(p.Series) {
		return p.Series[s]
	}
	return ""
}

// niceTicks picks a step of 1, 2 or 5 × 10^k giving 4 to 10 intervals that cover hi.
func niceTicks(hi float64) (float64, int) {
	if !(hi > 0) {
		return 1, 4
	}
	raw := hi / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return step, int(math.Ceil(hi/step - 1e-9))
}

func tickLabel(v float64) string { return strconv.FormatFloat(round(v, 6), 'g', -1, 64) }

// valueLabel writes a bar's value with three significant digits.
func valueLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	default:
		return strconv.FormatFloat(round(v, 3), 'f', -1, 64)
	}
}

func f1(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// charted is a benchmark's report: written as JSON, and drawn.
type charted interface{ Chart() Chart }

// writeFiles writes a report as indented JSON to out and its chart to svg, each when named.
func writeFiles(rep charted, out, svg string) error {
	if out != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if svg != "" {
		if err := os.WriteFile(svg, rep.Chart().SVG(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
