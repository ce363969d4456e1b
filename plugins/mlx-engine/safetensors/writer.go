package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Writer assembles a safetensors file. The header is padded to a multiple of 8 bytes and tensors are laid out by
// element size (largest first) and then by name, as the reference implementation does, so every tensor starts
// aligned to its element size (float32 weights can be used in place) and equal inputs give equal bytes.
type Writer struct {
	metadata map[string]string
	specs    []spec
	names    map[string]bool
}

type spec struct {
	name  string
	dtype DType
	shape []int
	size  int64
	fill  func(dst []byte) error
}

// NewWriter returns a Writer with the given header metadata (may be nil).
func NewWriter(metadata map[string]string) *Writer {
	return &Writer{metadata: metadata, names: map[string]bool{}}
}

// Add queues a tensor whose bytes are already in memory.
func (w *Writer) Add(name string, dt DType, shape []int, data []byte) error {
	return w.AddFunc(name, dt, shape, func(dst []byte) error {
		if len(data) != len(dst) {
			return fmt.Errorf("safetensors: tensor %q: %d bytes given, shape needs %d", name, len(data), len(dst))
		}
		copy(dst, data)
		return nil
	})
}

// AddFunc queues a tensor whose bytes fill writes into dst (len(dst) = elements × dtype size) when the file is
// written; at most one tensor's buffer is alive at a time.
func (w *Writer) AddFunc(name string, dt DType, shape []int, fill func(dst []byte) error) error {
	if err := dt.check(); err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	if name == "" || name == "__metadata__" || w.names[name] {
		return fmt.Errorf("safetensors: bad or duplicate tensor name %q", name)
	}
	n := int64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("safetensors: tensor %q: negative dimension in %v", name, shape)
		}
		n *= int64(d)
	}
	w.names[name] = true
	w.specs = append(w.specs, spec{name, dt, append([]int(nil), shape...), n, fill})
	return nil
}

// Size is the number of data bytes queued so far (excluding the header).
func (w *Writer) Size() int64 {
	var n int64
	for _, s := range w.specs {
		n += s.size
	}
	return n
}

// Names lists the queued tensor names in the order they will be written.
func (w *Writer) Names() []string {
	w.sort()
	out := make([]string, len(w.specs))
	for i, s := range w.specs {
		out[i] = s.name
	}
	return out
}

func (w *Writer) sort() {
	sort.Slice(w.specs, func(i, j int) bool {
		a, b := w.specs[i], w.specs[j]
		if a.dtype.Size() != b.dtype.Size() {
			return a.dtype.Size() > b.dtype.Size()
		}
		return a.name < b.name
	})
}

// WriteTo writes the whole file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	w.sort()
	var hb strings.Builder
	hb.WriteByte('{')
	if len(w.metadata) > 0 {
		m, err := json.Marshal(w.metadata) // encoding/json sorts map keys
		if err != nil {
			return 0, err
		}
		hb.WriteString(`"__metadata__":`)
		hb.Write(m)
	}
	var off int64
	for i, s := range w.specs {
		if i > 0 || len(w.metadata) > 0 {
			hb.WriteByte(',')
		}
		name, _ := json.Marshal(s.name)
		shape, _ := json.Marshal(s.shape)
		if s.shape == nil {
			shape = []byte("[]")
		}
		fmt.Fprintf(&hb, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, name, s.dtype, shape, off, off+s.size)
		off += s.size
	}
	hb.WriteByte('}')
	header := hb.String()
	if pad := (8 - len(header)%8) % 8; pad > 0 {
		header += strings.Repeat(" ", pad)
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	var n int64
	var lenbuf [8]byte
	binary.LittleEndian.PutUint64(lenbuf[:], uint64(len(header)))
	bw.Write(lenbuf[:])
	bw.WriteString(header)
	n += 8 + int64(len(header))
	var buf []byte
	for _, s := range w.specs {
		if int64(cap(buf)) < s.size {
			buf = make([]byte, s.size)
		}
		b := buf[:s.size]
		clear(b)
		if err := s.fill(b); err != nil {
			return n, fmt.Errorf("safetensors: tensor %q: %w", s.name, err)
		}
		m, err := bw.Write(b)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// WriteFile writes the file to path (through a temporary file renamed into place).
func (w *Writer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".safetensors-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := w.WriteTo(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
