package kvwire

import (
	"math"

	"github.com/duet-ai/duet/sdk/kvwire/internal/mpack"
)

// MaxNesting bounds how deep an unknown value the decoders skip may nest: deeper values are a protocol error.
const MaxNesting = 32

// maxCount bounds every count and index field (layers, tokens, heads, positions, dimensions).
const maxCount = math.MaxInt32

// The decoders accept any key order and any integer width, ignore unknown keys whatever their values (within
// MaxNesting), and reject missing required fields, mistyped or out-of-range known fields, duplicated known keys,
// unknown dtypes and trailing bytes. They never allocate more than the frame's size justifies: str and bin
// lengths are checked against the bytes left before use, bin payloads alias the frame, and arrays are validated
// before their storage is allocated.

type decoder struct {
	r    mpack.Reader
	what string // the message being decoded, for errors
	seen uint32 // bit set of known keys already decoded
	// reserve, when set, is asked for every allocation the decoder makes outside the frame (string copies,
	// token IDs) before it is made; its error aborts the decoding.
	reserve func(bytes int) error
}

func newDecoder(body []byte, what string) decoder {
	return decoder{r: mpack.MakeReader(body, MaxNesting), what: what}
}

func (d *decoder) fail(field string, err error) error {
	return &ProtocolError{Msg: d.what + "." + field, Err: err}
}

// once marks a known key as seen and fails on a duplicate.
func (d *decoder) once(bit uint, field string) error {
	if d.seen&(1<<bit) != 0 {
		return protocolErrorf("%s has key %q twice", d.what, field)
	}
	d.seen |= 1 << bit
	return nil
}

func (d *decoder) has(bit uint) bool { return d.seen&(1<<bit) != 0 }

// fields calls field for each of n string keys of the top-level map (entries whose key is not a string are
// skipped by key); field decodes or skips the value.
func (d *decoder) fields(n int, field func(k []byte) error) error {
	for range n {
		k, ok, err := d.key()
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := field(k); err != nil {
			return err
		}
	}
	return nil
}

// mapHeader reads the top-level map.
func (d *decoder) mapHeader() (int, error) {
	n, err := d.r.ReadMapHeader()
	if err != nil {
		return 0, &ProtocolError{Msg: d.what + " is not a map", Err: err}
	}
	return n, nil
}

// key reads a map key. ok is false for a key that is not a str: key has then skipped it and its value.
func (d *decoder) key() (k []byte, ok bool, err error) {
	kind, err := d.r.Peek()
	if err != nil {
		return nil, false, d.fail("<key>", err)
	}
	if kind != mpack.KindStr { // an unknown key of another kind: skip it and its value
		if err := d.r.Skip(); err != nil {
			return nil, false, d.fail("<key>", err)
		}
		if err := d.r.Skip(); err != nil {
			return nil, false, d.fail("<value>", err)
		}
		return nil, false, nil
	}
	k, err = d.r.ReadStr()
	if err != nil {
		return nil, false, d.fail("<key>", err)
	}
	return k, true, nil
}

func (d *decoder) skip(k []byte) error {
	if err := d.r.Skip(); err != nil {
		return d.fail(string(k), err)
	}
	return nil
}

func (d *decoder) str(field string) (string, error) {
	b, err := d.r.ReadStr()
	if err != nil {
		return "", d.fail(field, err)
	}
	if d.reserve != nil && len(b) > 0 {
		if err := d.reserve(len(b)); err != nil {
			return "", err
		}
	}
	return string(b), nil
}

func (d *decoder) bin(field string) ([]byte, error) {
	b, err := d.r.ReadBin()
	if err != nil {
		return nil, d.fail(field, err)
	}
	return b, nil
}

func (d *decoder) intIn(field string, lo, hi int64) (int64, error) {
	v, err := d.r.ReadInt()
	if err != nil {
		return 0, d.fail(field, err)
	}
	if v < lo || v > hi {
		return 0, protocolErrorf("%s.%s is %d, outside [%d, %d]", d.what, field, v, lo, hi)
	}
	return v, nil
}

func (d *decoder) count(field string) (int, error) {
	v, err := d.intIn(field, 0, maxCount)
	return int(v), err
}

func (d *decoder) dtype(field string) (DType, error) {
	s, err := d.r.ReadStr()
	if err != nil {
		return 0, d.fail(field, err)
	}
	dt := parseDType(string(s))
	if dt == 0 {
		return 0, protocolErrorf("%s.%s %q is not bfloat16, float16 or float32", d.what, field, clip(s))
	}
	return dt, nil
}

func (d *decoder) end() error {
	if n := d.r.Len(); n != 0 {
		return protocolErrorf("%s is followed by %d stray bytes in its frame", d.what, n)
	}
	return nil
}

