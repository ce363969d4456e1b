package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// Every kernel path's contract: every tile shape gives an output the same bits (so batched = unbatched on the
// path), stored-weight kernels give the bits of the float32 kernels over the expanded rows (stored = expanded),
// and all are close to the float64 dot product. Each test runs on every path this CPU has.

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// forPaths runs f as a subtest for every kernel path this CPU has.
func forPaths(t *testing.T, f func(t *testing.T, k kernelPath)) {
	for _, k := range kernelPaths() {
		t.Run(k.String(), func(t *testing.T) { f(t, k) })
	}
}

func TestKernelTilesAgree(t *testing.T) { forPaths(t, testTilesAgree) }

func testTilesAgree(t *testing.T, k kernelPath) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ rows, in, out int }{{1, 8, 1}, {1, 64, 13}, {2, 136, 9}, {3, 64, 8}, {7, 256, 37}, {8, 768, 64}, {13, 48, 10}} {
		t.Run(fmt.Sprintf("%dx%dx%d", tc.rows, tc.in, tc.out), func(t *testing.T) {
			x, w := randVec(r, tc.rows*tc.in), randVec(r, tc.out*tc.in)
			all := make([]float32, tc.rows*tc.out)
			matmulRows(k, all, x, w, tc.rows, tc.in, tc.out, 0, tc.out)
			for row := range tc.rows {
				// One row at a time, and over odd ranges of outputs, as decode and other chunkings run it.
				one := make([]float32, tc.out)
				for o0 := 0; o0 < tc.out; o0 += 5 {
					o1 := min(o0+5, tc.out)
					matmulRows(k, one, x[row*tc.in:(row+1)*tc.in], w[o0*tc.in:], 1, tc.in, tc.out, o0, o1)
				}
				for o := range tc.out {
					got, batched := one[o], all[row*tc.out+o]
					if math.Float32bits(got) != math.Float32bits(batched) {
						t.Fatalf("row %d out %d: alone %v, batched %v", row, o, got, batched)
					}
					var want float64
					for k := range tc.in {
						want += float64(x[row*tc.in+k]) * float64(w[o*tc.in+k])
					}
					if d := math.Abs(float64(got) - want); d > 1e-5*float64(tc.in) {
						t.Fatalf("row %d out %d: %v, float64 %v", row, o, got, want)
					}
				}
			}
		})
	}
}

func TestStoredKernelsAreExact(t *testing.T) { forPaths(t, testStoredKernelsAreExact) }

