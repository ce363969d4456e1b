package kvwire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net"

	"github.com/duet-ai/duet/sdk/kvwire/internal/mpack"
)

// Map keys. exo's fields come first, in exo's order (msgspec encodes struct fields in declaration order, the tag
// first); extension keys follow and are only written when negotiated, so plain frames are byte-identical to
// exo's.
const (
	keyType        = "type"
	keyRequestID   = "request_id"
	keyModelID     = "model_id"
	keyTokenIDs    = "token_ids"
	keyStartPos    = "start_pos"
	keyNumLayers   = "num_layers"
	keyDType       = "dtype"
	keyLayerIdx    = "layer_idx"
	keyNumTokens   = "num_tokens"
	keyNHeads      = "n_heads"
	keyHeadDim     = "head_dim"
	keyKeys        = "keys"
	keyValues      = "values"
	keyArrays      = "arrays"
	keyShape       = "shape"
	keyData        = "data"
	keyTotalTokens = "total_tokens"
	keyCode        = "code"
	keyMessage     = "message"

	// Extensions (see doc.go).
	keyChecksum    = "duet_checksum"    // request: checksum asked for; header: checksum granted
	keyAuthTS      = "duet_auth_ts"     // request: Unix milliseconds
	keyAuthNonce   = "duet_auth_nonce"  // request: bin
	keyAuthMAC     = "duet_auth_mac"    // request: bin, HMAC-SHA256
	keyCRC32C      = "duet_crc32c"      // kv_chunk, arrays_state: uint32
	keyFingerprint = "duet_fingerprint" // request, header: the model's fingerprint
	keyKVCompat    = "duet_kv_compat"   // request: approximate KV accepted for this; header: the server's
)

// maxFrameLimit is the largest body a 4-byte length prefix can describe.
const maxFrameLimit = math.MaxUint32

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checkLen(what string, n int) error {
	if n > maxFrameLimit {
		return fmt.Errorf("kvwire: %s of %d bytes does not fit in a frame", what, n)
	}
	return nil
}

// AppendRequest appends the MessagePack body of r to b.
func AppendRequest(b []byte, r *Request) ([]byte, error) {
	if err := checkLen("request_id", len(r.RequestID)); err != nil {
		return b, err
	}
	if err := checkLen("model_id", len(r.ModelID)); err != nil {
		return b, err
	}
	if err := checkLen("token_ids", len(r.TokenIDs)); err != nil {
		return b, err
	}
	if err := checkLen(keyFingerprint, len(r.Fingerprint)); err != nil {
		return b, err
	}
	if err := checkLen(keyKVCompat, len(r.KVCompat)); err != nil {
		return b, err
	}
	if r.StartPos < 0 {
		return b, fmt.Errorf("kvwire: start_pos %d is negative", r.StartPos)
	}
	n := 4
	if r.Checksum != ChecksumNone {
		n++
	}
	if r.Auth != nil {
		n += 3
	}
	if r.Fingerprint != "" {
		n++
	}
	if r.KVCompat != "" {
		n++
	}
	b = mpack.AppendMapHeader(b, n)
	b = mpack.AppendStr(mpack.AppendStr(b, keyRequestID), r.RequestID)
	b = mpack.AppendStr(mpack.AppendStr(b, keyModelID), r.ModelID)
	b = mpack.AppendArrayHeader(mpack.AppendStr(b, keyTokenIDs), len(r.TokenIDs))
	for _, t := range r.TokenIDs {
		b = mpack.AppendInt(b, int64(t))
	}
	b = mpack.AppendInt(mpack.AppendStr(b, keyStartPos), int64(r.StartPos))
	if r.Checksum != ChecksumNone {
		b = mpack.AppendStr(mpack.AppendStr(b, keyChecksum), r.Checksum.String())
	}
	if a := r.Auth; a != nil {
		b = mpack.AppendInt(mpack.AppendStr(b, keyAuthTS), a.Timestamp)
		b = mpack.AppendBin(mpack.AppendStr(b, keyAuthNonce), a.Nonce)
		b = mpack.AppendBin(mpack.AppendStr(b, keyAuthMAC), a.MAC)
	}
	if r.Fingerprint != "" {
		b = mpack.AppendStr(mpack.AppendStr(b, keyFingerprint), r.Fingerprint)
	}
	if r.KVCompat != "" {
		b = mpack.AppendStr(mpack.AppendStr(b, keyKVCompat), r.KVCompat)
	}
	return b, nil
}

