package mpack

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAppendIntShortest(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		v    int64
		want string
	}{
		"zero":          {0, "00"},
		"fixint max":    {127, "7f"},
		"uint8 min":     {128, "cc 80"},
		"uint8 max":     {255, "cc ff"},
		"uint16 min":    {256, "cd 01 00"},
		"uint16 max":    {65535, "cd ff ff"},
		"uint32 min":    {65536, "ce 00 01 00 00"},
		"uint32 max":    {math.MaxUint32, "ce ff ff ff ff"},
		"uint64":        {math.MaxUint32 + 1, "cf 00 00 00 01 00 00 00 00"},
		"int64 max":     {math.MaxInt64, "cf 7f ff ff ff ff ff ff ff"},
		"negfixint -1":  {-1, "ff"},
		"negfixint min": {-32, "e0"},
		"int8":          {-33, "d0 df"},
		"int8 min":      {-128, "d0 80"},
		"int16":         {-129, "d1 ff 7f"},
		"int32":         {-32769, "d2 ff ff 7f ff"},
		"int64":         {math.MinInt64, "d3 80 00 00 00 00 00 00 00"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := AppendInt(nil, tc.v)
			if want := unhex(t, tc.want); !bytes.Equal(got, want) {
				t.Fatalf("AppendInt(%d) = % x, want % x", tc.v, got, want)
			}
			r := MakeReader(got, 8)
			v, err := r.ReadInt()
			if err != nil || v != tc.v || r.Len() != 0 {
				t.Fatalf("ReadInt = %d, %v (left %d), want %d", v, err, r.Len(), tc.v)
			}
		})
	}
}

func TestReadIntAnyWidth(t *testing.T) {
	t.Parallel()
	// 5 in every integer encoding a peer might choose.
	for _, enc := range []string{"05", "cc 05", "cd 00 05", "ce 00 00 00 05", "cf 00 00 00 00 00 00 00 05",
		"d0 05", "d1 00 05", "d2 00 00 00 05", "d3 00 00 00 00 00 00 00 05"} {
		r := MakeReader(unhex(t, enc), 8)
		if v, err := r.ReadInt(); err != nil || v != 5 {
			t.Errorf("% s: got %d, %v", enc, v, err)
		}
	}
}

func TestHeadersShortest(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		got  []byte
		want string
	}{
		"fixmap":     {AppendMapHeader(nil, 15), "8f"},
		"map16":      {AppendMapHeader(nil, 16), "de 00 10"},
		"map32":      {AppendMapHeader(nil, 65536), "df 00 01 00 00"},
		"fixarray":   {AppendArrayHeader(nil, 15), "9f"},
		"array16":    {AppendArrayHeader(nil, 16), "dc 00 10"},
		"array32":    {AppendArrayHeader(nil, 65536), "dd 00 01 00 00"},
		"fixstr":     {AppendStrHeader(nil, 31), "bf"},
		"str8":       {AppendStrHeader(nil, 32), "d9 20"},
		"str16":      {AppendStrHeader(nil, 256), "da 01 00"},
		"str32":      {AppendStrHeader(nil, 65536), "db 00 01 00 00"},
		"bin8":       {AppendBinHeader(nil, 255), "c4 ff"},
		"bin16":      {AppendBinHeader(nil, 256), "c5 01 00"},
		"bin32":      {AppendBinHeader(nil, 65536), "c6 00 01 00 00"},
		"true false": {AppendBool(AppendBool(nil, true), false), "c3 c2"},
		"nil":        {AppendNil(nil), "c0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if want := unhex(t, tc.want); !bytes.Equal(tc.got, want) {
				t.Fatalf("got % x, want % x", tc.got, want)
			}
		})
	}
	for _, n := range []int{0, 255, 256, 65535, 65536} {
		if got := len(AppendBinHeader(nil, n)); got != BinHeaderLen(n) {
			t.Errorf("BinHeaderLen(%d) = %d, header is %d bytes", n, BinHeaderLen(n), got)
		}
	}
}

