package kvwire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/internal/mpack"
)

// allocBytes is the average number of bytes f allocates. Tests that call it do not run in parallel, so other
// tests' allocations do not count.
func allocBytes(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	f() // warm up lazily initialised state
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// decodeStream reads one frame from stream and decodes it as decode does, the way a peer's bytes are handled.
func decodeStream(stream []byte, decode func([]byte) error) error {
	body, err := kvwire.NewFrameReader(bytes.NewReader(stream), 64<<20).Next()
	if err != nil {
		return err
	}
	return decode(body)
}

// hostile frames: each must fail cleanly and allocate less than twice the frame (its declared size when it is
// truncated) plus 64 KiB.
func hostileFrames(t *testing.T) map[string]struct {
	stream   []byte
	decode   func([]byte) error
	declared int // the size the prefix claims, when more than the stream holds
	want     string
} {
	chunkHead := `a4 "type" a8 "kv_chunk" a9 "layer_idx" 00 aa "num_tokens" 01 a7 "n_heads" 01 a8 "head_dim" 01 a5 "dtype" a7 "float32"`
	manyTokens := mpack.AppendArrayHeader(hx(t, `81 a9 "token_ids"`), 1<<20)
	for range 1<<20 - 1 {
		manyTokens = append(manyTokens, 0x7f)
	}
	manyTokens = append(manyTokens, 0xa1, 'x') // the last "token" is a str
	manyBlobs := mpack.AppendArrayHeader(hx(t, `83 a4 "type" ac "arrays_state" a9 "layer_idx" 00 a6 "arrays"`), 20000)
	for range 20000 - 1 {
		manyBlobs = append(manyBlobs, hx(t, `83 a5 "dtype" a7 "float32" a5 "shape" 90 a4 "data" c4 04 00 00 00 00`)...)
	}
	manyBlobs = append(manyBlobs, 0x80) // the last array lacks every field
	return map[string]struct {
		stream   []byte
		decode   func([]byte) error
		declared int
		want     string
	}{
		"4 GiB length prefix":       {hx(t, "ff ff ff ff 00 00"), msg, 0, "exceeds the maximum"},
		"truncated prefix":          {hx(t, "00 00"), msg, 0, "unexpected EOF"},
		"truncated body, small":     {hx(t, `00 00 00 40 82 a4 "type"`), msg, 0x40, "unexpected EOF"},
		"claims 60 MiB, sends 1KiB": {append(hx(t, "03 c0 00 00"), make([]byte, 1024)...), msg, 60 << 20, "unexpected EOF"},
		"claims 1 MiB, sends 300K":  {append(hx(t, "00 10 00 00"), make([]byte, 300<<10)...), msg, 1 << 20, "unexpected EOF"},
		"bin32 beyond frame":        {frameOf(hx(t, `88 `+chunkHead+` a4 "keys" c6 7f ff ff ff 00 00 00 00`)), msg, 0, "bin of 2147483647 bytes"},
		"str32 beyond frame":        {frameOf(hx(t, `81 aa "request_id" db ff ff ff f0 41`)), req, 0, "str of 4294967280 bytes"},
		"array32 beyond frame":      {frameOf(hx(t, `81 a9 "token_ids" dd 7f ff ff ff 01 02`)), req, 0, "array of 2147483647 elements"},
		"map32 beyond frame":        {frameOf(hx(t, `df 7f ff ff ff a4 "type"`)), msg, 0, "map of 2147483647 entries"},
		"deep nesting, 1 MiB":       {frameOf(append(hx(t, `82 a4 "type" a4 "done" a1 "x"`), bytes.Repeat([]byte{0x91}, 1<<20)...)), msg, 0, "nested deeper"},
		"deep nesting of maps":      {frameOf(append(hx(t, `81 a1 "x"`), bytes.Repeat(hx(t, `81 a1 "k"`), 1<<16)...)), hdr, 0, "nested deeper"},
		"top level is an array":     {frameOf(bytes.Repeat([]byte{0x91}, 1<<16)), msg, 0, "not a map"},
		"wrong type for keys":       {frameOf(hx(t, `88 `+chunkHead+` a4 "keys" 94 00 00 00 00 a6 "values" c4 04 00 00 00 00`)), msg, 0, "expected bin, got array"},
		"wrong type for token":      {frameOf(manyTokens), req, 0, "expected integer, got str"},
		"bad last tensor blob":      {frameOf(manyBlobs), msg, 0, "lacks dtype, shape or data"},
		"unknown tag":               {frameOf(hx(t, `82 a4 "type" a9 "kv_chunk2" a4 "keys" c4 00`)), msg, 0, "unknown message type"},
		"tag not a string":          {frameOf(hx(t, `81 a4 "type" c4 08 "kv_chunk"`)), msg, 0, "expected str, got bin"},
		"empty frame":               {hx(t, "00 00 00 00"), msg, 0, "not a map"},
		"garbage":                   {frameOf(hx(t, "c1 c1 c1 c1")), msg, 0, "expected map, got invalid byte"},
	}
}

func TestHostileFramesFailCleanlyWithBoundedAllocation(t *testing.T) {
	for name, tc := range hostileFrames(t) {
		t.Run(name, func(t *testing.T) {
			err := decodeStream(tc.stream, tc.decode)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, kvwire.ErrProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v is neither a protocol error nor a truncation", err)
			}
			frame := max(len(tc.stream), tc.declared)
			limit := uint64(2*frame + 64<<10)
			got := allocBytes(5, func() { decodeStream(tc.stream, tc.decode) })
			t.Logf("frame %d bytes (stream %d), allocated %d bytes per decode", frame, len(tc.stream), got)
			if got > limit {
				t.Fatalf("allocated %d bytes for a %d-byte frame, limit %d", got, frame, limit)
			}
		})
	}
}

