package kvwiretest

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/duet-ai/duet/sdk/kvwire"
	"github.com/vmihailenco/msgpack/v5"
)

// The structs below mirror exo's msgspec structs field for field and in order; msgspec puts a tagged struct's
// `type` first and encodes every field (no omission of defaults).

type exoRequest struct {
	RequestID string  `msgpack:"request_id"`
	ModelID   string  `msgpack:"model_id"`
	TokenIDs  []int32 `msgpack:"token_ids"`
	StartPos  int     `msgpack:"start_pos"`
}

type exoHeader struct {
	RequestID string `msgpack:"request_id"`
	ModelID   string `msgpack:"model_id"`
	NumLayers int    `msgpack:"num_layers"`
	DType     string `msgpack:"dtype"`
	StartPos  int    `msgpack:"start_pos"`
}

type exoKVChunk struct {
	Type      string `msgpack:"type"`
	LayerIdx  int    `msgpack:"layer_idx"`
	NumTokens int    `msgpack:"num_tokens"`
	NHeads    int    `msgpack:"n_heads"`
	HeadDim   int    `msgpack:"head_dim"`
	DType     string `msgpack:"dtype"`
	Keys      []byte `msgpack:"keys"`
	Values    []byte `msgpack:"values"`
}

type exoTensorBlob struct {
	DType string `msgpack:"dtype"`
	Shape []int  `msgpack:"shape"`
	Data  []byte `msgpack:"data"`
}

type exoArraysState struct {
	Type     string          `msgpack:"type"`
	LayerIdx int             `msgpack:"layer_idx"`
	Arrays   []exoTensorBlob `msgpack:"arrays"`
}

type exoDone struct {
	Type        string `msgpack:"type"`
	TotalTokens int    `msgpack:"total_tokens"`
}

type exoError struct {
	Type    string `msgpack:"type"`
	Code    int    `msgpack:"code"`
	Message string `msgpack:"message"`
}

// encode marshals v the way msgspec would: struct fields as a map in order, integers in their shortest form.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// frame prepends the 4-byte big-endian length.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// EncodeRequest returns the frame an exo client sends for r (extension fields are not part of exo's request and
// are left out).
func EncodeRequest(r kvwire.Request) ([]byte, error) {
	tokens := r.TokenIDs
	if tokens == nil {
		tokens = []int32{}
	}
	b, err := encode(exoRequest{RequestID: r.RequestID, ModelID: r.ModelID, TokenIDs: tokens, StartPos: r.StartPos})
	return frame(b), err
}

// EncodeHeader returns the frame an exo server sends for h (without the checksum acknowledgement).
func EncodeHeader(h kvwire.Header) ([]byte, error) {
	b, err := encode(exoHeader{RequestID: h.RequestID, ModelID: h.ModelID, NumLayers: h.NumLayers,
		DType: h.DType.String(), StartPos: h.StartPos})
	return frame(b), err
}

// EncodeMessage returns the frame an exo server sends for m (without checksums).
func EncodeMessage(m kvwire.Message) ([]byte, error) {
	var v any
	switch m := m.(type) {
	case *kvwire.KVChunk:
		v = exoKVChunk{Type: "kv_chunk", LayerIdx: m.LayerIdx, NumTokens: m.NumTokens, NHeads: m.NHeads,
			HeadDim: m.HeadDim, DType: m.DType.String(), Keys: nonNil(m.Keys), Values: nonNil(m.Values)}
	case *kvwire.ArraysState:
		arrays := make([]exoTensorBlob, 0, len(m.Arrays))
		for _, a := range m.Arrays {
			shape := a.Shape
			if shape == nil {
				shape = []int{}
			}
			arrays = append(arrays, exoTensorBlob{DType: a.DType.String(), Shape: shape, Data: nonNil(a.Data)})
		}
		v = exoArraysState{Type: "arrays_state", LayerIdx: m.LayerIdx, Arrays: arrays}
	case *kvwire.Done:
		v = exoDone{Type: "done", TotalTokens: m.TotalTokens}
	case *kvwire.Error:
		v = exoError{Type: "error", Code: m.Code, Message: m.Message}
	default:
		return nil, fmt.Errorf("kvwiretest: cannot encode %T", m)
	}
	b, err := encode(v)
	return frame(b), err
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
