// Package stopstring finds OpenAI-style stop strings in streamed text. Engines stream text piece by piece, and
// a stop string can span pieces; the Matcher holds back text that could still become a stop string, so none is
// ever streamed, and cuts the output right before the first complete one.
package stopstring

import "strings"

// Matcher holds back text that could be the start of a stop string.
type Matcher struct {
	stops   []string
	pending string
}

// New returns a matcher for stops; empty strings are ignored.
func New(stops []string) *Matcher {
	var nonEmpty []string
	for _, s := range stops {
		if s != "" {
			nonEmpty = append(nonEmpty, s)
		}
	}
	return &Matcher{stops: nonEmpty}
}

// Add appends text and returns what can be released now, and whether a stop string completed (in which case
// the released text ends right before it and the stream must end).
func (m *Matcher) Add(text string) (string, bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	buf := m.pending + text
	cut := -1
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		m.pending = ""
		return buf[:cut], true
	}
	// Keep the longest suffix of buf that is a proper prefix of some stop string.
	keep := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(buf)); n > keep; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				keep = n
				break
			}
		}
	}
	m.pending = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// Pending reports how many bytes are held back.
func (m *Matcher) Pending() int { return len(m.pending) }

// Flush releases what is held back, at the end of a stream that ended for another reason.
func (m *Matcher) Flush() string {
	p := m.pending
	m.pending = ""
	return p
}
