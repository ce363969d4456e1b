// Package prefixhash defines the chained hashes of a prompt's token blocks that duet uses everywhere a prompt
// prefix is recognised: the gateway computes them for the router's prefix affinity, and engines key their
// prefix caches by them, so that what a router predicts is what an engine finds.
//
// Hash i covers blocks 0..i of BlockTokens tokens each (a hit at block i means the whole prefix up to it is
// the same), and only whole blocks are hashed. The hash is seedless and part of the plugin protocol: the same
// tokens give the same hashes in every process, on every machine, in every version. It is SHA-256 truncated to
// 64 bits, not a fast non-cryptographic hash, because a prompt's hashes are chosen by its client: with a hash
// whose collisions can be crafted, one client could make its prompt look like another's prefix. Hashing costs
// about a millisecond per 100k tokens, against seconds to prefill them; a cache that reuses KV should still
// compare the tokens it matched.
package prefixhash

import (
	"crypto/sha256"
	"encoding/binary"
)

// BlockTokens is the number of tokens per hashed block.
const BlockTokens = 64

// Chain appends to dst the chained hash of every whole block of blockTokens tokens: hash i covers blocks 0..i.
// It is SHA-256 of the previous hash (8 bytes, little endian; 0 before the first block) followed by the
// block's token ids (4 bytes each, little endian), truncated to its first 8 bytes read little endian.
func Chain(dst []uint64, tokens []int32, blockTokens int) []uint64 {
	if blockTokens <= 0 {
		return dst
	}
	n := len(tokens) / blockTokens
	buf := make([]byte, 8+4*blockTokens)
	var prev uint64
	for b := range n {
		binary.LittleEndian.PutUint64(buf, prev)
		for i, t := range tokens[b*blockTokens : (b+1)*blockTokens] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], uint32(t))
		}
		sum := sha256.Sum256(buf)
		prev = binary.LittleEndian.Uint64(sum[:8])
		dst = append(dst, prev)
	}
	return dst
}

// Blocks is Chain with BlockTokens into a new slice.
func Blocks(tokens []int32) []uint64 { return Chain(nil, tokens, BlockTokens) }