func TestReaderRoundTrip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70000)
	b := AppendMapHeader(nil, 3)
	b = AppendStr(b, "s")
	b = AppendStr(b, long)
	b = AppendStr(b, "b")
	b = AppendBin(b, []byte(long))
	b = AppendStr(b, "a")
	b = AppendArrayHeader(b, 2)
	b = AppendBool(b, true)
	b = AppendNil(b)

	r := MakeReader(b, 8)
	n, err := r.ReadMapHeader()
	if err != nil || n != 3 {
		t.Fatalf("map header: %d, %v", n, err)
	}
	if k, _ := r.ReadStr(); string(k) != "s" {
		t.Fatalf("key %q", k)
	}
	if s, err := r.ReadStr(); err != nil || string(s) != long {
		t.Fatalf("str32: %v", err)
	}
	r.ReadStr()
	if p, err := r.ReadBin(); err != nil || string(p) != long {
		t.Fatalf("bin32: %v", err)
	}
	r.ReadStr()
	if n, err := r.ReadArrayHeader(); err != nil || n != 2 {
		t.Fatalf("array: %d, %v", n, err)
	}
	if v, err := r.ReadBool(); err != nil || !v {
		t.Fatalf("bool: %v, %v", v, err)
	}
	if k, _ := r.Peek(); k != KindNil {
		t.Fatalf("peek = %v", k)
	}
	if err := r.Skip(); err != nil || r.Len() != 0 {
		t.Fatalf("skip nil: %v, left %d", err, r.Len())
	}
}

func TestReaderRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   string
		read func(*Reader) error
		want string
	}{
		"empty":                {"", func(r *Reader) error { _, err := r.ReadInt(); return err }, "needs 1 bytes"},
		"truncated uint32":     {"ce 00 00", func(r *Reader) error { _, err := r.ReadInt(); return err }, "needs 5 bytes"},
		"uint64 overflow":      {"cf ff ff ff ff ff ff ff ff", func(r *Reader) error { _, err := r.ReadInt(); return err }, "overflows int64"},
		"int from str":         {"a1 41", func(r *Reader) error { _, err := r.ReadInt(); return err }, "expected integer, got str"},
		"str from bin":         {"c4 01 41", func(r *Reader) error { _, err := r.ReadStr(); return err }, "expected str, got bin"},
		"bin32 past frame":     {"c6 ff ff ff ff 00", func(r *Reader) error { _, err := r.ReadBin(); return err }, "bin of 4294967295 bytes, only 1 left"},
		"str16 past frame":     {"da 00 10 41", func(r *Reader) error { _, err := r.ReadStr(); return err }, "str of 16 bytes"},
		"array32 past frame":   {"dd 7f ff ff ff 01", func(r *Reader) error { _, err := r.ReadArrayHeader(); return err }, "array of 2147483647 elements"},
		"map32 past frame":     {"df 00 00 00 02 01 01 01", func(r *Reader) error { _, err := r.ReadMapHeader(); return err }, "map of 2 entries"},
		"map from array":       {"90", func(r *Reader) error { _, err := r.ReadMapHeader(); return err }, "expected map, got array"},
		"never used byte":      {"c1", func(r *Reader) error { return r.Skip() }, "invalid byte 0xc1"},
		"skip truncated float": {"cb 00 00", func(r *Reader) error { return r.Skip() }, "float needs 9 bytes"},
		"skip ext32 past":      {"c9 ff ff ff ff 01", func(r *Reader) error { return r.Skip() }, "ext of 4294967295 bytes"},
		"skip truncated array": {"92 01", func(r *Reader) error { return r.Skip() }, "array of 2 elements"},
		"skip too deep":        {strings.Repeat("91 ", 9) + "01", func(r *Reader) error { return r.Skip() }, "nested deeper than 8"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := MakeReader(unhex(t, tc.in), 8)
			err := tc.read(&r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSkipNestingAtBound(t *testing.T) {
	t.Parallel()
	// Eight nested containers are within a bound of 8, nine are not; empty containers do not count.
	ok := unhex(t, strings.Repeat("81 a1 6b ", 7)+"91 01")
	if r := MakeReader(ok, 8); r.Skip() != nil {
		t.Fatalf("8 levels rejected: %v", r.Skip())
	}
	r := MakeReader(unhex(t, strings.Repeat("91 ", 8)+"90"), 8)
	if err := r.Skip(); err != nil || r.Len() != 0 {
		t.Fatalf("empty innermost container: %v", err)
	}
	// A million levels must fail fast without recursion.
	deep := bytes.Repeat([]byte{0x91}, 1<<20)
	r = MakeReader(deep, MaxDepthLimit)
	if err := r.Skip(); err == nil {
		t.Fatal("a million levels accepted")
	}
}

func TestSkipEveryKind(t *testing.T) {
	t.Parallel()
	// One value of each kind, in an array, followed by a marker.
	in := "9e c0 c2 c3 7f e0 cc ff d3 00 00 00 00 00 00 00 00 ca 00 00 00 00 cb 00 00 00 00 00 00 00 00" +
		" a1 41 c4 01 00 d4 01 00 c7 02 05 00 00 81 a1 6b 90 2a"
	r := MakeReader(unhex(t, in), 8)
	if err := r.Skip(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.ReadInt(); err != nil || v != 42 {
		t.Fatalf("marker: %d, %v (at %d)", v, err, r.Offset())
	}
}
