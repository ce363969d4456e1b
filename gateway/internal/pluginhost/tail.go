package pluginhost

import (
	"bytes"
	"strings"
	"sync"
)

// Tail keeps the last lines a plugin wrote to stderr. It is an io.Writer that is safe for concurrent use.
type Tail struct {
	mu      sync.Mutex
	lines   []string
	next    int
	full    bool
	partial []byte
	maxLine int
}

// NewTail keeps up to n lines of at most maxLine bytes each.
func NewTail(n, maxLine int) *Tail {
	return &Tail{lines: make([]string, n), maxLine: maxLine}
}

// Write records p, split into lines.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	data := p
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			t.partial = appendCapped(t.partial, data, t.maxLine)
			break
		}
		line := appendCapped(t.partial, data[:i], t.maxLine)
		t.partial = t.partial[:0]
		t.push(string(line))
		data = data[i+1:]
	}
	return len(p), nil
}

func appendCapped(dst, src []byte, limit int) []byte {
	if room := limit - len(dst); room < len(src) {
		if room <= 0 {
			return dst
		}
		src = src[:room]
	}
	return append(dst, src...)
}

func (t *Tail) push(line string) {
	t.lines[t.next] = line
	t.next = (t.next + 1) % len(t.lines)
	if t.next == 0 {
		t.full = true
	}
}

// Lines returns the kept lines, oldest first, including an unterminated last line.
func (t *Tail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	if t.full {
		out = append(out, t.lines[t.next:]...)
	}
	out = append(out, t.lines[:t.next]...)
	if len(t.partial) > 0 {
		out = append(out, string(t.partial))
	}
	return out
}

// Summary returns the lines that best explain a crash, joined, within max bytes: from a Go panic or fatal
// error on when there is one, else the last lines.
func (t *Tail) Summary(max int) string {
	lines := t.Lines()
	start, found := 0, false
	for i, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			start, found = i, true
			break
		}
	}
	lines = lines[start:]
	var b strings.Builder
	for _, l := range lines {
		if b.Len()+len(l)+1 > max {
			if b.Len() == 0 {
				b.WriteString(l[:max])
			}
			break
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
	}
	if !found && b.Len() < totalLen(lines) {
		// No panic: the last lines matter most.
		b.Reset()
		for i := len(lines) - 1; i >= 0; i-- {
			if b.Len()+len(lines[i])+1 > max {
				break
			}
			b.WriteString(lines[i] + "\n")
		}
		return reverseLines(strings.TrimSuffix(b.String(), "\n"))
	}
	return b.String()
}

func totalLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	return max(n-1, 0)
}

func reverseLines(s string) string {
	parts := strings.Split(s, "\n")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "\n")
}
