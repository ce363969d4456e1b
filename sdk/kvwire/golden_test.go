package kvwire_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"reflect"
	"testing"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/duet-ai/duet/sdk/kvwire/kvwiretest"
)

var bf16Keys = []byte{0x80, 0x3f, 0x00, 0x40}   // 1.0, 2.0
var bf16Values = []byte{0x40, 0x40, 0x80, 0x40} // 3.0, 4.0
var f32Data = []byte{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0}

var goldenRequest = kvwire.Request{RequestID: "req-1", ModelID: "llama", TokenIDs: []int32{1, 200, 300, 70000}, StartPos: 2}

var goldenRequestExt = kvwire.Request{RequestID: "req-1", ModelID: "llama", TokenIDs: []int32{1, 200, 300, 70000},
	StartPos: 2, Checksum: kvwire.ChecksumCRC32C, Auth: &kvwire.Auth{
		Timestamp: 1700000000000,
		Nonce:     []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		MAC: []byte{0xf1, 0x27, 0xa4, 0x68, 0xa2, 0x31, 0xf6, 0x81, 0x6f, 0x83, 0xdf, 0xe6, 0xb4, 0x4e, 0x85, 0x3a,
			0xf8, 0xdb, 0x48, 0xa9, 0x1a, 0x01, 0x11, 0xcf, 0xdd, 0xd6, 0x6f, 0xe8, 0xff, 0x2d, 0x45, 0xb5},
	}}

var goldenHeader = kvwire.Header{RequestID: "req-1", ModelID: "llama", NumLayers: 32, DType: kvwire.BFloat16, StartPos: 2}

// goldenMessages are the messages after the header; plain ones are exo frames.
var goldenMessages = []struct {
	file  string
	msg   kvwire.Message
	plain bool
}{
	{"kv_chunk.hex", &kvwire.KVChunk{LayerIdx: 3, NumTokens: 1, NHeads: 1, HeadDim: 2, DType: kvwire.BFloat16,
		Keys: bf16Keys, Values: bf16Values}, true},
	{"kv_chunk_crc.hex", &kvwire.KVChunk{LayerIdx: 3, NumTokens: 1, NHeads: 1, HeadDim: 2, DType: kvwire.BFloat16,
		Keys: bf16Keys, Values: bf16Values, CRC32C: 0xabcb42fa, HasCRC32C: true}, false},
	{"arrays_state.hex", &kvwire.ArraysState{LayerIdx: 1, Arrays: []kvwire.TensorBlob{
		{DType: kvwire.Float32, Shape: []int{2}, Data: f32Data}}}, true},
	{"arrays_state_crc.hex", &kvwire.ArraysState{LayerIdx: 1, Arrays: []kvwire.TensorBlob{
		{DType: kvwire.Float32, Shape: []int{2}, Data: f32Data}}, CRC32C: 0xaa36f2c9, HasCRC32C: true}, false},
	{"done.hex", &kvwire.Done{TotalTokens: 4096}, true},
	{"error.hex", &kvwire.Error{Code: 503, Message: "busy"}, true},
}

var goldenHeaders = []struct {
	file   string
	header kvwire.Header
	plain  bool
}{
	{"header.hex", goldenHeader, true},
	{"header_error.hex", kvwire.Header{DType: kvwire.Float32}, true},
	{"header_ext.hex", func() kvwire.Header { h := goldenHeader; h.Checksum = kvwire.ChecksumCRC32C; return h }(), false},
}

var goldenRequests = []struct {
	file  string
	req   kvwire.Request
	plain bool
}{
	{"request.hex", goldenRequest, true},
	{"request_ext.hex", goldenRequestExt, false},
}

func TestGoldenRequests(t *testing.T) {
	t.Parallel()
	for _, g := range goldenRequests {
		t.Run(g.file, func(t *testing.T) {
			want := bodyOf(t, readHex(t, g.file))
			got, err := kvwire.AppendRequest(nil, &g.req)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encode: %v\n got % x\nwant % x", err, got, want)
			}
			dec, err := kvwire.DecodeRequest(want)
			if err != nil || !reflect.DeepEqual(dec, g.req) {
				t.Fatalf("decode: %v\n got %+v\nwant %+v", err, dec, g.req)
			}
			if g.plain {
				exo, err := kvwiretest.EncodeRequest(g.req)
				if err != nil || !bytes.Equal(bodyOf(t, exo), want) {
					t.Fatalf("kvwiretest encoder: %v\n got % x\nwant % x", err, exo, want)
				}
			}
		})
	}
}

func TestGoldenHeaders(t *testing.T) {
	t.Parallel()
	for _, g := range goldenHeaders {
		t.Run(g.file, func(t *testing.T) {
			want := bodyOf(t, readHex(t, g.file))
			got, err := kvwire.AppendHeader(nil, &g.header)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encode: %v\n got % x\nwant % x", err, got, want)
			}
			dec, err := kvwire.DecodeHeader(want)
			if err != nil || dec != g.header {
				t.Fatalf("decode: %v\n got %+v\nwant %+v", err, dec, g.header)
			}
			if g.plain {
				exo, err := kvwiretest.EncodeHeader(g.header)
				if err != nil || !bytes.Equal(bodyOf(t, exo), want) {
					t.Fatalf("kvwiretest encoder: %v\n got % x\nwant % x", err, exo, want)
				}
			}
		})
	}
}

func TestGoldenMessages(t *testing.T) {
	t.Parallel()
	for _, g := range goldenMessages {
		t.Run(g.file, func(t *testing.T) {
			want := bodyOf(t, readHex(t, g.file))
			got, err := kvwire.AppendMessage(nil, g.msg)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encode: %v\n got % x\nwant % x", err, got, want)
			}
			dec, err := kvwire.DecodeMessage(want)
			if err != nil || !reflect.DeepEqual(dec, g.msg) {
				t.Fatalf("decode: %v\n got %+v\nwant %+v", err, dec, g.msg)
			}
			if c, ok := g.msg.(*kvwire.KVChunk); ok {
				var buf bytes.Buffer
				if _, err := kvwire.WriteKVChunk(&buf, c, nil); err != nil || !bytes.Equal(bodyOf(t, buf.Bytes()), want) {
					t.Fatalf("WriteKVChunk: %v\n got % x\nwant % x", err, buf.Bytes(), want)
				}
				if c.HasCRC32C && kvwire.ChunkCRC32C(c.Keys, c.Values) != c.CRC32C {
					t.Fatalf("ChunkCRC32C = %08x, golden has %08x", kvwire.ChunkCRC32C(c.Keys, c.Values), c.CRC32C)
				}
			}
			if g.plain {
				exo, err := kvwiretest.EncodeMessage(g.msg)
				if err != nil || !bytes.Equal(bodyOf(t, exo), want) {
					t.Fatalf("kvwiretest encoder: %v\n got % x\nwant % x", err, exo, want)
				}
			}
		})
	}
}

func TestGoldenAuthMAC(t *testing.T) {
	t.Parallel()
	secret := []byte("duet-test-secret")
	r := goldenRequestExt
	want := r.Auth.MAC
	if got := kvwire.RequestMAC(secret, &r, r.Auth.Timestamp, r.Auth.Nonce); !bytes.Equal(got, want) {
		t.Fatalf("RequestMAC = % x, want % x", got, want)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(readHex(t, "auth_mac.hex"))
	if got := m.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("HMAC of auth_mac.hex = % x, want % x (vector and golden frame disagree)", got, want)
	}
}