// A peer that claims far more than it sends must not make the reader commit memory for the claim.
func TestFrameReaderGrowsWithDeliveredBytes(t *testing.T) {
	for _, sent := range []int{0, 1000, 64 << 10, 200 << 10} {
		stream := binary.BigEndian.AppendUint32(nil, 1<<30)
		stream = append(stream, make([]byte, sent)...)
		got := allocBytes(3, func() {
			kvwire.NewFrameReader(bytes.NewReader(stream), 0).Next()
		})
		if limit := uint64(4*sent + 64<<10 + 1024); got > limit {
			t.Errorf("1 GiB claim with %d bytes sent: allocated %d, limit %d", sent, got, limit)
		}
	}
}

// A stream of frames of similar size reuses one buffer; a valid large frame costs under twice its size once.
func TestFrameReaderReusesItsBuffer(t *testing.T) {
	const size = 8 << 20
	var stream []byte
	for range 4 {
		stream = append(stream, frameOf(make([]byte, size))...)
	}
	got := allocBytes(2, func() {
		fr := kvwire.NewFrameReader(bytes.NewReader(stream), 0)
		for range 4 {
			if _, err := fr.Next(); err != nil {
				panic(err)
			}
		}
		if _, err := fr.Next(); err != io.EOF {
			panic(err)
		}
	})
	if limit := uint64(2*size + 64<<10); got > limit {
		t.Fatalf("4 frames of %d bytes allocated %d, limit %d", size, got, limit)
	}
	fr := kvwire.NewFrameReader(bytes.NewReader(stream), 0)
	for range 4 {
		fr.Next()
	}
	if fr.BytesRead() != int64(len(stream)) {
		t.Fatalf("BytesRead = %d, want %d", fr.BytesRead(), len(stream))
	}
}

// Decoding a valid chunk does not copy its tensors.
func TestDecodeChunkAliasesFrame(t *testing.T) {
	c := &kvwire.KVChunk{NumTokens: 64, NHeads: 8, HeadDim: 128, DType: kvwire.BFloat16,
		Keys: make([]byte, 64*8*128*2), Values: make([]byte, 64*8*128*2)}
	body, err := kvwire.AppendMessage(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	got := allocBytes(10, func() { kvwire.DecodeMessage(body) })
	if got > 512 {
		t.Fatalf("decoding a %d-byte chunk allocated %d bytes", len(body), got)
	}
}