// AppendHeader appends the MessagePack body of h to b.
func AppendHeader(b []byte, h *Header) ([]byte, error) {
	if !h.DType.Valid() {
		return b, fmt.Errorf("kvwire: header dtype is not set")
	}
	if h.NumLayers < 0 || h.StartPos < 0 {
		return b, fmt.Errorf("kvwire: header num_layers %d or start_pos %d is negative", h.NumLayers, h.StartPos)
	}
	if err := checkLen("request_id", len(h.RequestID)); err != nil {
		return b, err
	}
	if err := checkLen("model_id", len(h.ModelID)); err != nil {
		return b, err
	}
	n := 5
	if h.Checksum != ChecksumNone {
		n++
	}
	if h.Fingerprint != "" {
		n++
	}
	if h.KVCompat != "" {
		n++
	}
	b = mpack.AppendMapHeader(b, n)
	b = mpack.AppendStr(mpack.AppendStr(b, keyRequestID), h.RequestID)
	b = mpack.AppendStr(mpack.AppendStr(b, keyModelID), h.ModelID)
	b = mpack.AppendInt(mpack.AppendStr(b, keyNumLayers), int64(h.NumLayers))
	b = mpack.AppendStr(mpack.AppendStr(b, keyDType), h.DType.String())
	b = mpack.AppendInt(mpack.AppendStr(b, keyStartPos), int64(h.StartPos))
	if h.Checksum != ChecksumNone {
		b = mpack.AppendStr(mpack.AppendStr(b, keyChecksum), h.Checksum.String())
	}
	if h.Fingerprint != "" {
		b = mpack.AppendStr(mpack.AppendStr(b, keyFingerprint), h.Fingerprint)
	}
	if h.KVCompat != "" {
		b = mpack.AppendStr(mpack.AppendStr(b, keyKVCompat), h.KVCompat)
	}
	return b, nil
}

// AppendMessage appends the MessagePack body of m to b, copying a chunk's tensors. Servers stream chunks with
// WriteKVChunk instead, which does not copy them.
func AppendMessage(b []byte, m Message) ([]byte, error) {
	switch m := m.(type) {
	case *KVChunk:
		parts, keysAt, valuesAt, err := appendChunkParts(nil, m)
		if err != nil {
			return b, err
		}
		b = append(b, parts[4:keysAt]...) // without the length prefix
		b = append(b, m.Keys...)
		b = append(b, parts[keysAt:valuesAt]...)
		b = append(b, m.Values...)
		return append(b, parts[valuesAt:]...), nil
	case *ArraysState:
		return appendArraysState(b, m)
	case *Done:
		b = mpack.AppendMapHeader(b, 2)
		b = mpack.AppendStr(mpack.AppendStr(b, keyType), string(TypeDone))
		return mpack.AppendInt(mpack.AppendStr(b, keyTotalTokens), int64(m.TotalTokens)), nil
	case *Error:
		if err := checkLen("message", len(m.Message)); err != nil {
			return b, err
		}
		b = mpack.AppendMapHeader(b, 3)
		b = mpack.AppendStr(mpack.AppendStr(b, keyType), string(TypeError))
		b = mpack.AppendInt(mpack.AppendStr(b, keyCode), int64(m.Code))
		return mpack.AppendStr(mpack.AppendStr(b, keyMessage), m.Message), nil
	case nil:
		return b, fmt.Errorf("kvwire: nil message")
	}
	return b, fmt.Errorf("kvwire: cannot encode message of type %T", m)
}

