package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"unsafe"
)

// MaxHeaderSize bounds the JSON header, as the reference implementation does (100 MB): a larger length prefix
// is treated as a corrupt file rather than an allocation request.
const MaxHeaderSize = 100 << 20

// maxDims bounds a tensor's rank; real checkpoints use at most 5.
const maxDims = 16

// Tensor is one named tensor of an open File. Data aliases the file's memory: it is valid until the File is
// closed and must not be written.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s returns the tensor as a []float32 that aliases the file's memory, without copying, when that is
// possible: dtype F32, 4-byte aligned data, a little-endian host. Otherwise ok is false and the caller converts.
func (t *Tensor) Float32s() (f []float32, ok bool) {
	if t.DType != F32 || !littleEndian || len(t.Data) == 0 || uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), true
}

// Uint32s is Float32s for U32 tensors (MLX's packed quantized weights).
func (t *Tensor) Uint32s() (u []uint32, ok bool) {
	if t.DType != U32 || !littleEndian || len(t.Data) == 0 || uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), true
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// File is an open safetensors file.
type File struct {
	path     string
	data     []byte // the whole file
	header   []byte // the JSON header as stored
	unmap    func() error
	tensors  map[string]*Tensor
	names    []string
	metadata map[string]string
}

// Open maps (or reads) a safetensors file and validates its header. Close releases it.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s is not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %s: file is %d bytes, too short for the 8-byte header length", path, size)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("safetensors: %s: file too large for this platform", path)
	}
	data, unmap, err := mapFile(fd, int(size))
	if err != nil {
		// Mapping can fail on exotic file systems; fall back to reading the file into memory.
		data = make([]byte, size)
		if _, err := io.ReadFull(fd, data); err != nil {
			return nil, fmt.Errorf("safetensors: read %s: %w", path, err)
		}
		unmap = nil
	}
	f, err := parse(data)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f.path, f.unmap = path, unmap
	return f, nil
}

// Parse validates an in-memory safetensors image; the File aliases data.
func Parse(data []byte) (*File, error) {
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

// Path is the file's path ("" for Parse).
func (f *File) Path() string { return f.path }

// Names lists the tensor names in sorted order.
func (f *File) Names() []string { return f.names }

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Metadata is the header's optional string map (e.g. {"format": "mlx"}).
func (f *File) Metadata() map[string]string { return f.metadata }

// Header is the JSON header exactly as stored (used to fingerprint models cheaply).
func (f *File) Header() []byte { return f.header }

// Size is the file's size in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// Close unmaps the file. Tensors obtained from it must not be used afterwards.
func (f *File) Close() error {
	var err error
	if f.unmap != nil {
		err = f.unmap()
		f.unmap = nil
	}
	f.data, f.tensors = nil, nil
	return err
}

type rawTensor struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

func parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix (truncated file?)", n, len(data)-8)
	}
	header := data[8 : 8+n]
	body := data[8+n:]
	entries, err := splitHeader(header)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	f := &File{data: data, header: header, tensors: make(map[string]*Tensor, len(entries))}
	type span struct {
		begin, end int64
		name       string
	}
	var spans []span
	for _, e := range entries {
		if e.name == "__metadata__" {
			if err := json.Unmarshal(e.value, &f.metadata); err != nil {
				return nil, fmt.Errorf("header: __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var rt rawTensor
		dec := json.NewDecoder(bytes.NewReader(e.value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rt); err != nil {
			return nil, fmt.Errorf("tensor %q: bad header entry: %v", e.name, err)
		}
		if rt.DType == nil || rt.Shape == nil || rt.DataOffsets == nil {
			return nil, fmt.Errorf("tensor %q: header entry needs dtype, shape and data_offsets", e.name)
		}
		dt := DType(*rt.DType)
		if err := dt.check(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", e.name, err)
		}
		if len(*rt.Shape) > maxDims {
			return nil, fmt.Errorf("tensor %q: rank %d exceeds %d", e.name, len(*rt.Shape), maxDims)
		}
		numel := int64(1)
		shape := make([]int, len(*rt.Shape))
		for i, d := range *rt.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension %d", e.name, d)
			}
			if d > 0 && numel > math.MaxInt64/d {
				return nil, fmt.Errorf("tensor %q: shape %v overflows", e.name, *rt.Shape)
			}
			numel *= d
			shape[i] = int(d)
		}
		if numel > int64(len(body)) { // cheap bound before multiplying by the element size
			return nil, fmt.Errorf("tensor %q: shape %v needs more bytes than the file holds", e.name, *rt.Shape)
		}
		off := *rt.DataOffsets
		if len(off) != 2 {
			return nil, fmt.Errorf("tensor %q: data_offsets must be [begin, end], got %v", e.name, off)
		}
		begin, end := off[0], off[1]
		if begin < 0 || end < begin || end > int64(len(body)) {
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] out of range of the %d data bytes", e.name, begin, end, len(body))
		}
		if want := numel * int64(dt.Size()); end-begin != want {
			return nil, fmt.Errorf("tensor %q: %s%v needs %d bytes, data_offsets give %d", e.name, dt, *rt.Shape, want, end-begin)
		}
		f.tensors[e.name] = &Tensor{Name: e.name, DType: dt, Shape: shape, Data: body[begin:end:end]}
		f.names = append(f.names, e.name)
		spans = append(spans, span{begin, end, e.name})
	}
	sort.Strings(f.names)
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	for i := 1; i < len(spans); i++ {
		if spans[i].begin < spans[i-1].end {
			return nil, fmt.Errorf("tensors %q and %q overlap", spans[i-1].name, spans[i].name)
		}
	}
	return f, nil
}

type entry struct {
	name  string
	value json.RawMessage
}

// splitHeader reads the header's top-level object entry by entry so that duplicate names are an error rather
// than silently resolved (encoding/json keeps the last one).
func splitHeader(h []byte) ([]entry, error) {
	dec := json.NewDecoder(bytes.NewReader(h))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	var out []entry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("entry %q: %v", name, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("duplicate entry %q", name)
		}
		seen[name] = true
		out = append(out, entry{name, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	// Only spaces (the format's padding) may follow the object.
	if len(bytes.TrimRight(h[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, errors.New("trailing bytes after the JSON object")
	}
	return out, nil
}