func (d *decoder) require(fields ...string) error {
	for i, f := range fields {
		if f != "" && !d.has(uint(i)) {
			return protocolErrorf("%s has no %q", d.what, f)
		}
	}
	return nil
}

// clip shortens peer-supplied text quoted in errors.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// DecodeRequest decodes a request body (a frame without its length prefix). Every exo field is optional, as in
// exo's msgspec struct; token IDs must be in [0, 2^31). An unknown duet_checksum is ignored; auth fields are
// decoded but not verified (Server does that).
func DecodeRequest(body []byte) (Request, error) {
	return decodeRequest(body, nil)
}

// decodeRequest is DecodeRequest with reserve asked before every allocation (see decoder.reserve).
func decodeRequest(body []byte, reserve func(int) error) (Request, error) {
	var req Request
	d := newDecoder(body, "request")
	d.reserve = reserve
	n, err := d.mapHeader()
	if err != nil {
		return req, err
	}
	var auth Auth
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyRequestID:
			if err = d.once(0, keyRequestID); err == nil {
				req.RequestID, err = d.str(keyRequestID)
			}
		case keyModelID:
			if err = d.once(1, keyModelID); err == nil {
				req.ModelID, err = d.str(keyModelID)
			}
		case keyTokenIDs:
			if err = d.once(2, keyTokenIDs); err == nil {
				req.TokenIDs, err = d.tokenIDs()
			}
		case keyStartPos:
			if err = d.once(3, keyStartPos); err == nil {
				req.StartPos, err = d.count(keyStartPos)
			}
		case keyChecksum:
			if err = d.once(4, keyChecksum); err == nil {
				var s string
				s, err = d.str(keyChecksum)
				req.Checksum = parseChecksum(s)
			}
		case keyAuthTS:
			if err = d.once(5, keyAuthTS); err == nil {
				auth.Timestamp, err = d.intIn(keyAuthTS, math.MinInt64, math.MaxInt64)
			}
		case keyAuthNonce:
			if err = d.once(6, keyAuthNonce); err == nil {
				auth.Nonce, err = d.bin(keyAuthNonce)
			}
		case keyAuthMAC:
			if err = d.once(7, keyAuthMAC); err == nil {
				auth.MAC, err = d.bin(keyAuthMAC)
			}
		case keyFingerprint:
			if err = d.once(8, keyFingerprint); err == nil {
				req.Fingerprint, err = d.str(keyFingerprint)
			}
		case keyKVCompat:
			if err = d.once(9, keyKVCompat); err == nil {
				req.KVCompat, err = d.str(keyKVCompat)
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return req, err
	}
	if err := d.end(); err != nil {
		return req, err
	}
	if d.has(5) || d.has(6) || d.has(7) {
		if !(d.has(5) && d.has(6) && d.has(7)) {
			return req, protocolErrorf("request has only some of %s, %s and %s", keyAuthTS, keyAuthNonce, keyAuthMAC)
		}
		// Copy the proof out of the frame so the Request owns all its memory.
		auth.Nonce = append([]byte(nil), auth.Nonce...)
		auth.MAC = append([]byte(nil), auth.MAC...)
		req.Auth = &auth
	}
	return req, nil
}

// tokenIDs validates the whole array before allocating it, so a malformed array costs no allocation.
func (d *decoder) tokenIDs() ([]int32, error) {
	n, err := d.r.ReadArrayHeader()
	if err != nil {
		return nil, d.fail(keyTokenIDs, err)
	}
	first := d.r
	for range n {
		if _, err := d.intIn(keyTokenIDs, 0, math.MaxInt32); err != nil {
			return nil, err
		}
	}
	if d.reserve != nil {
		if err := d.reserve(4 * n); err != nil {
			return nil, err
		}
	}
	ids := make([]int32, n)
	for i := range ids {
		v, _ := first.ReadInt()
		ids[i] = int32(v)
	}
	return ids, nil
}

