package prefixhash

import (
	"slices"
	"testing"
)

// The hashes are part of the plugin protocol: these values must never change. They were computed
// independently with Python's hashlib from the definition in Chain's comment.
func TestGolden(t *testing.T) {
	tokens := make([]int32, 3*BlockTokens+5)
	for i := range tokens {
		tokens[i] = int32(i*7919) - 1000
	}
	got := Blocks(tokens)
	if !slices.Equal(got, golden) {
		t.Fatalf("hashes %#x, want %#x", got, golden)
	}
}

func TestChained(t *testing.T) {
	a := make([]int32, 4*BlockTokens)
	b := slices.Clone(a)
	b[2*BlockTokens] = 1 // block 2 differs
	ha, hb := Blocks(a), Blocks(b)
	if ha[0] != hb[0] || ha[1] != hb[1] || ha[2] == hb[2] || ha[3] == hb[3] {
		t.Fatalf("a change in block 2 must change hashes 2 and 3 only: %#x vs %#x", ha, hb)
	}
	if len(Blocks(a[:BlockTokens-1])) != 0 {
		t.Fatal("a partial block was hashed")
	}
	if got := Chain([]uint64{9}, a, 128); len(got) != 3 || got[0] != 9 {
		t.Fatalf("Chain appends: %#x", got)
	}
}

func BenchmarkBlocks(b *testing.B) {
	tokens := make([]int32, 100_000)
	b.SetBytes(4 * int64(len(tokens)))
	for b.Loop() {
		Blocks(tokens)
	}
}

var golden = []uint64{0x5522a871af3d0bef, 0xb4366ee016f3ab1, 0x65a6d2bb7aa7f337}