func appendArraysState(b []byte, a *ArraysState) ([]byte, error) {
	if err := a.Check(); err != nil {
		return b, err
	}
	n := 3
	if a.HasCRC32C {
		n++
	}
	b = mpack.AppendMapHeader(b, n)
	b = mpack.AppendStr(mpack.AppendStr(b, keyType), string(TypeArraysState))
	b = mpack.AppendInt(mpack.AppendStr(b, keyLayerIdx), int64(a.LayerIdx))
	b = mpack.AppendArrayHeader(mpack.AppendStr(b, keyArrays), len(a.Arrays))
	for i := range a.Arrays {
		t := &a.Arrays[i]
		b = mpack.AppendMapHeader(b, 3)
		b = mpack.AppendStr(mpack.AppendStr(b, keyDType), t.DType.String())
		b = mpack.AppendArrayHeader(mpack.AppendStr(b, keyShape), len(t.Shape))
		for _, d := range t.Shape {
			b = mpack.AppendInt(b, int64(d))
		}
		b = mpack.AppendBin(mpack.AppendStr(b, keyData), t.Data)
	}
	if a.HasCRC32C {
		b = mpack.AppendUint(mpack.AppendStr(b, keyCRC32C), uint64(a.CRC32C))
	}
	return b, nil
}

// appendChunkParts appends to b everything of c's frame except the tensor bytes: from start = len(b) on, the
// 4-byte length prefix through the header of the keys bin, up to keysAt; then the values key and bin header, up
// to valuesAt; then whatever follows the values (the checksum extension, or nothing). The frame is
// b[start:keysAt], c.Keys, b[keysAt:valuesAt], c.Values, b[valuesAt:].
func appendChunkParts(b []byte, c *KVChunk) (out []byte, keysAt, valuesAt int, err error) {
	if err := c.Check(); err != nil {
		return b, 0, 0, err
	}
	n := 8
	if c.HasCRC32C {
		n++
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = mpack.AppendMapHeader(b, n)
	b = mpack.AppendStr(mpack.AppendStr(b, keyType), string(TypeKVChunk))
	b = mpack.AppendInt(mpack.AppendStr(b, keyLayerIdx), int64(c.LayerIdx))
	b = mpack.AppendInt(mpack.AppendStr(b, keyNumTokens), int64(c.NumTokens))
	b = mpack.AppendInt(mpack.AppendStr(b, keyNHeads), int64(c.NHeads))
	b = mpack.AppendInt(mpack.AppendStr(b, keyHeadDim), int64(c.HeadDim))
	b = mpack.AppendStr(mpack.AppendStr(b, keyDType), c.DType.String())
	b = mpack.AppendBinHeader(mpack.AppendStr(b, keyKeys), len(c.Keys))
	h := len(b)
	b = mpack.AppendBinHeader(mpack.AppendStr(b, keyValues), len(c.Values))
	m := len(b)
	if c.HasCRC32C {
		b = mpack.AppendUint(mpack.AppendStr(b, keyCRC32C), uint64(c.CRC32C))
	}
	size := len(b) - start - 4 + len(c.Keys) + len(c.Values)
	if err := checkLen("kv_chunk frame", size); err != nil {
		return b[:start], 0, 0, err
	}
	binary.BigEndian.PutUint32(b[start:], uint32(size))
	return b, h, m, nil
}

// ChunkCRC32C is the checksum extension's value for keys and values.
func ChunkCRC32C(keys, values []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, keys), castagnoli, values)
}

func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// WriteKVChunk writes c as one frame without copying its tensors: the map and bin headers are built in scratch
// (which may be nil; pass the returned slice back to reuse it) and the keys and values go from c's buffers to w,
// with one writev when w is a *net.TCPConn.
func WriteKVChunk(w io.Writer, c *KVChunk, scratch []byte) ([]byte, error) {
	b, keysAt, valuesAt, err := appendChunkParts(scratch[:0], c)
	if err != nil {
		return b[:0], err
	}
	bufs := net.Buffers{b[:keysAt], c.Keys, b[keysAt:valuesAt], c.Values, b[valuesAt:]}
	_, err = bufs.WriteTo(w)
	return b[:0], err
}

// WriteFrame writes the 4-byte big-endian length of body, then body.
func WriteFrame(w io.Writer, body []byte) error {
	if err := checkLen("frame", len(body)); err != nil {
		return err
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(len(body)))
	bufs := net.Buffers{prefix[:], body}
	_, err := bufs.WriteTo(w)
	return err
}

// appendFrame appends a frame holding the body that encode appends.
func appendFrame(b []byte, encode func([]byte) ([]byte, error)) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := encode(b)
	if err != nil {
		return b[:start], err
	}
	size := len(b) - start - 4
	if err := checkLen("frame", size); err != nil {
		return b[:start], err
	}
	binary.BigEndian.PutUint32(b[start:], uint32(size))
	return b, nil
}