// DecodeHeader decodes a header body. Every field is optional, with exo's defaults (dtype bfloat16). A header
// acknowledging a checksum this package does not know is an error, since the chunks could not be verified.
func DecodeHeader(body []byte) (Header, error) {
	h := Header{DType: BFloat16}
	d := newDecoder(body, "header")
	n, err := d.mapHeader()
	if err != nil {
		return h, err
	}
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyRequestID:
			if err = d.once(0, keyRequestID); err == nil {
				h.RequestID, err = d.str(keyRequestID)
			}
		case keyModelID:
			if err = d.once(1, keyModelID); err == nil {
				h.ModelID, err = d.str(keyModelID)
			}
		case keyNumLayers:
			if err = d.once(2, keyNumLayers); err == nil {
				h.NumLayers, err = d.count(keyNumLayers)
			}
		case keyDType:
			if err = d.once(3, keyDType); err == nil {
				h.DType, err = d.dtype(keyDType)
			}
		case keyStartPos:
			if err = d.once(4, keyStartPos); err == nil {
				h.StartPos, err = d.count(keyStartPos)
			}
		case keyChecksum:
			if err = d.once(5, keyChecksum); err == nil {
				var s []byte
				if s, err = d.r.ReadStr(); err != nil {
					err = d.fail(keyChecksum, err)
				} else if h.Checksum = parseChecksum(string(s)); h.Checksum == ChecksumNone {
					err = protocolErrorf("header acknowledges unknown checksum %q", clip(s))
				}
			}
		case keyFingerprint:
			if err = d.once(6, keyFingerprint); err == nil {
				h.Fingerprint, err = d.str(keyFingerprint)
			}
		case keyKVCompat:
			if err = d.once(7, keyKVCompat); err == nil {
				h.KVCompat, err = d.str(keyKVCompat)
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return h, err
	}
	return h, d.end()
}

// messageType finds the `type` of a message body wherever its key is, without decoding anything else.
// found is false when the body is a map without a str-keyed "type".
func messageType(body []byte) (typ []byte, found bool, err error) {
	d := newDecoder(body, "message")
	n, err := d.mapHeader()
	if err != nil {
		return nil, false, err
	}
	for range n {
		k, ok, err := d.key()
		if err != nil {
			return nil, false, err
		}
		if ok && string(k) == keyType {
			t, err := d.r.ReadStr()
			if err != nil {
				return nil, false, d.fail(keyType, err)
			}
			return t, true, nil
		}
		if err := d.skip(k); err != nil {
			return nil, false, err
		}
	}
	return nil, false, nil
}

// DecodeMessage decodes the body of a message that follows the header. A chunk's Keys and Values, and an
// arrays_state's Data, alias body: they are valid as long as body is. An unknown `type` is an
// *UnknownTypeError; shape and byte lengths that disagree are a *ProtocolError.
func DecodeMessage(body []byte) (Message, error) {
	typ, found, err := messageType(body)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, protocolErrorf("message has no %q", keyType)
	}
	switch MessageType(typ) {
	case TypeKVChunk:
		c := new(KVChunk)
		return c, decodeKVChunk(body, c)
	case TypeArraysState:
		a := new(ArraysState)
		return a, decodeArraysState(body, a)
	case TypeDone:
		m := new(Done)
		return m, decodeDone(body, m)
	case TypeError:
		m := new(Error)
		return m, decodeError(body, m)
	}
	return nil, &UnknownTypeError{Type: clip(typ)}
}

