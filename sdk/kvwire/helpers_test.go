package kvwire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// readHex reads a hand-written hex file from testdata/golden: hex byte pairs, "ascii" strings, # comments.
func readHex(t testing.TB, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseHex(t, name, string(src))
}

// hx parses bytes written in the golden files' syntax.
func hx(t testing.TB, src string) []byte {
	t.Helper()
	return parseHex(t, "inline", src)
}

func parseHex(t testing.TB, name, src string) []byte {
	t.Helper()
	out := []byte{}
	for ln, line := range strings.Split(src, "\n") {
		for line != "" {
			line = strings.TrimLeft(line, " \t")
			switch {
			case line == "" || line[0] == '#':
				line = ""
			case line[0] == '"':
				end := strings.IndexByte(line[1:], '"')
				if end < 0 {
					t.Fatalf("%s:%d: unterminated string", name, ln+1)
				}
				out = append(out, line[1:1+end]...)
				line = line[2+end:]
			default:
				if len(line) < 2 {
					t.Fatalf("%s:%d: odd hex digit", name, ln+1)
				}
				b, err := hex.DecodeString(line[:2])
				if err != nil {
					t.Fatalf("%s:%d: %v", name, ln+1, err)
				}
				out = append(out, b...)
				line = line[2:]
			}
		}
	}
	return out
}

// frameOf prepends the length prefix to body.
func frameOf(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// bodyOf checks a frame's length prefix and returns its body.
func bodyOf(t testing.TB, frame []byte) []byte {
	t.Helper()
	if len(frame) < 4 || int(binary.BigEndian.Uint32(frame)) != len(frame)-4 {
		t.Fatalf("frame length prefix % x does not match its %d body bytes", frame[:min(4, len(frame))], len(frame)-4)
	}
	return frame[4:]
}

func equalMessages(a, b kvwire.Message) bool {
	x, err1 := kvwire.AppendMessage(nil, a)
	y, err2 := kvwire.AppendMessage(nil, b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
