package kvwiretest

import (
	"bytes"
	"encoding/binary"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// Shape describes synthetic KV: NumLayers layers of positions [StartPos, EndPos), sent in chunks of ChunkTokens
// positions (the last may be shorter), NHeads x HeadDim elements of DType per position.
type Shape struct {
	NumLayers   int
	StartPos    int
	EndPos      int
	ChunkTokens int
	NHeads      int
	HeadDim     int
	DType       kvwire.DType
}

// Chunks returns the chunks of s in the order a streaming prefill sends them: for each prefill step, every
// layer. Their bytes are a deterministic function of (layer, position, keys or values, element index), see
// Fill, so a receiver can check every byte with Verify.
func Chunks(s Shape) []*kvwire.KVChunk {
	var out []*kvwire.KVChunk
	step := max(s.ChunkTokens, 1)
	for pos := s.StartPos; pos < s.EndPos; pos += step {
		n := min(step, s.EndPos-pos)
		for layer := range s.NumLayers {
			size := n * s.NHeads * s.HeadDim * s.DType.Size()
			c := &kvwire.KVChunk{LayerIdx: layer, NumTokens: n, NHeads: s.NHeads, HeadDim: s.HeadDim,
				DType: s.DType, Keys: make([]byte, size), Values: make([]byte, size)}
			Fill(c.Keys, layer, pos, 0)
			Fill(c.Values, layer, pos, 1)
			out = append(out, c)
		}
	}
	return out
}

// Fill writes into b the deterministic pattern of (layer, first position, kind: 0 for keys, 1 for values).
func Fill(b []byte, layer, pos, kind int) {
	seed := uint64(layer)<<40 ^ uint64(kind)<<32 ^ 0x9e3779b97f4a7c15
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], mix(seed, uint64(pos), uint64(i)))
	}
	if r := len(b) % 8; r != 0 {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], mix(seed, uint64(pos), uint64(len(b)-r)))
		copy(b[len(b)-r:], tail[:r])
	}
}

func mix(seed, pos, off uint64) uint64 {
	x := seed ^ pos*0xbf58476d1ce4e5b9 ^ off*0x94d049bb133111eb
	x ^= x >> 31
	x *= 0xd6e8feb86ca77b25
	return x ^ x>>29
}

// Verify reports whether c holds exactly the bytes Chunks would have produced for it, given the position of
// its first token.
func Verify(c *kvwire.KVChunk, pos int) bool {
	want := make([]byte, len(c.Keys))
	Fill(want, c.LayerIdx, pos, 0)
	if !bytes.Equal(want, c.Keys) {
		return false
	}
	Fill(want, c.LayerIdx, pos, 1)
	return bytes.Equal(want, c.Values)
}

// Response returns a plain exo response streaming s for req: header, chunks, done.
func (s Shape) Response(req kvwire.Request) Response {
	resp := Response{Header: kvwire.Header{RequestID: req.RequestID, ModelID: req.ModelID, NumLayers: s.NumLayers,
		DType: s.DType, StartPos: s.StartPos}}
	for _, c := range Chunks(s) {
		resp.Messages = append(resp.Messages, c)
	}
	resp.Messages = append(resp.Messages, &kvwire.Done{TotalTokens: s.EndPos - s.StartPos})
	return resp
}