func testStoredKernelsAreExact(t *testing.T, k kernelPath) {
	r := rand.New(rand.NewPCG(3, 4))
	const in, out = 256, 11 // 11 rows: the tail kernels run too
	x := randVec(r, in)
	ref := randVec(r, out*in)
	for _, tc := range []struct {
		name  string
		kind  storedKind
		group int
	}{{"bf16", storedBF16, 0}, {"f16", storedF16, 0}, {"q8g64", storedQ8, 64}, {"q8g32", storedQ8, 32}, {"q4g64", storedQ4, 64}, {"q4g32", storedQ4, 32}, {"q4g16", storedQ4, 16}, {"q8g16", storedQ8, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			s := storedMatrix{kind: tc.kind, group: tc.group}
			expanded := make([]float32, out*in)
			switch tc.kind {
			case storedBF16, storedF16:
				s.raw = make([]byte, 2*out*in)
				for i, v := range ref {
					var h uint16
					if tc.kind == storedBF16 {
						h = uint16(math.Float32bits(v) >> 16)
						expanded[i] = math.Float32frombits(uint32(h) << 16)
					} else {
						h = uint16(r.Uint32()&0x7bff) | uint16(r.Uint32()&0x8000) // finite float16
						expanded[i] = f16Table[h]
					}
					binary.LittleEndian.PutUint16(s.raw[2*i:], h)
				}
			default:
				bits := 8
				if tc.kind == storedQ4 {
					bits = 4
				}
				groups := in / tc.group
				s.raw = make([]byte, out*in*bits/8)
				for i := range s.raw {
					s.raw[i] = byte(r.Uint32())
				}
				s.scales, s.biases = randVec(r, out*groups), randVec(r, out*groups)
				for o := range out {
					model.Dequantize(expanded[o*in:(o+1)*in], s.raw[o*in*bits/8:(o+1)*in*bits/8],
						s.scales[o*groups:(o+1)*groups], s.biases[o*groups:(o+1)*groups], bits, tc.group)
				}
			}
			if !s.vecOK(k, in) {
				t.Fatal("no decode kernel")
			}
			got, want := make([]float32, out), make([]float32, out)
			s.vecRows(k, got, x, in, 0, out)
			matmulRows(k, want, x, expanded, 1, in, out, 0, out)
			for o := range out {
				if math.Float32bits(got[o]) != math.Float32bits(want[o]) {
					t.Fatalf("out %d: stored %v, expanded %v", o, got[o], want[o])
				}
			}
			// Odd ranges of rows: the tail kernels repeat a row.
			part := make([]float32, out)
			for o0 := 0; o0 < out; o0 += 3 {
				s.vecRows(k, part, x, in, o0, min(o0+3, out))
			}
			for o := range out {
				if math.Float32bits(part[o]) != math.Float32bits(want[o]) {
					t.Fatalf("out %d in parts: %v, want %v", o, part[o], want[o])
				}
			}
			// Batched decode (1 to storedVecRows rows, and past it): every row's outputs are its
			// unbatched ones, over the whole matrix and in odd ranges of rows.
			const maxRows = storedVecRows + 1
			xs := randVec(r, maxRows*in)
			copy(xs, x)
			single := make([]float32, maxRows*out)
			for row := range maxRows {
				matmulRows(k, single[row*out:(row+1)*out], xs[row*in:(row+1)*in], expanded, 1, in, out, 0, out)
			}
			for rows := 1; rows <= maxRows; rows++ {
				for _, step := range []int{out, 3} {
					batch := make([]float32, rows*out)
					for o0 := 0; o0 < out; o0 += step {
						s.vecRowsBatch(k, batch, xs, rows, in, out, o0, min(o0+step, out))
					}
					for i, v := range batch {
						if math.Float32bits(v) != math.Float32bits(single[i]) {
							t.Fatalf("%d rows, %d outputs at a time: row %d out %d: %v, unbatched %v", rows, step, i/out, i%out, v, single[i])
						}
					}
				}
			}
		})
	}
}

func TestAttentionCloseToGo(t *testing.T) { forPaths(t, testAttentionCloseToGo) }

func testAttentionCloseToGo(t *testing.T, kp kernelPath) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ hd, n int }{{8, 1}, {64, 37}, {72, 5}, {128, 300}, {48, 17}} {
		q, k, v := randVec(r, tc.hd), randVec(r, tc.n*tc.hd), randVec(r, tc.n*tc.hd)
		// No sink, and sinks below, among and far above the scores (a sink-dominated head).
		for _, sink := range []float32{noSink, -4, 0.5, 40} {
			got, want := make([]float32, tc.hd), make([]float32, tc.hd)
			attendHead(kp, got, q, k, v, make([]float32, tc.n), 0.125, sink)
			attendHead(pathGo, want, q, k, v, make([]float32, tc.n), 0.125, sink)
			for d := range got {
				if diff := math.Abs(float64(got[d] - want[d])); diff > 1e-5 {
					t.Fatalf("hd %d n %d sink %v: out[%d] = %v, Go path %v", tc.hd, tc.n, sink, d, got[d], want[d])
				}
			}
			if sink != sink {
				continue
			}
			// The sink's weight is dropped: the output is the sink-free one scaled by Z/(Z+e^sink).
			free := make([]float32, tc.hd)
			scores := make([]float32, tc.n)
			attendHead(pathGo, free, q, k, v, scores, 0.125, noSink)
			var z float64
			for j := range tc.n {
				z += math.Exp(0.125 * float64(dot1(q, k[j*tc.hd:(j+1)*tc.hd])))
			}
			f := z / (z + math.Exp(float64(sink)))
			for d := range want {
				if diff := math.Abs(float64(want[d]) - f*float64(free[d])); diff > 1e-5*max(1, math.Abs(float64(want[d]))) {
					t.Fatalf("hd %d n %d sink %v: out[%d] = %v, want %v", tc.hd, tc.n, sink, d, want[d], f*float64(free[d]))
				}
			}
		}
	}
}

