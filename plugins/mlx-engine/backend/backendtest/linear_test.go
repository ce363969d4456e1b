package backendtest

import (
	"math"
	"slices"
	"strconv"
	"testing"
)

// linearShapes are the block sizes the reference checks itself on: the tiny model's (docs/hybrid-design.md
// §6.1: two value heads per key head, Dk ≠ Dv) and an odd one (one key head for three value heads, three taps).
var linearShapes = []struct {
	name string
	d    LinearDims
}{
	{"tiny", LinearDims{Hidden: 64, Nk: 2, Nv: 4, Dk: 16, Dv: 8, K: 4, Eps: 1e-6}},
	{"odd", LinearDims{Hidden: 24, Nk: 1, Nv: 3, Dk: 6, Dv: 5, K: 3, Eps: 1e-5}},
}

func newLinearRef(t *testing.T, d LinearDims) *LinearReference {
	t.Helper()
	r, err := NewLinearReference(d, RandomLinear(1, d))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// relDiff is max |a−b| / max |b|.
func relDiff(a, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = math.Max(d, math.Abs(a[i]-b[i]))
		m = math.Max(m, math.Abs(b[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// TestLinearChunkedMatchesRecurrence checks the chunked form of the delta rule against the recurrence in
// float64, from the zero state and from a random one, with full chunks (C = 64) and with many small ones and
// a padded tail (C = 5), on inputs that reach the pitfalls of docs/hybrid-design.md §1.4: a head forgetting
// within one token (cumulative log-decay far below −100 in a chunk, where an exponential taken before the mask
// overflows), both branches of softplus, and β near 0 and 1.
func TestLinearChunkedMatchesRecurrence(t *testing.T) {
	t.Parallel()
	const n = 300
	for _, shape := range linearShapes {
		for _, start := range []string{"zero", "random"} {
			for _, c := range []int{64, 5} {
				t.Run(shape.name+"/"+start+"/C"+strconv.Itoa(c), func(t *testing.T) {
					t.Parallel()
					d := shape.d
					r := newLinearRef(t, d)
					st := NewLinearState(d)
					if start == "random" {
						st = RandomLinearState(2, d, nil)
					}
					x := f64(RandomLinearInput(3, d, n))
					rec, chk := st.Clone(), st.Clone()
					s := r.prepare(rec, x)
					chk.Conv = slices.Clone(rec.Conv)
					oRec, oChk := r.recurrence(rec.S, s), r.chunked(chk.S, s, c)
					for tok := range n {
						if e := relDiff(oChk[tok], oRec[tok]); !(e <= 1e-10) {
							t.Fatalf("position %d: chunked output differs from the recurrence by %.3g relative", tok, e)
						}
					}
					if e := relDiff(chk.S, rec.S); !(e <= 1e-10) {
						t.Fatalf("final state: chunked differs from the recurrence by %.3g relative", e)
					}
					if e := relDiff(r.finish(oChk, s.z), r.finish(oRec, s.z)); !(e <= 1e-10) {
						t.Fatalf("block output: chunked differs from the recurrence by %.3g relative", e)
					}
					checkLinearRanges(t, r.Ranges())
				})
			}
		}
	}
}

// checkLinearRanges fails unless the inputs reached the hard cases RandomLinear aims at.
func checkLinearRanges(t *testing.T, g LinearRanges) {
	t.Helper()
	if !(g.MinChunkGamma < -100) {
		t.Errorf("cumulative log-decay in a chunk only reached %g, want below −100", g.MinChunkGamma)
	}
	if !(g.MinSoftplusIn < -20 && g.MaxSoftplusIn > 20) {
		t.Errorf("a + dt_bias spans [%g, %g], want beyond ±20 (both branches of softplus)", g.MinSoftplusIn, g.MaxSoftplusIn)
	}
	if !(g.MinBeta < 0.05 && g.MaxBeta > 0.95) {
		t.Errorf("β spans [%g, %g], want from below 0.05 to above 0.95", g.MinBeta, g.MaxBeta)
	}
}

// TestLinearPiecesMatchOneShot checks that a prompt run in pieces of 3, 17, 64 and the rest, with the state
// carried, gives what one call gives: bit for bit with the recurrence, to 1e-10 with the chunked form (whose
// chunks then start elsewhere).
func TestLinearPiecesMatchOneShot(t *testing.T) {
	t.Parallel()
	const n = 300
	for _, shape := range linearShapes {
		for _, c := range []int{0, 64} {
			t.Run(shape.name+"/C"+strconv.Itoa(c), func(t *testing.T) {
				t.Parallel()
				d := shape.d
				r := newLinearRef(t, d)
				x := f64(RandomLinearInput(4, d, n))
				whole, pieces := RandomLinearState(5, d, nil), RandomLinearState(5, d, nil)
				want := r.Forward(whole, x, c)
				var got []float64
				at := 0
				for _, p := range []int{3, 17, 64, n - 84} {
					got = append(got, r.Forward(pieces, x[at*d.Hidden:(at+p)*d.Hidden], c)...)
					at += p
				}
				if c == 0 {
					if !slices.Equal(got, want) || !slices.Equal(pieces.S, whole.S) || !slices.Equal(pieces.Conv, whole.Conv) {
						t.Fatalf("recurrence in pieces differs from one call (outputs %.3g, state %.3g relative)", relDiff(got, want), relDiff(pieces.S, whole.S))
					}
					return
				}
				if e := relDiff(got, want); !(e <= 1e-10) {
					t.Fatalf("outputs in pieces differ by %.3g relative", e)
				}
				if e := relDiff(pieces.S, whole.S); !(e <= 1e-10) {
					t.Fatalf("state in pieces differs by %.3g relative", e)
				}
				if !slices.Equal(pieces.Conv, whole.Conv) {
					t.Fatal("conv window in pieces differs from one call")
				}
			})
		}
	}
}

// TestLinearConvWindow checks the conv's edges against the definition: the first output sees only its own
// position through the last tap (the window starts as zeros), and after fewer than K-1 tokens the window still
// holds K-1 rows, the leading ones zero.
func TestLinearConvWindow(t *testing.T) {
	t.Parallel()
	d := linearShapes[0].d
	r := newLinearRef(t, d)
	cd := d.ConvDim()
	x := f64(RandomLinearInput(6, d, 1))
	st := NewLinearState(d)
	s := r.prepare(st, x)
	c := r.qkv.apply(x)
	kd := d.KeyDim()
	want := make([]float64, cd)
	for i := range want {
		want[i] = silu64(r.conv[d.K-1][i] * c[i])
	}
	l2norm64(want[:kd], d.Dk, 1/math.Sqrt(float64(d.Dk)))
	l2norm64(want[kd:2*kd], d.Dk, 1)
	got := slices.Concat(s.q[0], s.k[0], s.v[0])
	if e := relDiff(got, want); e != 0 {
		t.Fatalf("first position's conv output differs by %.3g relative", e)
	}
	for i := range d.K - 2 {
		if slices.ContainsFunc(st.Conv[i*cd:(i+1)*cd], func(v float64) bool { return v != 0 }) {
			t.Fatalf("window row %d after one token is not the zero padding", i)
		}
	}
	if !slices.Equal(st.Conv[(d.K-2)*cd:], c) {
		t.Fatal("window's newest row is not the token's pre-conv row")
	}
}

// TestLinearStateFloat32 checks the state's float32 form: a round trip keeps float32 values exactly, and
// lengths that do not fit the sizes are refused.
func TestLinearStateFloat32(t *testing.T) {
	t.Parallel()
	d := linearShapes[0].d
	st := RandomLinearState(7, d, nil)
	conv, state := st.Float32()
	back, err := LinearStateFrom(d, conv, state)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Conv, st.Conv) || !slices.Equal(back.S, st.S) {
		t.Fatal("float32 round trip changed the state")
	}
	if _, err := LinearStateFrom(d, conv[1:], state); err == nil {
		t.Error("a short conv window was accepted")
	}
	if _, err := LinearStateFrom(d, conv, state[1:]); err == nil {
		t.Error("a short recurrent state was accepted")
	}
}

// TestLinearReferenceRejects checks the sizes and weights a reference refuses.
func TestLinearReferenceRejects(t *testing.T) {
	t.Parallel()
	d := linearShapes[0].d
	for _, tc := range []struct {
		name string
		d    LinearDims
		w    func(*LinearWeights)
	}{
		{"heads not a multiple", LinearDims{Hidden: 8, Nk: 2, Nv: 3, Dk: 4, Dv: 4, K: 4}, nil},
		{"one tap", LinearDims{Hidden: 8, Nk: 1, Nv: 1, Dk: 4, Dv: 4, K: 1}, nil},
		{"short conv", d, func(w *LinearWeights) { w.Conv = w.Conv[1:] }},
		{"short A_log", d, func(w *LinearWeights) { w.ALog = w.ALog[1:] }},
	} {
		w := RandomLinear(1, d)
		if tc.w != nil {
			tc.w(w)
		}
		if _, err := NewLinearReference(tc.d, w); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
