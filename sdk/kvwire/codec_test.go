package kvwire_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/vmihailenco/msgpack/v5"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	many := make([]int32, 70000) // array32
	for i := range many {
		many[i] = r.Int32()
	}
	tests := map[string]kvwire.Request{
		"empty":       {TokenIDs: []int32{}},
		"typical":     {RequestID: "a", ModelID: "mlx-community/Llama-3.1-8B", TokenIDs: []int32{128000, 9906, 0, 1<<31 - 1}, StartPos: 3},
		"long ids":    {RequestID: strings.Repeat("r", 300), ModelID: strings.Repeat("m", 70000), TokenIDs: many[:20], StartPos: 20},
		"many tokens": {RequestID: "x", TokenIDs: many, StartPos: 69999},
		"extensions": {RequestID: "x", TokenIDs: []int32{5}, Checksum: kvwire.ChecksumCRC32C,
			Auth: &kvwire.Auth{Timestamp: -5, Nonce: randBytes(r, 64), MAC: randBytes(r, 32)}, Fingerprint: "fp1:0123abcd", KVCompat: "kv1:llama-00ff"},
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			body, err := kvwire.AppendRequest(nil, &req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kvwire.DecodeRequest(body)
			if err != nil || !reflect.DeepEqual(got, req) {
				t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, req)
			}
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	tests := map[string]kvwire.Header{
		"bf16":     {RequestID: "r", ModelID: "m", NumLayers: 80, DType: kvwire.BFloat16, StartPos: 1000},
		"f16":      {NumLayers: 1, DType: kvwire.Float16},
		"f32 ack":  {NumLayers: 1 << 20, DType: kvwire.Float32, Checksum: kvwire.ChecksumCRC32C, Fingerprint: "fp1:beef", KVCompat: "kv1:qwen3-01"},
		"long ids": {RequestID: strings.Repeat("é", 40), ModelID: strings.Repeat("m", 300), DType: kvwire.BFloat16},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			body, err := kvwire.AppendHeader(nil, &h)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kvwire.DecodeHeader(body)
			if err != nil || got != h {
				t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, h)
			}
		})
	}
}

func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	chunk := func(tokens, heads, dim int, dt kvwire.DType) *kvwire.KVChunk {
		n := tokens * heads * dim * dt.Size()
		return &kvwire.KVChunk{LayerIdx: r.IntN(100), NumTokens: tokens, NHeads: heads, HeadDim: dim, DType: dt,
			Keys: randBytes(r, n), Values: randBytes(r, n)}
	}
	withCRC := chunk(3, 2, 64, kvwire.Float32)
	withCRC.CRC32C, withCRC.HasCRC32C = kvwire.ChunkCRC32C(withCRC.Keys, withCRC.Values), true
	tests := map[string]kvwire.Message{
		"chunk bin8":     chunk(1, 1, 4, kvwire.BFloat16),
		"chunk bin16":    chunk(16, 2, 128, kvwire.Float16),
		"chunk bin32":    chunk(64, 8, 128, kvwire.BFloat16),
		"chunk empty":    &kvwire.KVChunk{LayerIdx: 0, NumTokens: 0, NHeads: 8, HeadDim: 128, DType: kvwire.BFloat16, Keys: []byte{}, Values: []byte{}},
		"chunk with crc": withCRC,
		"arrays empty":   &kvwire.ArraysState{LayerIdx: 7, Arrays: []kvwire.TensorBlob{}},
		"arrays": &kvwire.ArraysState{LayerIdx: 2, Arrays: []kvwire.TensorBlob{
			{DType: kvwire.Float32, Shape: []int{1, 3, 4}, Data: randBytes(r, 48)},
			{DType: kvwire.BFloat16, Shape: []int{}, Data: randBytes(r, 2)},
			{DType: kvwire.Float16, Shape: []int{0, 5}, Data: []byte{}},
		}, CRC32C: 0xffffffff, HasCRC32C: true},
		"done":       &kvwire.Done{TotalTokens: 1 << 30},
		"error":      &kvwire.Error{Code: 503, Message: "engine busy"},
		"error long": &kvwire.Error{Code: -1, Message: strings.Repeat("e", 70000)},
	}
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			body, err := kvwire.AppendMessage(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kvwire.DecodeMessage(body)
			if err != nil || !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, m)
			}
			if got.Type() != m.Type() {
				t.Fatalf("type %q, want %q", got.Type(), m.Type())
			}
		})
	}
}