// TestKernelPathsAgree checks that every kernel path gives the Go path's logits within the reference test's
// tolerance and the same greedy tokens, on every conformance variant (each path is bit-exact only with
// itself: the vector paths fuse multiply-adds and sum in lanes), and on the mixtures of experts.
func TestKernelPathsAgree(t *testing.T) {
	t.Parallel()
	paths := kernelPaths()
	for _, v := range append(backendtest.Variants(), moeVariants...) {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.Generate(t, v.Options)
			prompt := backendtest.Prompt(20, m.Config.VocabSize, 3)
			var wantToks []int32
			var wantLogits [][]float32
			for _, k := range paths {
				for _, w := range []backend.Weights{backend.WeightsFloat32, backend.WeightsStored} {
					bm, err := loadOn(m, backend.Options{Weights: w, PrefillChunk: 7}, k)
					if err != nil {
						t.Fatal(err)
					}
					c := backendtest.NewCache(t, bm)
					toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), 12)
					bm.Close()
					if wantToks == nil {
						wantToks, wantLogits = toks, logits
						continue
					}
					worst := 0.0
					for i := range logits {
						worst = max(worst, backendtest.RelDiff(logits[i], wantLogits[i]))
					}
					t.Logf("%s/%s: max relative |Δlogit| from go/float32 = %.2e", k, w, worst)
					if worst > tolerance(m.DType) {
						t.Errorf("%s/%s: logits differ from the Go path's by %.3e > %.0e", k, w, worst, tolerance(m.DType))
					}
					if fmt.Sprint(toks) != fmt.Sprint(wantToks) {
						t.Errorf("%s/%s: greedy tokens %v, Go path %v", k, w, toks, wantToks)
					}
				}
			}
		})
	}
}

func TestSiLUCloseToGo(t *testing.T) { forPaths(t, testSiLUCloseToGo) }

// testSiLUCloseToGo checks a path's SiLU (its vector exp) against math.Exp's, over the activations a model
// sees and the ends of exp's range; the length is no multiple of the lanes, so the Go tail runs too.
func testSiLUCloseToGo(t *testing.T, k kernelPath) {
	r := rand.New(rand.NewPCG(5, 6))
	g := randVec(r, 1003)
	for i := range g[:300] {
		g[i] *= 8
	}
	copy(g[300:], []float32{0, float32(math.Copysign(0, -1)), 88, -88, 88.5, -88.5, 100, -100, 1e30, -1e30, 1e-30, -1e-30, 20, -20})
	u := randVec(r, len(g))
	got, want := slices.Clone(g), slices.Clone(g)
	siluMul(k, got, u)
	siluMul(pathGo, want, u)
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > 4e-7*math.Abs(float64(want[i]))+1e-35 || math.IsNaN(float64(got[i])) {
			t.Fatalf("silu(%v)·%v: %v, Go %v", g[i], u[i], got[i], want[i])
		}
	}
	nan := []float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	siluMul(k, nan, slices.Repeat([]float32{1}, len(nan)))
	if !math.IsNaN(float64(nan[0])) {
		t.Fatalf("silu(NaN) = %v", nan[0])
	}
}

// TestExpShiftCloseToGo checks each vector path's softmax exponentials, exp(s − mx), against math.Exp's over
// the scores attention sees (s ≤ mx) and beyond.
func TestExpShiftCloseToGo(t *testing.T) {
	for _, k := range kernelPaths()[1:] {
		t.Run(k.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			s := randVec(r, 4096)
			for i := range s {
				s[i] *= 30
			}
			copy(s, []float32{0, 3, -3, 90, -90, -200, 1e-30})
			got := slices.Clone(s)
			const mx = 3
			simdKernels[k].exp(&got[0], mx, len(got))
			for i, v := range s {
				want := math.Exp(float64(v - mx))
				if d := math.Abs(float64(got[i]) - float64(float32(want))); d > 4e-7*want+1e-37 {
					t.Fatalf("exp(%v - %v) = %v, math.Exp %v", v, mx, got[i], float32(want))
				}
			}
		})
	}
}

// TestWidenBF16 checks the vector widening of a bfloat16 cache's values against the Go loop's, bit for bit.
func TestWidenBF16(t *testing.T) {
	forPaths(t, func(t *testing.T, k kernelPath) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, n := range []int{0, 8, 64, 4096, 12} {
			src := make([]uint16, n)
			for i := range src {
				src[i] = uint16(r.Uint32())
			}
			got := make([]float32, n)
			if !widenBF16(k, got, src) {
				continue // widened in Go by the caller
			}
			for i, b := range src {
				if want := math.Float32frombits(uint32(b) << 16); math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("n %d: value %d: %v, want %v", n, i, got[i], want)
				}
			}
		}
	})
}
