package kvwire

// Error codes exo's servers send in an error message, plus 401 for the authentication extension.
const (
	CodeBadRequest   = 400 // the request could not be decoded or is invalid
	CodeUnauthorized = 401 // authentication is required, or the proof is missing, wrong, stale or replayed
	CodeInternal     = 500 // the engine failed while producing the KV
	CodeBusy         = 503 // the engine did not pick the job up in time, or the server is stopping or full
)

// MessageType is the value of the `type` key that tags every message after the header.
type MessageType string

// The message types exo defines.
const (
	TypeKVChunk     MessageType = "kv_chunk"
	TypeArraysState MessageType = "arrays_state"
	TypeDone        MessageType = "done"
	TypeError       MessageType = "error"
)

// Checksum names a per-chunk integrity check the client may ask for (extension; see doc.go).
type Checksum uint8

// The checksums this package knows.
const (
	ChecksumNone   Checksum = iota
	ChecksumCRC32C          // CRC-32C (Castagnoli) over a chunk's keys then values
)

// String returns the wire string, "" for ChecksumNone.
func (c Checksum) String() string {
	if c == ChecksumCRC32C {
		return "crc32c"
	}
	return ""
}

func parseChecksum(s string) Checksum {
	if s == "crc32c" {
		return ChecksumCRC32C
	}
	return ChecksumNone
}

// Request is the one frame a client sends. TokenIDs are absolute from position 0 (the prompt without its last
// token); StartPos is how many leading positions the client already holds, so the server sends positions
// [StartPos, len(TokenIDs)).
type Request struct {
	RequestID string
	ModelID   string
	TokenIDs  []int32
	StartPos  int

	// Checksum asks the server for a per-chunk checksum (extension). A server that does not know it ignores it.
	Checksum Checksum
	// Auth is the client's proof of the cluster secret (extension). Fetch fills it when FetchOptions.Secret is
	// set; a server fills it from the wire and verifies it before dispatching the job.
	Auth *Auth
	// Fingerprint identifies the client's model (architecture and weights) beyond its id (extension): a duet
	// server whose model has another fingerprint refuses the request, since KV from another model would be
	// garbage. Empty: not sent.
	Fingerprint string
	// KVCompat, when set, asks the server to serve KV approximately (extension): a server whose model has
	// another fingerprint but this KVCompat (the same base model at another quantization) serves it, and says
	// so by echoing its own KVCompat in the header. Empty: exact KV only.
	KVCompat string
}

// Auth is an HMAC-SHA256 proof that the sender of a request knows the cluster secret, bound to the request's
// fields, a timestamp and a nonce (see SignRequest).
type Auth struct {
	Timestamp int64  // Unix milliseconds when the request was signed
	Nonce     []byte // 16 to 64 random bytes, never reused
	MAC       []byte // HMAC-SHA256, 32 bytes
}

// Header is the first frame the server sends. A server that fails before it has anything to send still sends a
// header (NumLayers 0, DType Float32, as exo does) followed by an error message.
type Header struct {
	RequestID string
	ModelID   string
	NumLayers int
	DType     DType
	StartPos  int

	// Checksum acknowledges the checksum the request asked for (extension): when it is set, every kv_chunk
	// and arrays_state carries one and the client verifies it.
	Checksum Checksum
	// Fingerprint is the server's model fingerprint (extension), for the client to check. Empty: not sent
	// (plain exo servers never send it).
	Fingerprint string
	// KVCompat is the server's KVCompat (extension), sent when the request carried one.
	KVCompat string
}

// Message is one of *KVChunk, *ArraysState, *Done and *Error.
type Message interface {
	Type() MessageType
}

// KVChunk carries keys and values for NumTokens consecutive positions of one layer. Keys and Values are row-major
// [NumTokens, NHeads, HeadDim] arrays of DType elements. A layer may arrive in several chunks, in token order.
type KVChunk struct {
	LayerIdx  int
	NumTokens int
	NHeads    int
	HeadDim   int
	DType     DType
	Keys      []byte
	Values    []byte

	// CRC32C is the checksum of Keys then Values, present (HasCRC32C) when the header acknowledged
	// ChecksumCRC32C (extension).
	CRC32C    uint32
	HasCRC32C bool
}

// TensorBlob is one array of a recurrent (SSM) layer's state: Data holds the row-major elements of Shape.
type TensorBlob struct {
	DType DType
	Shape []int
	Data  []byte
}

// ArraysState carries the state arrays of one recurrent (SSM) layer.
type ArraysState struct {
	LayerIdx int
	Arrays   []TensorBlob

	// CRC32C is the checksum of every array's Data in order, present (HasCRC32C) when the header acknowledged
	// ChecksumCRC32C (extension).
	CRC32C    uint32
	HasCRC32C bool
}

// Done ends a successful stream.
type Done struct {
	// TotalTokens is the number of positions sent per layer: the request's tokens less its start_pos, as exo
	// counts them (not the absolute prompt length).
	TotalTokens int
}

// Error ends a failed stream. Code is one of the Code constants (or another HTTP-like status).
type Error struct {
	Code    int
	Message string
}

// Type returns TypeKVChunk.
func (*KVChunk) Type() MessageType { return TypeKVChunk }

// Type returns TypeArraysState.
func (*ArraysState) Type() MessageType { return TypeArraysState }

// Type returns TypeDone.
func (*Done) Type() MessageType { return TypeDone }

// Type returns TypeError.
func (*Error) Type() MessageType { return TypeError }

// tensorLen returns the byte size of a [tokens, heads, dim] tensor of d elements, or -1 when a dimension is
// negative or the size overflows limit.
func tensorLen(d DType, limit int, dims ...int) int {
	n := d.Size()
	if n == 0 {
		return -1
	}
	for _, x := range dims {
		if x < 0 {
			return -1
		}
		if x != 0 && n > limit/x {
			return -1
		}
		n *= x
	}
	return n
}

// Check validates a chunk's shape against its byte lengths.
func (c *KVChunk) Check() error {
	if !c.DType.Valid() {
		return protocolErrorf("kv_chunk has no valid dtype")
	}
	if c.LayerIdx < 0 {
		return protocolErrorf("kv_chunk layer_idx %d is negative", c.LayerIdx)
	}
	want := tensorLen(c.DType, maxFrameLimit, c.NumTokens, c.NHeads, c.HeadDim)
	if want < 0 {
		return protocolErrorf("kv_chunk shape [%d, %d, %d] of %s is invalid", c.NumTokens, c.NHeads, c.HeadDim, c.DType)
	}
	if len(c.Keys) != want || len(c.Values) != want {
		return protocolErrorf("kv_chunk shape [%d, %d, %d] of %s needs %d bytes of keys and of values, got %d and %d",
			c.NumTokens, c.NHeads, c.HeadDim, c.DType, want, len(c.Keys), len(c.Values))
	}
	return nil
}

// Check validates every array's shape against its byte length.
func (a *ArraysState) Check() error {
	if a.LayerIdx < 0 {
		return protocolErrorf("arrays_state layer_idx %d is negative", a.LayerIdx)
	}
	for i := range a.Arrays {
		b := &a.Arrays[i]
		if !b.DType.Valid() {
			return protocolErrorf("arrays_state array %d has no valid dtype", i)
		}
		if want := tensorLen(b.DType, maxFrameLimit, b.Shape...); want != len(b.Data) {
			return protocolErrorf("arrays_state array %d of shape %v and %s needs %d bytes, got %d",
				i, b.Shape, b.DType, want, len(b.Data))
		}
	}
	return nil
}
