package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func f32bytes(fs ...float32) []byte {
	b := make([]byte, 4*len(fs))
	for i, f := range fs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// image builds a safetensors file from a raw header string and data bytes, the way a hostile file would.
func image(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func writeSample(t *testing.T) []byte {
	t.Helper()
	w := NewWriter(map[string]string{"format": "mlx"})
	if err := w.Add("b.weight", F32, []int{2, 3}, f32bytes(1, 2, 3, 4, 5, 6)); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("a.bias", BF16, []int{3}, []byte{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFunc("c.q", U32, []int{1, 1}, func(dst []byte) error {
		binary.LittleEndian.PutUint32(dst, 0xdeadbeef)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("scalar", I64, nil, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	img := writeSample(t)
	if again := writeSample(t); !bytes.Equal(img, again) {
		t.Fatal("writer output is not deterministic")
	}
	if hl := binary.LittleEndian.Uint64(img); (8+hl)%8 != 0 {
		t.Fatalf("header length %d leaves data unaligned", hl)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := strings.Join(f.Names(), ","), "a.bias,b.weight,c.q,scalar"; got != want {
		t.Errorf("names %s, want %s", got, want)
	}
	if f.Metadata()["format"] != "mlx" {
		t.Errorf("metadata %v", f.Metadata())
	}
	w, _ := f.Tensor("b.weight")
	fs, ok := w.Float32s()
	if !ok {
		t.Fatal("F32 tensor not usable in place")
	}
	if len(fs) != 6 || fs[5] != 6 || w.NumElements() != 6 {
		t.Errorf("b.weight = %v shape %v", fs, w.Shape)
	}
	q, _ := f.Tensor("c.q")
	if u, ok := q.Uint32s(); !ok || u[0] != 0xdeadbeef {
		t.Errorf("c.q = %v %v", u, ok)
	}
	b, _ := f.Tensor("a.bias")
	if b.DType != BF16 || !bytes.Equal(b.Data, []byte{1, 2, 3, 4, 5, 6}) {
		t.Errorf("a.bias = %s %v", b.DType, b.Data)
	}
	if _, ok := b.Float32s(); ok {
		t.Error("BF16 tensor offered as float32")
	}
	s, _ := f.Tensor("scalar")
	if len(s.Shape) != 0 || s.NumElements() != 1 || len(s.Data) != 8 {
		t.Errorf("scalar = %v %d", s.Shape, len(s.Data))
	}
}

func TestWriterRejects(t *testing.T) {
	t.Parallel()
	w := NewWriter(nil)
	if err := w.Add("x", DType("F4"), []int{1}, nil); err == nil {
		t.Error("accepted unknown dtype")
	}
	if err := w.Add("x", F32, []int{1}, f32bytes(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("x", F32, []int{1}, f32bytes(1)); err == nil {
		t.Error("accepted a duplicate name")
	}
	if err := w.Add("y", F32, []int{2}, f32bytes(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `"y"`) {
		t.Errorf("short data: %v", err)
	}
}

func TestBadFiles(t *testing.T) {
	t.Parallel()
	good := writeSample(t)
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<40)
	lying := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(lying, uint64(len(good)))
	cases := []struct {
		name string
		img  []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"seven bytes", good[:7], "too short"},
		{"header length beyond limit", hugeLen, "exceeds the"},
		{"header length lies", lying, "truncated file"},
		{"truncated data", good[:len(good)-3], "out of range"},
		{"not json", image("{nope", nil), "not JSON"},
		{"json array", image("[]", nil), "not a JSON object"},
		{"trailing garbage", image(`{}x`, nil), "trailing"},
		{"unknown dtype", image(`{"t":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), `unknown dtype "F4"`},
		{"missing offsets", image(`{"t":{"dtype":"F32","shape":[1]}}`, f32bytes(1)), "needs dtype, shape and data_offsets"},
		{"unknown field", image(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, f32bytes(1)), "bad header entry"},
		{"offsets out of range", image(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32bytes(1)), "out of range"},
		{"offsets reversed", image(`{"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, f32bytes(1)), "out of range"},
		{"negative offset", image(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, f32bytes(1)), "out of range"},
		{"size mismatch", image(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, f32bytes(1, 2)), "needs 8 bytes"},
		{"negative dim", image(`{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, f32bytes(1)), "negative dimension"},
		{"overflowing shape", image(`{"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, f32bytes(1)), "overflows"},
		{"huge shape", image(`{"t":{"dtype":"F32","shape":[1000000000],"data_offsets":[0,4]}}`, f32bytes(1)), "more bytes than the file"},
		{"three offsets", image(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, f32bytes(1, 2)), "[begin, end]"},
		{"overlap", image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32bytes(1, 2)), "overlap"},
		{"duplicate", image(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32bytes(1, 2)), "duplicate"},
		{"bad metadata", image(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.img)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(path, image(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Open error %v does not name %s", err, path)
	}
	if _, err := Open(filepath.Join(dir, "missing.safetensors")); err == nil {
		t.Error("opened a missing file")
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("Open(dir) = %v", err)
	}
}

// FuzzParse checks that no header, however hostile, panics the parser or yields a tensor whose bytes do not
// match its shape.
func FuzzParse(f *testing.F) {
	f.Add(image(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32bytes(1)))
	f.Add(image(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}))
	f.Add(image(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{7}))
	f.Fuzz(func(t *testing.T, img []byte) {
		file, err := Parse(img)
		if err != nil {
			return
		}
		for _, name := range file.Names() {
			tn, _ := file.Tensor(name)
			if len(tn.Data) != tn.NumElements()*tn.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for shape %v of %s", name, len(tn.Data), tn.Shape, tn.DType)
			}
		}
	})
}

func TestUnalignedFloat32sFallsBack(t *testing.T) {
	t.Parallel()
	// A 1-byte tensor first puts the float32 one at an odd offset: it must be converted, not aliased.
	f, err := Parse(image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}}      `, append([]byte{7}, f32bytes(2.5)...)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Tensor("b")
	if _, ok := b.Float32s(); ok {
		t.Error("unaligned float32 data offered in place")
	}
}