// wide marshals v with vmihailenco/msgpack's defaults: Go maps in random key order, every int as a full int64.
func wide(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeLenient(t *testing.T) {
	t.Parallel()
	keys, values := bf16Keys, bf16Values
	nested := map[string]any{"a": []any{map[string]any{"b": []any{1.5, nil, true, "x", []byte{1}}}}, "c": -7}
	want := &kvwire.KVChunk{LayerIdx: 3, NumTokens: 1, NHeads: 1, HeadDim: 2, DType: kvwire.BFloat16,
		Keys: keys, Values: values}
	tests := map[string]struct {
		body []byte
		want any
	}{
		"chunk with wide ints in any order": {wide(t, map[string]any{"values": values, "keys": keys, "dtype": "bfloat16",
			"head_dim": int64(2), "n_heads": int8(1), "num_tokens": uint64(1), "layer_idx": int32(3), "type": "kv_chunk"}), want},
		"chunk with unknown keys and nested values": {wide(t, map[string]any{"type": "kv_chunk", "layer_idx": 3,
			"num_tokens": 1, "n_heads": 1, "head_dim": 2, "dtype": "bfloat16", "keys": keys, "values": values,
			"future": nested, "compression": "none"}), want},
		"type last, non-str key ignored": {hx(t, `8a 07 91 07 a9 "layer_idx" d3 00 00 00 00 00 00 00 03
			aa "num_tokens" cf 00 00 00 00 00 00 00 01  a7 "n_heads" d0 01  a8 "head_dim" d1 00 02
			a5 "dtype" a8 "bfloat16"  a4 "keys" c5 00 04 80 3f 00 40  a6 "values" c6 00 00 00 04 40 40 80 40
			a3 "xyz" c7 01 05 ff  a4 "type" d9 08 "kv_chunk"`), want},
		"arrays_state without arrays, unknown blob keys": {wide(t, map[string]any{"type": "arrays_state", "layer_idx": 4}),
			&kvwire.ArraysState{LayerIdx: 4}},
		"blob with unknown key": {wide(t, map[string]any{"type": "arrays_state", "layer_idx": 0, "arrays": []any{
			map[string]any{"data": []byte{1, 2}, "strides": nested, "shape": []int64{1}, "dtype": "float16"}}}),
			&kvwire.ArraysState{Arrays: []kvwire.TensorBlob{{DType: kvwire.Float16, Shape: []int{1}, Data: []byte{1, 2}}}}},
		"done with extra keys": {wide(t, map[string]any{"total_tokens": uint16(9), "type": "done", "stats": nested}),
			&kvwire.Done{TotalTokens: 9}},
		"error": {wide(t, map[string]any{"message": "m", "code": int16(-400), "type": "error"}),
			&kvwire.Error{Code: -400, Message: "m"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := kvwire.DecodeMessage(tc.body)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decode: %v\n got %+v\nwant %+v", err, got, tc.want)
			}
		})
	}

	req, err := kvwire.DecodeRequest(wide(t, map[string]any{"token_ids": []int64{3, 2, 1}, "start_pos": uint8(1),
		"model": "ignored", "request_id": "r", "priority": nested, "duet_checksum": "sha512"}))
	if err != nil || !reflect.DeepEqual(req, kvwire.Request{RequestID: "r", TokenIDs: []int32{3, 2, 1}, StartPos: 1}) {
		t.Fatalf("request: %+v, %v", req, err)
	}
	if req, err := kvwire.DecodeRequest(hx(t, "80")); err != nil || req.TokenIDs != nil || req.Auth != nil {
		t.Fatalf("empty request: %+v, %v", req, err)
	}
	h, err := kvwire.DecodeHeader(wide(t, map[string]any{"start_pos": 5, "num_layers": 2, "future": nested}))
	if err != nil || h != (kvwire.Header{NumLayers: 2, DType: kvwire.BFloat16, StartPos: 5}) {
		t.Fatalf("header defaults: %+v, %v", h, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	const chunkFields = `a9 "layer_idx" 00 aa "num_tokens" 01 a7 "n_heads" 01 a8 "head_dim" 01 a5 "dtype" a8 "bfloat16"`
	tests := map[string]struct {
		decode func([]byte) error
		body   string
		want   string
	}{
		"message not a map":       {msg, `92 a4 "type" a4 "done"`, "message is not a map"},
		"message without type":    {msg, `81 ac "total_tokens" 01`, `message has no "type"`},
		"type not a str":          {msg, `81 a4 "type" 01`, "message.type"},
		"unknown type":            {msg, `81 a4 "type" a8 "kv_delta"`, `unknown message type "kv_delta"`},
		"chunk without values":    {msg, `87 a4 "type" a8 "kv_chunk" ` + chunkFields + ` a4 "keys" c4 02 00 00`, `kv_chunk has no "values"`},
		"chunk keys as str":       {msg, `88 a4 "type" a8 "kv_chunk" ` + chunkFields + ` a4 "keys" a2 00 00 a6 "values" c4 02 00 00`, "expected bin, got str"},
		"chunk bytes vs shape":    {msg, `88 a4 "type" a8 "kv_chunk" ` + chunkFields + ` a4 "keys" c4 02 00 00 a6 "values" c4 04 00 00 00 00`, "needs 2 bytes of keys and of values, got 2 and 4"},
		"chunk unknown dtype":     {msg, `83 a4 "type" a8 "kv_chunk" a5 "dtype" a4 "int8" a4 "keys" c4 00`, `dtype "int8" is not`},
		"chunk negative layer":    {msg, `82 a4 "type" a8 "kv_chunk" a9 "layer_idx" ff`, "layer_idx is -1, outside"},
		"chunk huge tokens":       {msg, `82 a4 "type" a8 "kv_chunk" aa "num_tokens" ce 80 00 00 00`, "num_tokens is 2147483648, outside"},
		"chunk float tokens":      {msg, `82 a4 "type" a8 "kv_chunk" aa "num_tokens" cb 3f f0 00 00 00 00 00 00`, "expected integer, got float"},
		"chunk shape overflow":    {msg, `88 a4 "type" a8 "kv_chunk" a9 "layer_idx" 00 aa "num_tokens" ce 7f ff ff ff a7 "n_heads" ce 7f ff ff ff a8 "head_dim" ce 7f ff ff ff a5 "dtype" a8 "bfloat16" a4 "keys" c4 00 a6 "values" c4 00`, "is invalid"},
		"chunk crc too big":       {msg, `82 a4 "type" a8 "kv_chunk" ab "duet_crc32c" cf 00 00 00 01 00 00 00 00`, "outside [0, 4294967295]"},
		"duplicate key":           {msg, `83 a4 "type" a4 "done" ac "total_tokens" 01 ac "total_tokens" 02`, `has key "total_tokens" twice`},
		"duplicate type":          {msg, `83 a4 "type" a4 "done" ac "total_tokens" 01 a4 "type" a4 "done"`, `has key "type" twice`},
		"trailing bytes":          {msg, `82 a4 "type" a4 "done" ac "total_tokens" 01 c0`, "followed by 1 stray bytes"},
		"done without tokens":     {msg, `81 a4 "type" a4 "done"`, `done has no "total_tokens"`},
		"error without message":   {msg, `82 a4 "type" a5 "error" a4 "code" cd 01 f4`, `error has no "message"`},
		"blob without data":       {msg, `83 a4 "type" ac "arrays_state" a9 "layer_idx" 00 a6 "arrays" 91 82 a5 "dtype" a7 "float32" a5 "shape" 90`, "lacks dtype, shape or data"},
		"blob bytes vs shape":     {msg, `83 a4 "type" ac "arrays_state" a9 "layer_idx" 00 a6 "arrays" 91 83 a5 "dtype" a7 "float32" a5 "shape" 91 02 a4 "data" c4 04 00 00 00 00`, "needs 8 bytes, got 4"},
		"blob negative dim":       {msg, `83 a4 "type" ac "arrays_state" a9 "layer_idx" 00 a6 "arrays" 91 83 a5 "dtype" a7 "float32" a5 "shape" 91 ff a4 "data" c4 00`, "outside"},
		"arrays not an array":     {msg, `83 a4 "type" ac "arrays_state" a9 "layer_idx" 00 a6 "arrays" 80`, "expected array, got map"},
		"unknown value too deep":  {msg, `82 a4 "type" a4 "done" a1 "x" ` + strings.Repeat("91 ", kvwire.MaxNesting+1) + `01`, "nested deeper than 32"},
		"request not a map":       {req, `90`, "request is not a map"},
		"request negative token":  {req, `81 a9 "token_ids" 91 ff`, "token_ids is -1"},
		"request token too large": {req, `81 a9 "token_ids" 91 ce 80 00 00 00`, "token_ids is 2147483648"},
		"request ids not array":   {req, `81 a9 "token_ids" a1 "x"`, "expected array, got str"},
		"request negative start":  {req, `81 a9 "start_pos" ff`, "start_pos is -1"},
		"request partial auth":    {req, `81 ac "duet_auth_ts" 01`, "only some of"},
		"request id not a str":    {req, `81 aa "request_id" c4 01 41`, "expected str, got bin"},
		"header unknown dtype":    {hdr, `81 a5 "dtype" a3 "fp8"`, `dtype "fp8" is not`},
		"header unknown checksum": {hdr, `81 ad "duet_checksum" a6 "sha256"`, `unknown checksum "sha256"`},
		"header negative layers":  {hdr, `81 aa "num_layers" d0 80`, "num_layers is -128"},
		"header empty":            {hdr, ``, "header is not a map"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.decode(hx(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, kvwire.ErrProtocol) {
				t.Fatalf("%v does not match ErrProtocol", err)
			}
		})
	}
	var unknown *kvwire.UnknownTypeError
	if _, err := kvwire.DecodeMessage(hx(t, `81 a4 "type" a3 "foo"`)); !errors.As(err, &unknown) || unknown.Type != "foo" {
		t.Fatalf("unknown type: %v", err)
	}
}

func msg(b []byte) error { _, err := kvwire.DecodeMessage(b); return err }
func req(b []byte) error { _, err := kvwire.DecodeRequest(b); return err }
func hdr(b []byte) error { _, err := kvwire.DecodeHeader(b); return err }

func TestEncodeRejects(t *testing.T) {
	t.Parallel()
	tests := map[string]func() error{
		"header without dtype": func() error { _, err := kvwire.AppendHeader(nil, &kvwire.Header{}); return err },
		"negative start":       func() error { _, err := kvwire.AppendRequest(nil, &kvwire.Request{StartPos: -1}); return err },
		"chunk bytes vs shape": func() error {
			_, err := kvwire.AppendMessage(nil, &kvwire.KVChunk{NumTokens: 1, NHeads: 1, HeadDim: 1, DType: kvwire.Float32, Keys: make([]byte, 4)})
			return err
		},
		"chunk without dtype": func() error {
			_, err := kvwire.WriteKVChunk(&bytes.Buffer{}, &kvwire.KVChunk{}, nil)
			return err
		},
		"nil message": func() error { _, err := kvwire.AppendMessage(nil, nil); return err },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			if f() == nil {
				t.Fatal("accepted")
			}
		})
	}
}