// decodeKVChunk decodes a kv_chunk body into c, which the client reuses from chunk to chunk.
func decodeKVChunk(body []byte, c *KVChunk) error {
	*c = KVChunk{}
	d := newDecoder(body, string(TypeKVChunk))
	n, err := d.mapHeader()
	if err != nil {
		return err
	}
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyType:
			err = d.once(0, keyType)
			if err == nil {
				err = d.skip(k) // its value was read by messageType
			}
		case keyLayerIdx:
			if err = d.once(1, keyLayerIdx); err == nil {
				c.LayerIdx, err = d.count(keyLayerIdx)
			}
		case keyNumTokens:
			if err = d.once(2, keyNumTokens); err == nil {
				c.NumTokens, err = d.count(keyNumTokens)
			}
		case keyNHeads:
			if err = d.once(3, keyNHeads); err == nil {
				c.NHeads, err = d.count(keyNHeads)
			}
		case keyHeadDim:
			if err = d.once(4, keyHeadDim); err == nil {
				c.HeadDim, err = d.count(keyHeadDim)
			}
		case keyDType:
			if err = d.once(5, keyDType); err == nil {
				c.DType, err = d.dtype(keyDType)
			}
		case keyKeys:
			if err = d.once(6, keyKeys); err == nil {
				c.Keys, err = d.bin(keyKeys)
			}
		case keyValues:
			if err = d.once(7, keyValues); err == nil {
				c.Values, err = d.bin(keyValues)
			}
		case keyCRC32C:
			if err = d.once(8, keyCRC32C); err == nil {
				var v int64
				v, err = d.intIn(keyCRC32C, 0, math.MaxUint32)
				c.CRC32C, c.HasCRC32C = uint32(v), err == nil
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	if err := d.require(keyType, keyLayerIdx, keyNumTokens, keyNHeads, keyHeadDim, keyDType, keyKeys, keyValues); err != nil {
		return err
	}
	return c.Check()
}

func decodeArraysState(body []byte, a *ArraysState) error {
	d := newDecoder(body, string(TypeArraysState))
	n, err := d.mapHeader()
	if err != nil {
		return err
	}
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyType:
			if err = d.once(0, keyType); err == nil {
				err = d.skip(k)
			}
		case keyLayerIdx:
			if err = d.once(1, keyLayerIdx); err == nil {
				a.LayerIdx, err = d.count(keyLayerIdx)
			}
		case keyArrays:
			if err = d.once(2, keyArrays); err == nil {
				a.Arrays, err = d.blobs()
			}
		case keyCRC32C:
			if err = d.once(3, keyCRC32C); err == nil {
				var v int64
				v, err = d.intIn(keyCRC32C, 0, math.MaxUint32)
				a.CRC32C, a.HasCRC32C = uint32(v), err == nil
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	if err := d.require(keyType, keyLayerIdx); err != nil { // arrays defaults to [] as in exo
		return err
	}
	return a.Check()
}

// blobs decodes the arrays of an arrays_state in two passes: the first validates every element and counts them
// and their dimensions, the second fills storage allocated once at the exact size.
func (d *decoder) blobs() ([]TensorBlob, error) {
	first := *d
	nb, nd, err := first.blobPass(nil, nil)
	if err != nil {
		return nil, err
	}
	blobs := make([]TensorBlob, nb)
	dims := make([]int, nd)
	_, _, err = d.blobPass(blobs, dims)
	return blobs, err
}

// blobPass reads the arrays value. With nil blobs it only validates and counts.
func (d *decoder) blobPass(blobs []TensorBlob, dims []int) (nb, nd int, err error) {
	n, err := d.r.ReadArrayHeader()
	if err != nil {
		return 0, 0, d.fail(keyArrays, err)
	}
	for i := range n {
		m, err := d.r.ReadMapHeader()
		if err != nil {
			return 0, 0, d.fail(keyArrays, err)
		}
		var t TensorBlob
		var seen uint8
		for range m {
			k, ok, err := d.key()
			if err != nil {
				return 0, 0, err
			}
			if !ok {
				continue
			}
			bit := uint8(0)
			switch string(k) {
			case keyDType:
				bit = 1
			case keyShape:
				bit = 2
			case keyData:
				bit = 4
			default:
				if err := d.skip(k); err != nil {
					return 0, 0, err
				}
				continue
			}
			if seen&bit != 0 {
				return 0, 0, protocolErrorf("arrays_state array %d has key %q twice", i, k)
			}
			seen |= bit
			switch bit {
			case 1:
				t.DType, err = d.dtype("arrays.dtype")
			case 2:
				var rank int
				rank, err = d.r.ReadArrayHeader()
				if err != nil {
					return 0, 0, d.fail("arrays.shape", err)
				}
				var shape []int
				if blobs != nil {
					shape = dims[nd : nd+rank : nd+rank]
				}
				for j := range rank {
					v, err := d.count("arrays.shape")
					if err != nil {
						return 0, 0, err
					}
					if shape != nil {
						shape[j] = v
					}
				}
				t.Shape = shape
				nd += rank
			case 4:
				t.Data, err = d.bin("arrays.data")
			}
			if err != nil {
				return 0, 0, err
			}
		}
		if seen != 7 {
			return 0, 0, protocolErrorf("arrays_state array %d lacks dtype, shape or data", i)
		}
		if blobs != nil {
			blobs[i] = t
		}
		nb++
	}
	return nb, nd, nil
}

func decodeDone(body []byte, m *Done) error {
	d := newDecoder(body, string(TypeDone))
	n, err := d.mapHeader()
	if err != nil {
		return err
	}
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyType:
			if err = d.once(0, keyType); err == nil {
				err = d.skip(k)
			}
		case keyTotalTokens:
			if err = d.once(1, keyTotalTokens); err == nil {
				m.TotalTokens, err = d.count(keyTotalTokens)
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	return d.require(keyType, keyTotalTokens)
}

func decodeError(body []byte, m *Error) error {
	d := newDecoder(body, string(TypeError))
	n, err := d.mapHeader()
	if err != nil {
		return err
	}
	if err := d.fields(n, func(k []byte) (err error) {
		switch string(k) {
		case keyType:
			if err = d.once(0, keyType); err == nil {
				err = d.skip(k)
			}
		case keyCode:
			if err = d.once(1, keyCode); err == nil {
				var v int64
				v, err = d.intIn(keyCode, math.MinInt32, math.MaxInt32)
				m.Code = int(v)
			}
		case keyMessage:
			if err = d.once(2, keyMessage); err == nil {
				m.Message, err = d.str(keyMessage)
			}
		default:
			err = d.skip(k)
		}
		return err
	}); err != nil {
		return err
	}
	if err := d.end(); err != nil {
		return err
	}
	return d.require(keyType, keyCode, keyMessage)
}
