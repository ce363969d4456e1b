package echo

import "strings"

// stopMatcher holds back text that could be the start of a stop string, so a stop string that spans tokens is
// never streamed, and cuts the output at the first complete one.
type stopMatcher struct {
	stops   []string
	pending string
}

func newStopMatcher(stops []string) *stopMatcher {
	var nonEmpty []string
	for _, s := range stops {
		if s != "" {
			nonEmpty = append(nonEmpty, s)
		}
	}
	return &stopMatcher{stops: nonEmpty}
}

// add appends text and returns what can be released, and whether a stop string completed.
func (m *stopMatcher) add(text string) (string, bool) {
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

// flush releases what is held back at the end of the stream.
func (m *stopMatcher) flush() string {
	p := m.pending
	m.pending = ""
	return p
}
