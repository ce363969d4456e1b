package node

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"
)

// TestTimeBody: what a probe's download gives: the bytes after the first read over the time from it to the
// last; a download cut short counts if enough arrived after its first bytes, and one that is too small, or
// fails early, is an error.
func TestTimeBody(t *testing.T) {
	t.Parallel()
	slow := func(n int) io.Reader { // 64 KiB every 2 ms
		return &pacedReader{r: bytes.NewReader(make([]byte, n)), every: 2 * time.Millisecond}
	}
	cut := func(n int) io.Reader {
		return io.MultiReader(slow(n), iotest.ErrReader(errors.New("deadline exceeded")))
	}
	for _, tc := range []struct {
		name   string
		r      io.Reader
		wantN  int64
		wantOK bool
	}{
		{"whole", slow(1 << 20), 1 << 20, true},
		{"limit", slow(2 << 20), 1 << 20, true},
		{"cut short after enough", cut(512 << 10), 512 << 10, true},
		{"cut short too early", cut(64 << 10), 64 << 10, false},
		{"too small", slow(32 << 10), 32 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, n, err := TimeBody(tc.r, 1<<20)
			if n != tc.wantN || (err == nil) != tc.wantOK || (tc.wantOK && !(g > 0)) {
				t.Fatalf("%v B/s over %d bytes, %v", g, n, err)
			}
			// 64 KiB per 2 ms is at most 32 MB/s (sleeps only stretch it).
			if tc.wantOK && g > 33e6 {
				t.Errorf("goodput %v B/s, above the pace's bound", g)
			}
		})
	}
}

// pacedReader reads at most 64 KiB at a time, sleeping before each read but the first.
type pacedReader struct {
	r       io.Reader
	every   time.Duration
	started bool
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.started {
		time.Sleep(p.every)
	}
	p.started = true
	return p.r.Read(b[:min(len(b), 64<<10)])
}
