// Command kernelgen writes the CPU backend's amd64 vector kernels (kernels_amd64.s and their Go declarations,
// kernels_stubs_amd64.go) with avo. It runs from the cpu package's go:generate line; CI checks that its output
// is reproduced byte for byte.
//
// Every kernel computes dot products with one rounding rule, the AVX2 path's: an output's 8 lanes each
// accumulate x[k]·w[k] for k ≡ lane (mod 8) in index order with fused multiply-adds, then the lanes are summed
// by one fixed tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). So a dot product has the same bits whichever kernel
// computes it (one weight row at a time or eight, one input row or three, weights stored as float32 or widened
// in registers from bfloat16, float16 or MLX 8- and 4-bit groups), which is what keeps batched decode equal to
// unbatched decode and chunked prefill equal to one-shot prefill on this path. Lengths are multiples of 8.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// vec is a vector width: AVX2's 8 lanes (ymm) or AVX-512's 16 (zmm). The AVX-512 kernels keep the same rule
// with 16 lanes, the upper 8 folded onto the lower first (l_i + l_{i+8}), then the 8-lane tree; their names end
// in Z.
type vec struct {
	lanes  int
	suffix string
}

var (
	avx2   = vec{8, ""}
	avx512 = vec{16, "Z"}
)

func (v vec) reg() VecVirtual {
	if v.lanes == 16 {
		return ZMM()
	}
	return YMM()
}

func (v vec) bytes() int { return 4 * v.lanes }

func main() {
	for _, t := range [][2]int{{8, 1}, {4, 1}, {1, 1}, {4, 3}, {4, 2}} {
		f32Tile(avx2, t[0], t[1])
	}
	for _, t := range [][2]int{{8, 1}, {4, 1}, {1, 1}, {4, 6}, {4, 5}, {4, 4}, {4, 3}, {4, 2}} {
		f32Tile(avx512, t[0], t[1])
	}
	for _, v := range []vec{avx2, avx512} {
		half(v, "bf16", func(m Mem, dst VecVirtual) {
			VPMOVZXWD(m, dst)
			VPSLLD(U8(16), dst, dst)
		})
		half(v, "f16", func(m Mem, dst VecVirtual) { VCVTPH2PS(m, dst) })
		quant(v, 8)
	}
	quant(avx2, 4)
	quant4Z()
	fp4AVX2()
	fp4Z()
	for _, v := range []vec{avx2, avx512} {
		for _, kind := range []string{"bf16", "f16", "q8", "q4", "fp4"} {
			for xr := 1; xr <= 8; xr++ {
				storedBatch(v, kind, xr)
			}
		}
	}
	silu(avx2)
	silu(avx512)
	expShift(avx2)
	expShift(avx512)
	axpy(avx2, 4)
	axpy(avx2, 1)
	axpy(avx512, 2)
	axpy(avx512, 1)
	deltaRows(4)
	deltaRows(1)
	readKernel()
	widenKernel()
	Generate()
}

// hsum sums acc's lanes by the fixed tree and stores the result at dst.
func hsum(acc VecVirtual, dst Mem) {
	if acc.Size() == 64 {
		y := YMM()
		VEXTRACTF64X4(U8(1), acc, y)
		VADDPS(y, acc.AsY(), y) // y_i = l_i + l_{i+8}
		hsum8(y, dst, true)
		return
	}
	hsum8(acc, dst, false)
}

// hsumPairs is hsum for 16 lanes kept in pairs: lane 2i holds l_i and lane 2i+1 holds l_{i+8} (the layout of
// quant4Z). The fold adds each pair, l_i + l_{i+8} as hsum does, and the tree continues on the 8 sums.
func hsumPairs(acc VecVirtual, dst Mem) {
	t, y := ZMM(), YMM()
	VMOVSHDUP(acc, t) // t_2i = l_{i+8}
	VADDPS(t, acc, t) // t_2i = l_i + l_{i+8}
	VPMOVQD(t, y)     // y_i = t_2i
	hsum8(y, dst, true)
}

// hsum8 sums the 8 lanes of y by the tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) and stores the result at dst;
// evex where AVX-512 code may have put y in a register above Y15, which VEX cannot name.
func hsum8(y VecVirtual, dst Mem, evex bool) {
	VMOVSS(hsum8Reg(y, evex), dst)
}

// hsum8Reg is hsum8 leaving the sum in the low lane of the register it returns.
func hsum8Reg(y VecVirtual, evex bool) VecVirtual {
	t, u := XMM(), XMM()
	if evex {
		VEXTRACTF32X4(U8(1), y, t)
	} else {
		VEXTRACTF128(U8(1), y, t)
	}
	VADDPS(t, y.AsX(), t) // t_i = l_i + l_{i+4}
	VMOVHLPS(t, t, u)
	VADDPS(u, t, t) // t_0 = t_0 + t_2, t_1 = t_1 + t_3
	VMOVSHDUP(t, u)
	VADDSS(u, t, t)
	return t
}

// f32Tile writes f32Dot<wr>x<xr>: y[r*ys+o] = Σ_k x[r*n+k]·w[o*n+k] for o < wr, r < xr.
func f32Tile(v vec, wr, xr int) {
	name := fmt.Sprintf("f32Dot%dx%d%s", wr, xr, v.suffix)
	TEXT(name, NOSPLIT, "func(y *float32, ys int, x *float32, w *float32, n int)")
	Doc(fmt.Sprintf("%s computes y[r*ys+o] = Σ_k x[r*n+k]·w[o*n+k] for %d weight row(s) o and %d input row(s) r (n a multiple of %d).", name, wr, xr, v.lanes))
	n := Load(Param("n"), GP64())
	stride := GP64()
	MOVQ(n, stride)
	SHLQ(U8(2), stride)
	xp := make([]GPVirtual, xr)
	xp[0] = Load(Param("x"), GP64()).(GPVirtual)
	for r := 1; r < xr; r++ {
		xp[r] = GP64()
		LEAQ(Mem{Base: xp[r-1], Index: stride, Scale: 1}, xp[r])
	}
	wp := make([]GPVirtual, wr)
	wp[0] = Load(Param("w"), GP64()).(GPVirtual)
	for o := 1; o < wr; o++ {
		wp[o] = GP64()
		LEAQ(Mem{Base: wp[o-1], Index: stride, Scale: 1}, wp[o])
	}
	acc := make([][]VecVirtual, xr)
	for r := range acc {
		acc[r] = make([]VecVirtual, wr)
		for o := range acc[r] {
			acc[r][o] = v.reg()
			VXORPS(acc[r][o], acc[r][o], acc[r][o])
		}
	}
	k := GP64()
	XORQ(k, k)
	Label(name + "_loop")
	CMPQ(k, stride)
	JGE(LabelRef(name + "_done"))
	xs := make([]VecVirtual, xr)
	if xr == 1 {
		// One input row: its vector stays in a register and the weights are memory operands.
		xs[0] = v.reg()
		VMOVUPS(Mem{Base: xp[0], Index: k, Scale: 1}, xs[0])
		for o := range wr {
			VFMADD231PS(Mem{Base: wp[o], Index: k, Scale: 1}, xs[0], acc[0][o])
		}
	} else {
		for r := range xr {
			xs[r] = v.reg()
			VMOVUPS(Mem{Base: xp[r], Index: k, Scale: 1}, xs[r])
		}
		for o := range wr {
			wv := v.reg()
			VMOVUPS(Mem{Base: wp[o], Index: k, Scale: 1}, wv)
			for r := range xr {
				VFMADD231PS(wv, xs[r], acc[r][o])
			}
		}
	}
	ADDQ(U8(v.bytes()), k)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	ys := Load(Param("ys"), GP64())
	SHLQ(U8(2), ys)
	for r := range xr {
		for o := range wr {
			hsum(acc[r][o], Mem{Base: y, Disp: 4 * o})
		}
		if r+1 < xr {
			ADDQ(ys, y)
		}
	}
	VZEROUPPER()
	RET()
}

// half writes <kind>Dot4x1 for four rows of 16-bit weights, widened to float32 in registers by widen.
func half(v vec, kind string, widen func(m Mem, dst VecVirtual)) {
	name := kind + "Dot4x1" + v.suffix
	TEXT(name, NOSPLIT, "func(y *float32, x *float32, w *byte, ws int, n int)")
	Doc(fmt.Sprintf("%s computes y[o] = Σ_k x[k]·w_o[k] for four %s rows o starting at w, ws bytes apart (0 repeats a row).", name, kind))
	x := Load(Param("x"), GP64())
	ws := Load(Param("ws"), GP64())
	wp := make([]GPVirtual, 4)
	wp[0] = Load(Param("w"), GP64()).(GPVirtual)
	for o := 1; o < 4; o++ {
		wp[o] = GP64()
		LEAQ(Mem{Base: wp[o-1], Index: ws, Scale: 1}, wp[o])
	}
	n := Load(Param("n"), GP64())
	acc := make([]VecVirtual, 4)
	for o := range acc {
		acc[o] = v.reg()
		VXORPS(acc[o], acc[o], acc[o])
	}
	// pf walks the rows two calls ahead (as prefetcher does), the 4·lanes·2 bytes an iteration reads.
	pf := GP64()
	LEAQ(Mem{Base: wp[0], Index: ws, Scale: 8}, pf)
	k := GP64() // index of the next 8 weights; x advances 4 bytes per weight, w 2
	XORQ(k, k)
	Label(name + "_loop")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	for l := 0; l < 8*v.lanes; l += 64 {
		PREFETCHT0(Mem{Base: pf, Disp: l})
	}
	ADDQ(U8(8*v.lanes), pf)
	xv := v.reg()
	VMOVUPS(Mem{Base: x, Index: k, Scale: 4}, xv)
	for o := range 4 {
		t := v.reg()
		widen(Mem{Base: wp[o], Index: k, Scale: 2}, t)
		VFMADD231PS(t, xv, acc[o])
	}
	ADDQ(U8(v.lanes), k)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	for o := range 4 {
		hsum(acc[o], Mem{Base: y, Disp: 4 * o})
	}
	VZEROUPPER()
	RET()
}

// quant writes q<bits>Dot4x1 for four rows of MLX affine-quantized weights: each weight is widened to
// float32(scale·q) + bias exactly as model.Affine computes it (a rounded product, then a rounded sum), so the
// dot product is the one the float32 kernels compute over the dequantized matrix.
func quant(v vec, bits int) {
	name := fmt.Sprintf("q%dDot4x1%s", bits, v.suffix)
	TEXT(name, NOSPLIT, "func(y *float32, x *float32, q *byte, qs int, scales *float32, biases *float32, ss int, n int, group int)")
	Doc(fmt.Sprintf("%s computes y[o] = Σ_k x[k]·(scale·q + bias) for four %d-bit rows o starting at q, qs bytes apart, whose groups' scales and biases start at scales and biases, ss bytes apart (0 repeats a row).", name, bits))
	x := Load(Param("x"), GP64())
	qs := Load(Param("qs"), GP64())
	qp := make([]GPVirtual, 4)
	qp[0] = Load(Param("q"), GP64()).(GPVirtual)
	for o := 1; o < 4; o++ {
		qp[o] = GP64()
		LEAQ(Mem{Base: qp[o-1], Index: qs, Scale: 1}, qp[o])
	}
	ss := Load(Param("ss"), GP64())
	sp := Load(Param("scales"), GP64())
	bp := Load(Param("biases"), GP64())
	ss3 := GP64()
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	n := Load(Param("n"), GP64())
	group := Load(Param("group"), GP64())
	acc := make([]VecVirtual, 4)
	for o := range acc {
		acc[o] = v.reg()
		VXORPS(acc[o], acc[o], acc[o])
	}
	var mask, shifts VecVirtual
	if bits == 4 {
		mask, shifts = v.reg(), v.reg()
		VPBROADCASTD(nibbleMask(), mask)
		VMOVDQU(nibbleShifts(), shifts)
	}
	pf := prefetcher(qp[0], qs, group, bits)
	k := GP64() // index of the next 8 weights
	XORQ(k, k)
	end := GP64() // end of the current group
	Label(name + "_group")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	pf.next()
	sc, bi := make([]VecVirtual, 4), make([]VecVirtual, 4)
	offs := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: sp, Index: ss, Scale: 2}, {Base: sp, Index: ss3, Scale: 1}}
	boffs := []Mem{{Base: bp}, {Base: bp, Index: ss, Scale: 1}, {Base: bp, Index: ss, Scale: 2}, {Base: bp, Index: ss3, Scale: 1}}
	for o := range 4 {
		sc[o], bi[o] = v.reg(), v.reg()
		VBROADCASTSS(offs[o], sc[o])
		VBROADCASTSS(boffs[o], bi[o])
	}
	ADDQ(U8(4), sp)
	ADDQ(U8(4), bp)
	MOVQ(k, end)
	ADDQ(group, end)
	Label(name + "_loop")
	xv := v.reg()
	VMOVUPS(Mem{Base: x, Index: k, Scale: 4}, xv)
	for o := range 4 {
		t := v.reg()
		if bits == 8 {
			VPMOVZXBD(Mem{Base: qp[o], Index: k, Scale: 1}, t)
		} else {
			// 8 nibbles in one 32-bit word, the first in the lowest bits: k/2 bytes into the row.
			VPBROADCASTD(Mem{Base: qp[o]}, t)
			VPSRLVD(shifts, t, t)
			VPAND(mask, t, t)
		}
		VCVTDQ2PS(t, t)
		VMULPS(sc[o], t, t)
		VADDPS(bi[o], t, t)
		VFMADD231PS(t, xv, acc[o])
	}
	if bits == 4 {
		for o := range 4 {
			ADDQ(U8(4), qp[o])
		}
	}
	ADDQ(U8(v.lanes), k)
	CMPQ(k, end)
	JL(LabelRef(name + "_loop"))
	JMP(LabelRef(name + "_group"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	for o := range 4 {
		hsum(acc[o], Mem{Base: y, Disp: 4 * o})
	}
	VZEROUPPER()
	RET()
}

// readKernel writes readBytes, which reads n bytes (a multiple of 128) as fast as the core can: the
// benchmarks' measure of read bandwidth, the bound of a memory-bound decode step.
func readKernel() {
	TEXT("readBytes", NOSPLIT, "func(p *byte, n int) uint64")
	Doc("readBytes reads n bytes from p (n a multiple of 128) and returns their 64-bit words xor-ed together, so the reads are needed.")
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	acc := make([]VecVirtual, 4)
	for i := range acc {
		acc[i] = YMM()
		VPXOR(acc[i], acc[i], acc[i])
	}
	end := GP64()
	LEAQ(Mem{Base: p, Index: n, Scale: 1}, end)
	Label("readBytes_loop")
	CMPQ(p, end)
	JAE(LabelRef("readBytes_done"))
	for i := range acc {
		VPXOR(Mem{Base: p, Disp: 32 * i}, acc[i], acc[i])
	}
	ADDQ(U32(128), p)
	JMP(LabelRef("readBytes_loop"))
	Label("readBytes_done")
	for i := 1; i < 4; i++ {
		VPXOR(acc[i], acc[0], acc[0])
	}
	t := XMM()
	VEXTRACTI128(U8(1), acc[0], t)
	VPXOR(t, acc[0].AsX(), t)
	r, u := GP64(), GP64()
	VMOVQ(t, r)
	VPEXTRQ(U8(1), t, u)
	XORQ(u, r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// widenKernel writes bf16Widen, which widens n bfloat16 values (a multiple of 8) to float32, exactly (the
// value's bits in the upper half): attention reads a bfloat16 cache's keys and values back this way, every
// position every step, so at a long context it is a real share of a decode step.
func widenKernel() {
	TEXT("bf16Widen", NOSPLIT, "func(dst *float32, src *uint16, n int)")
	Doc("bf16Widen sets dst[i] to the float32 of the bfloat16 src[i] for i < n (a multiple of 8).")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	i := GP64()
	XORQ(i, i)
	Label("bf16Widen_loop")
	CMPQ(i, n)
	JGE(LabelRef("bf16Widen_done"))
	t := YMM()
	VPMOVZXWD(Mem{Base: src, Index: i, Scale: 2}, t)
	VPSLLD(U8(16), t, t)
	VMOVUPS(t, Mem{Base: dst, Index: i, Scale: 4})
	ADDQ(U8(8), i)
	JMP(LabelRef("bf16Widen_loop"))
	Label("bf16Widen_done")
	VZEROUPPER()
	RET()
}

// axpy writes f32Axpy<8·blocks>: out[d] = Σ_i w[i]·v[i·vs+d] for d < 8·blocks, each output summed in position
// order with fused multiply-adds: attention's weighted sum of values.
func axpy(v vec, blocks int) {
	name := fmt.Sprintf("f32Axpy%d%s", v.lanes*blocks, v.suffix)
	TEXT(name, NOSPLIT, "func(out *float32, v *float32, vs int, w *float32, n int)")
	Doc(fmt.Sprintf("%s computes out[d] = Σ_i w[i]·v[i*vs+d] for d < %d over n positions, in position order.", name, v.lanes*blocks))
	vp := Load(Param("v"), GP64())
	vs := Load(Param("vs"), GP64())
	SHLQ(U8(2), vs)
	w := Load(Param("w"), GP64())
	n := Load(Param("n"), GP64())
	acc := make([]VecVirtual, blocks)
	for j := range acc {
		acc[j] = v.reg()
		VXORPS(acc[j], acc[j], acc[j])
	}
	i := GP64()
	XORQ(i, i)
	Label(name + "_loop")
	CMPQ(i, n)
	JGE(LabelRef(name + "_done"))
	wv := v.reg()
	VBROADCASTSS(Mem{Base: w, Index: i, Scale: 4}, wv)
	for j := range acc {
		VFMADD231PS(Mem{Base: vp, Disp: v.bytes() * j}, wv, acc[j])
	}
	ADDQ(vs, vp)
	INCQ(i)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	out := Load(Param("out"), GP64())
	for j := range acc {
		VMOVUPS(acc[j], Mem{Base: out, Disp: v.bytes() * j})
	}
	VZEROUPPER()
	RET()
}

// quant4Z writes q4Dot4x1Z, the AVX-512 kernel for quads of 4-bit rows: each group's 16 possible values per
// row are computed once (float32(scale·q) + bias for q = 0..15, as model.Affine does) into one register, and a
// weight is looked up there by its nibble with VPERMPS, which reads only an index's low 4 bits. The nibbles
// come out of a broadcast 64-bit word by one VPSRLVD: lane 2i takes nibble i from the low half, lane 2i+1
// nibble i+8 from the high half, so the lanes hold the weights in pairs (i, i+8), and x is loaded in the same
// order (one VPERMPS per 16 inputs, shared by the four rows). Each lane still sums the products of one k mod
// 16 in index order and hsumPairs folds the pairs first, which is hsum's tree: the bits of the other 4-bit
// kernels. Two instructions per 16 weights run on the shuffle units (VPMULTISHIFTQB, which the batched
// kernels use, takes them there too): 14% less time per weight at a 768-wide matrix in L2.
// One call runs quads consecutive quads of rows (a decode task's rows), so the call's setup is paid once per
// task rather than once per four rows: at an expert's 512-wide rows it was a fifth of the kernel's time. The
// rows are addressed through one byte index shared with x, so the inner loop advances a single register.
func quant4Z() {
	name := "q4Dot4x1Z"
	TEXT(name, NOSPLIT, "func(y *float32, x *float32, q *byte, qs int, scales *float32, biases *float32, ss int, n int, group int, quads int)")
	Doc(name + " is q4Dot4x1 on 16 lanes for quads consecutive quads of rows (the next quad's rows 4·qs bytes on, its scales and biases 4·ss bytes on; quads is 1 where qs is 0): values looked up in each group's table of 16 (n and group multiples of 16).")
	iota, shifts, xperm := ZMM(), ZMM(), ZMM()
	VMOVUPS(nibbleValues(), iota)
	VMOVDQU32(nibblePairShifts(), shifts)
	VMOVDQU32(nibblePairInputs(), xperm)
	x := Load(Param("x"), GP64())
	qp := make([]GPVirtual, 4)
	qp[0] = Load(Param("q"), GP64()).(GPVirtual)
	ss := Load(Param("ss"), GP64())
	sp := Load(Param("scales"), GP64())
	bp := Load(Param("biases"), GP64())
	// The prefetch runs two quads ahead (see prefetch), by 2·group bytes a group (four rows of group/2).
	pf := GP64()
	{
		qs := Load(Param("qs"), GP64())
		LEAQ(Mem{Base: qp[0], Index: qs, Scale: 8}, pf)
	}
	kb, end := GP64(), GP64() // byte offset into each row of the next 16 weights (k/2), end of the group's bytes
	acc := make([]VecVirtual, 4)
	Label(name + "_quad")
	{
		qs := Load(Param("qs"), GP64())
		for o := 1; o < 4; o++ {
			qp[o] = GP64()
			LEAQ(Mem{Base: qp[o-1], Index: qs, Scale: 1}, qp[o])
		}
	}
	for o := range acc {
		acc[o] = ZMM()
		VXORPS(acc[o], acc[o], acc[o])
	}
	XORQ(kb, kb)
	Label(name + "_group")
	{
		nb := Load(Param("n"), GP64())
		SHRQ(U8(1), nb)
		CMPQ(kb, nb)
		JGE(LabelRef(name + "_store"))
	}
	PREFETCHT0(Mem{Base: pf})
	PREFETCHT0(Mem{Base: pf, Disp: 64})
	gb := Load(Param("group"), GP64())
	LEAQ(Mem{Base: pf, Index: gb, Scale: 2}, pf)
	SHRQ(U8(1), gb)
	MOVQ(kb, end)
	ADDQ(gb, end)
	s2, b2 := GP64(), GP64()
	LEAQ(Mem{Base: sp, Index: ss, Scale: 2}, s2)
	LEAQ(Mem{Base: bp, Index: ss, Scale: 2}, b2)
	offs := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: s2}, {Base: s2, Index: ss, Scale: 1}}
	boffs := []Mem{{Base: bp}, {Base: bp, Index: ss, Scale: 1}, {Base: b2}, {Base: b2, Index: ss, Scale: 1}}
	table := make([]VecVirtual, 4)
	for o := range 4 {
		table[o] = ZMM()
		b := ZMM()
		VBROADCASTSS(offs[o], table[o])
		VMULPS(iota, table[o], table[o]) // scale·q, rounded
		VBROADCASTSS(boffs[o], b)
		VADDPS(b, table[o], table[o]) // + bias, rounded
	}
	ADDQ(U8(4), sp)
	ADDQ(U8(4), bp)
	Label(name + "_loop")
	xv := ZMM()
	VPERMPS(Mem{Base: x, Index: kb, Scale: 8}, xperm, xv)
	for o := range 4 {
		t := ZMM()
		VPBROADCASTQ(Mem{Base: qp[o], Index: kb, Scale: 1}, t)
		VPSRLVD(shifts, t, t)
		VPERMPS(table[o], t, t)
		VFMADD231PS(t, xv, acc[o])
	}
	ADDQ(U8(8), kb)
	CMPQ(kb, end)
	JL(LabelRef(name + "_loop"))
	JMP(LabelRef(name + "_group"))
	Label(name + "_store")
	{
		y := Load(Param("y"), GP64())
		for o := range 4 {
			hsumPairs(acc[o], Mem{Base: y, Disp: 4 * o})
		}
	}
	ADDQ(U8(16), paramAddr("y"))
	// The next quad: its rows start a row after this quad's last, its scales and biases 4·ss bytes after
	// this quad's (sp and bp have moved on by ss, one row's groups).
	{
		qs := Load(Param("qs"), GP64())
		LEAQ(Mem{Base: qp[3], Index: qs, Scale: 1}, qp[0])
	}
	LEAQ(Mem{Base: sp, Index: ss, Scale: 2}, sp)
	ADDQ(ss, sp)
	LEAQ(Mem{Base: bp, Index: ss, Scale: 2}, bp)
	ADDQ(ss, bp)
	DECQ(paramAddr("quads"))
	JNZ(LabelRef(name + "_quad"))
	VZEROUPPER()
	RET()
}

// paramAddr is the frame slot of an integer or pointer parameter, for a kernel that updates it in place.
func paramAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// fp4Widen turns the nibbles of a broadcast 32-bit word in t into 8 mxfp4 weights (AVX2): lane j takes nibble
// j (shifts, mask), its magnitude from the table of e2m1 values by the low 3 bits (VPERMPS reads only those),
// its sign from bit 3, and the product with the group's scale, which is exact (model.MXFP4): the weights are
// the expanded matrix's bits.
func fp4Widen(t, shifts, mask, scale VecVirtual) {
	VPSRLVD(shifts, t, t)
	VPAND(mask, t, t)
	sign := YMM()
	VPSRLD(U8(3), t, sign)
	VPSLLD(U8(31), sign, sign)
	VPERMPS(fp4Values(), t, t)
	VORPS(sign, t, t)
	VMULPS(scale, t, t)
}

// fp4AVX2 writes fp4Dot4x1, the AVX2 kernel for four mxfp4 rows (groups of 32, one widened e8m0 scale each).
func fp4AVX2() {
	name := "fp4Dot4x1"
	TEXT(name, NOSPLIT, "func(y *float32, x *float32, q *byte, qs int, scales *float32, biases *float32, ss int, n int, group int)")
	Doc(name + " computes y[o] = Σ_k x[k]·fp4(q)·scale for four mxfp4 rows o starting at q, qs bytes apart, whose groups' widened e8m0 scales start at scales, ss bytes apart (0 repeats a row); biases is unused.")
	x := Load(Param("x"), GP64())
	qs := Load(Param("qs"), GP64())
	qp := make([]GPVirtual, 4)
	qp[0] = Load(Param("q"), GP64()).(GPVirtual)
	for o := 1; o < 4; o++ {
		qp[o] = GP64()
		LEAQ(Mem{Base: qp[o-1], Index: qs, Scale: 1}, qp[o])
	}
	ss := Load(Param("ss"), GP64())
	sp := Load(Param("scales"), GP64())
	ss3 := GP64()
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	n := Load(Param("n"), GP64())
	group := Load(Param("group"), GP64())
	acc := make([]VecVirtual, 4)
	for o := range acc {
		acc[o] = YMM()
		VXORPS(acc[o], acc[o], acc[o])
	}
	mask, shifts := YMM(), YMM()
	VPBROADCASTD(nibbleMask(), mask)
	VMOVDQU(nibbleShifts(), shifts)
	pf := prefetcher(qp[0], qs, group, 4)
	k := GP64()
	XORQ(k, k)
	end := GP64()
	Label(name + "_group")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	pf.next()
	sc := make([]VecVirtual, 4)
	offs := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: sp, Index: ss, Scale: 2}, {Base: sp, Index: ss3, Scale: 1}}
	for o := range 4 {
		sc[o] = YMM()
		VBROADCASTSS(offs[o], sc[o])
	}
	ADDQ(U8(4), sp)
	MOVQ(k, end)
	ADDQ(group, end)
	Label(name + "_loop")
	xv := YMM()
	VMOVUPS(Mem{Base: x, Index: k, Scale: 4}, xv)
	for o := range 4 {
		t := YMM()
		VPBROADCASTD(Mem{Base: qp[o]}, t)
		fp4Widen(t, shifts, mask, sc[o])
		VFMADD231PS(t, xv, acc[o])
		ADDQ(U8(4), qp[o])
	}
	ADDQ(U8(8), k)
	CMPQ(k, end)
	JL(LabelRef(name + "_loop"))
	JMP(LabelRef(name + "_group"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	for o := range 4 {
		hsum(acc[o], Mem{Base: y, Disp: 4 * o})
	}
	VZEROUPPER()
	RET()
}

// fp4Z writes fp4Dot4x1Z, fp4Dot4x1 on 16 lanes: each group's 16 values per row (e2m1 value·scale, exact)
// in one register, looked up by nibble as the AVX-512 4-bit kernel does.
func fp4Z() {
	name := "fp4Dot4x1Z"
	TEXT(name, NOSPLIT, "func(y *float32, x *float32, q *byte, qs int, scales *float32, biases *float32, ss int, n int, group int)")
	Doc(name + " is fp4Dot4x1 on 16 lanes: values looked up in each group's table of 16 (n and group multiples of 16).")
	x := Load(Param("x"), GP64())
	qs := Load(Param("qs"), GP64())
	qp := make([]GPVirtual, 4)
	qp[0] = Load(Param("q"), GP64()).(GPVirtual)
	for o := 1; o < 4; o++ {
		qp[o] = GP64()
		LEAQ(Mem{Base: qp[o-1], Index: qs, Scale: 1}, qp[o])
	}
	ss := Load(Param("ss"), GP64())
	sp := Load(Param("scales"), GP64())
	ss3 := GP64()
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	n := Load(Param("n"), GP64())
	group := Load(Param("group"), GP64())
	acc := make([]VecVirtual, 4)
	for o := range acc {
		acc[o] = ZMM()
		VXORPS(acc[o], acc[o], acc[o])
	}
	values, ctrl := ZMM(), ZMM()
	VMOVUPS(fp4Values(), values)
	VMOVDQU32(nibbleSelect(), ctrl)
	pf := prefetcher(qp[0], qs, group, 4)
	k := GP64()
	XORQ(k, k)
	end := GP64()
	Label(name + "_group")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	pf.next()
	offs := []Mem{{Base: sp}, {Base: sp, Index: ss, Scale: 1}, {Base: sp, Index: ss, Scale: 2}, {Base: sp, Index: ss3, Scale: 1}}
	table := make([]VecVirtual, 4)
	for o := range 4 {
		table[o] = ZMM()
		VBROADCASTSS(offs[o], table[o])
		VMULPS(values, table[o], table[o]) // fp4 value·scale, exact
	}
	ADDQ(U8(4), sp)
	MOVQ(k, end)
	ADDQ(group, end)
	Label(name + "_loop")
	xv := ZMM()
	VMOVUPS(Mem{Base: x, Index: k, Scale: 4}, xv)
	for o := range 4 {
		t := ZMM()
		VPMULTISHIFTQB_BCST(Mem{Base: qp[o]}, ctrl, t)
		VPERMPS(table[o], t, t)
		VFMADD231PS(t, xv, acc[o])
		ADDQ(U8(8), qp[o])
	}
	ADDQ(U8(16), k)
	CMPQ(k, end)
	JL(LabelRef(name + "_loop"))
	JMP(LabelRef(name + "_group"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	for o := range 4 {
		hsum(acc[o], Mem{Base: y, Disp: 4 * o})
	}
	VZEROUPPER()
	RET()
}

// fp4Values are the e2m1 values of codes 0..15 as float32 (bit 3 the sign; -0 for code 8): the AVX-512 table
// is scale times them, and the AVX2 kernels read the first 8 as magnitudes.
func fp4Values() Mem {
	return global("fp4Values", func() Mem {
		fv := GLOBL("fp4Values", RODATA|NOPTR)
		mag := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
		for j := range 16 {
			DATA(4*j, U32(math.Float32bits(mag[j%8])|uint32(j/8)<<31))
		}
		return fv
	})
}

// The constants of the 4-bit kernels, each defined once however many kernels use it.
var globals = map[string]Mem{}

func global(name string, define func() Mem) Mem {
	if m, ok := globals[name]; ok {
		return m
	}
	m := define()
	globals[name] = m
	return m
}

// nibbleMask is 15, broadcast by the AVX2 4-bit kernels.
func nibbleMask() Mem {
	return global("nibble", func() Mem { return ConstData("nibble", U32(15)) })
}

// nibbleShifts shifts lane j of a broadcast 32-bit word right by 4j: its nibble j to the low bits.
func nibbleShifts() Mem {
	return global("nibbleShifts", func() Mem {
		sh := GLOBL("nibbleShifts", RODATA|NOPTR)
		for j := range 8 {
			DATA(4*j, U32(4*j))
		}
		return sh
	})
}

// nibbleValues is 0, 1, ..., 15 as float32: the AVX-512 4-bit kernels' table is scale·q + bias over it.
func nibbleValues() Mem {
	return global("nibbleValues", func() Mem {
		io := GLOBL("nibbleValues", RODATA|NOPTR)
		for j := range 16 {
			DATA(4*j, U32(math.Float32bits(float32(j)))) // as bits: avo prints F32(1) as $(1), an integer
		}
		return io
	})
}

// nibbleSelect is VPMULTISHIFTQB's control: lane j's low byte takes the 8 bits from bit 4j of its 64-bit word.
func nibbleSelect() Mem {
	return global("nibbleSelect", func() Mem {
		cm := GLOBL("nibbleSelect", RODATA|NOPTR)
		for j := range 16 {
			DATA(4*j, U32(4*j))
		}
		return cm
	})
}

// nibblePairShifts shifts lanes 2i and 2i+1 of a broadcast 64-bit word right by 4i: nibble i of its low half
// and nibble i+8 of its high half to their low bits (quant4Z).
func nibblePairShifts() Mem {
	return global("nibblePairShifts", func() Mem {
		m := GLOBL("nibblePairShifts", RODATA|NOPTR)
		for j := range 16 {
			DATA(4*j, U32(4*(j/2)))
		}
		return m
	})
}

// nibblePairInputs is the VPERMPS index that loads 16 inputs in quant4Z's order: lane 2i takes input i, lane
// 2i+1 input i+8.
func nibblePairInputs() Mem {
	return global("nibblePairInputs", func() Mem {
		m := GLOBL("nibblePairInputs", RODATA|NOPTR)
		for j := range 16 {
			DATA(4*j, U32(uint32(j/2+8*(j%2))))
		}
		return m
	})
}

// storedBatch writes <kind>Dot1x<xr>: y[r*ys] = Σ_k x[r*n+k]·w[k] for one stored weight row w (bf16, f16,
// or MLX 8- or 4-bit groups) and xr input rows, the batched decode of a stored matrix. Each register of
// weights is widened or dequantized once, exactly as the four-row kernels do it (half, quant, quant4Z), and
// multiplied into every input row's accumulator, so every output has the bits those kernels give it: batched
// decode reads each weight group once per step and still equals unbatched decode. The input rows are memory
// operands (they stay in L1 across the matrix's rows); a row r is at base[r/3] + (r%3)·stride.
func storedBatch(v vec, kind string, xr int) {
	name := fmt.Sprintf("%sDot1x%d%s", kind, xr, v.suffix)
	quantized := kind == "q8" || kind == "q4" || kind == "fp4"
	switch {
	case kind == "fp4":
		TEXT(name, NOSPLIT, "func(y *float32, ys int, x *float32, q *byte, scales *float32, biases *float32, n int, group int)")
		Doc(fmt.Sprintf("%s computes y[r*ys] = Σ_k x[r*n+k]·fp4(q[k])·scale for one mxfp4 row q (its groups' widened e8m0 scales at scales; biases unused) and %d input row(s) r.", name, xr))
	case quantized:
		TEXT(name, NOSPLIT, "func(y *float32, ys int, x *float32, q *byte, scales *float32, biases *float32, n int, group int)")
		Doc(fmt.Sprintf("%s computes y[r*ys] = Σ_k x[r*n+k]·(scale·q[k] + bias) for one %s-bit row q (its groups' scales and biases at scales and biases) and %d input row(s) r.", name, kind[1:], xr))
	default:
		TEXT(name, NOSPLIT, "func(y *float32, ys int, x *float32, w *byte, n int)")
		Doc(fmt.Sprintf("%s computes y[r*ys] = Σ_k x[r*n+k]·w[k] for one %s row w and %d input row(s) r.", name, kind, xr))
	}
	n := Load(Param("n"), GP64())
	stride := GP64()
	MOVQ(n, stride)
	SHLQ(U8(2), stride)
	nb := (xr + 2) / 3
	base := make([]GPVirtual, nb)
	base[0] = Load(Param("x"), GP64()).(GPVirtual)
	for b := 1; b < nb; b++ {
		base[b] = GP64()
		LEAQ(Mem{Base: base[b-1], Index: stride, Scale: 2}, base[b])
		ADDQ(stride, base[b])
	}
	xm := func(r int) Mem {
		b, j := r/3, r%3
		if j == 0 {
			return Mem{Base: base[b]}
		}
		return Mem{Base: base[b], Index: stride, Scale: uint8(j)}
	}
	var wp GPVirtual
	if quantized {
		wp = Load(Param("q"), GP64()).(GPVirtual)
	} else {
		wp = Load(Param("w"), GP64()).(GPVirtual)
	}
	acc := make([]VecVirtual, xr)
	for r := range acc {
		acc[r] = v.reg()
		VXORPS(acc[r], acc[r], acc[r])
	}
	k := GP64() // index of the next register of weights
	XORQ(k, k)
	// widen puts the next register of weights, as float32, in a new register and advances wp past them.
	var widen func() VecVirtual
	var group, end, sp, bp GPVirtual
	if quantized {
		group = Load(Param("group"), GP64()).(GPVirtual)
		sp = Load(Param("scales"), GP64()).(GPVirtual)
		bp = Load(Param("biases"), GP64()).(GPVirtual)
		end = GP64()
	}
	// Per group (quantized): the scale and bias, or (4-bit, AVX-512) the table of the group's 16 values.
	var sc, bi, table, iota VecVirtual
	switch {
	case kind == "bf16":
		widen = func() VecVirtual {
			t := v.reg()
			VPMOVZXWD(Mem{Base: wp}, t)
			VPSLLD(U8(16), t, t)
			ADDQ(U8(2*v.lanes), wp)
			return t
		}
	case kind == "f16":
		widen = func() VecVirtual {
			t := v.reg()
			VCVTPH2PS(Mem{Base: wp}, t)
			ADDQ(U8(2*v.lanes), wp)
			return t
		}
	case kind == "q8":
		widen = func() VecVirtual {
			t := v.reg()
			VPMOVZXBD(Mem{Base: wp}, t)
			VCVTDQ2PS(t, t)
			VMULPS(sc, t, t)
			VADDPS(bi, t, t)
			ADDQ(U8(v.lanes), wp)
			return t
		}
	case kind == "q4" && v.lanes == 8:
		mask, shifts := v.reg(), v.reg()
		VPBROADCASTD(nibbleMask(), mask)
		VMOVDQU(nibbleShifts(), shifts)
		widen = func() VecVirtual {
			t := v.reg()
			VPBROADCASTD(Mem{Base: wp}, t)
			VPSRLVD(shifts, t, t)
			VPAND(mask, t, t)
			VCVTDQ2PS(t, t)
			VMULPS(sc, t, t)
			VADDPS(bi, t, t)
			ADDQ(U8(4), wp)
			return t
		}
	case kind == "fp4" && v.lanes == 8:
		mask, shifts := v.reg(), v.reg()
		VPBROADCASTD(nibbleMask(), mask)
		VMOVDQU(nibbleShifts(), shifts)
		widen = func() VecVirtual {
			t := v.reg()
			VPBROADCASTD(Mem{Base: wp}, t)
			fp4Widen(t, shifts, mask, sc)
			ADDQ(U8(4), wp)
			return t
		}
	default: // q4 and fp4, AVX-512
		iota = ZMM()
		ctrl := ZMM()
		if kind == "fp4" {
			VMOVUPS(fp4Values(), iota)
		} else {
			VMOVUPS(nibbleValues(), iota)
		}
		VMOVDQU32(nibbleSelect(), ctrl)
		widen = func() VecVirtual {
			t := ZMM()
			VPMULTISHIFTQB_BCST(Mem{Base: wp}, ctrl, t)
			VPERMPS(table, t, t)
			ADDQ(U8(8), wp)
			return t
		}
	}
	Label(name + "_group")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	if quantized {
		if kind == "fp4" && v.lanes == 16 {
			table = ZMM()
			VBROADCASTSS(Mem{Base: sp}, table)
			VMULPS(iota, table, table) // fp4 value·scale, exact
		} else if kind == "fp4" {
			sc = v.reg()
			VBROADCASTSS(Mem{Base: sp}, sc)
		} else if kind == "q4" && v.lanes == 16 {
			table = ZMM()
			b := ZMM()
			VBROADCASTSS(Mem{Base: sp}, table)
			VMULPS(iota, table, table) // scale·q, rounded
			VBROADCASTSS(Mem{Base: bp}, b)
			VADDPS(b, table, table) // + bias, rounded
		} else {
			sc, bi = v.reg(), v.reg()
			VBROADCASTSS(Mem{Base: sp}, sc)
			VBROADCASTSS(Mem{Base: bp}, bi)
		}
		ADDQ(U8(4), sp)
		ADDQ(U8(4), bp)
		MOVQ(k, end)
		ADDQ(group, end)
	} else {
		end = n.(GPVirtual)
	}
	Label(name + "_loop")
	t := widen()
	for r := range xr {
		VFMADD231PS(xm(r), t, acc[r])
	}
	for b := range base {
		ADDQ(U8(v.bytes()), base[b])
	}
	ADDQ(U8(v.lanes), k)
	CMPQ(k, end)
	JL(LabelRef(name + "_loop"))
	JMP(LabelRef(name + "_group"))
	Label(name + "_done")
	y := Load(Param("y"), GP64())
	ys := Load(Param("ys"), GP64())
	SHLQ(U8(2), ys)
	for r := range xr {
		hsum(acc[r], Mem{Base: y})
		if r+1 < xr {
			ADDQ(ys, y)
		}
	}
	VZEROUPPER()
	RET()
}

// prefetch walks the rows of a four-row quantized kernel two calls ahead: rows o+8..o+11, contiguous after
// the four being read (o+4..o+7 are the next call's, which the hardware prefetcher already has under way).
// Without it the kernel waits on memory between its bursts of compute: at one thread the 4-bit decode of the
// 100M model went from 0.60–0.64 to 0.90–0.92 of the read bound.
type prefetch struct {
	pf, step GPVirtual
	lines    int
}

// prefetcher starts a prefetch for the rows at q, qs bytes apart, of bits-bit weights in groups of group.
func prefetcher(q, qs, group Register, bits int) prefetch {
	p := prefetch{pf: GP64(), step: GP64(), lines: bits / 2}
	LEAQ(Mem{Base: q, Index: qs, Scale: 8}, p.pf)
	MOVQ(group, p.step) // 4 rows × group × bits/8 bytes
	SHLQ(U8(map[int]uint8{4: 1, 8: 2}[bits]), p.step)
	return p
}

// next prefetches the cache lines one group of the four rows takes at group size 64 (bits/2 of them: larger
// groups are covered in part, the hardware prefetcher doing the rest) and moves on by one group.
func (p prefetch) next() {
	for l := range p.lines {
		PREFETCHT0(Mem{Base: p.pf, Disp: 64 * l})
	}
	ADDQ(p.step, p.pf)
}

// splat returns a read-only vector of 16 copies of the 32-bit pattern bits, for memory operands of either
// width.
func splat(name string, bits uint32) Mem {
	return global(name, func() Mem {
		m := GLOBL(name, RODATA|NOPTR)
		for j := range 16 {
			DATA(4*j, U32(bits))
		}
		return m
	})
}

func splatF(name string, f float32) Mem { return splat(name, math.Float32bits(f)) }

// expInto sets e to exp(x) lane by lane (x is kept), Cephes' expf: x clamped to [−88.376, 89] (below, the
// result flushes to 0; from 88.38 up, n reaches 128, whose 2ⁿ is +Inf, so exp overflows as it should, a
// little early), n = round(x·log2 e) by the 1.5·2²³ trick (which leaves n in the
// low bits of the sum), r = x − n·ln 2 in two parts, exp(r) by a degree-5 polynomial, times 2ⁿ built in the
// exponent bits. Within about 2 ulp of the rounded exp.
func expInto(v vec, x, e VecVirtual) {
	t, n, r := v.reg(), v.reg(), v.reg()
	// Clamp with x the second source: a NaN x passes through (MINPS and MAXPS return that operand).
	VMOVUPS(splatF("expHi", 89), t)
	VMINPS(x, t, r)
	VMOVUPS(splatF("expLo", -88.3762626647949), t)
	VMAXPS(r, t, r)
	VMOVUPS(splatF("expMagic", 12582912), t) // 1.5·2²³
	VFMADD231PS(splatF("log2e", 1.44269504088896341), r, t)
	VSUBPS(splatF("expMagic", 12582912), t, n)          // n = round(r·log2 e)
	VFNMADD231PS(splatF("ln2hi", 0.693359375), n, r)    // r −= n·ln2hi
	VFNMADD231PS(splatF("ln2lo", -2.12194440e-4), n, r) // r −= n·ln2lo
	VMOVUPS(splatF("expP0", 1.9875691500e-4), e)
	VFMADD213PS(splatF("expP1", 1.3981999507e-3), r, e)
	VFMADD213PS(splatF("expP2", 8.3334519073e-3), r, e)
	VFMADD213PS(splatF("expP3", 4.1665795894e-2), r, e)
	VFMADD213PS(splatF("expP4", 1.6666665459e-1), r, e)
	VFMADD213PS(splatF("expP5", 5.0000001201e-1), r, e)
	VMULPS(r, r, n)                // n is done with as a float: its integer is in t's low bits
	VFMADD213PS(r, n, e)           // e = p·r² + r
	VADDPS(splatF("one", 1), e, e) // + 1
	VPADDD(splat("expBias", 127-math.Float32bits(12582912)), t, t)
	VPSLLD(U8(23), t, t) // 2ⁿ
	VMULPS(t, e, e)
}

// silu writes f32SiLU: g[i] = g[i] / (1 + exp(−g[i])) · u[i] for i < n (a multiple of the lanes), the
// gated MLP's activation, with expInto's exp.
func silu(v vec) {
	name := "f32SiLU" + v.suffix
	// Not g: the Go assembler's name of the goroutine register.
	TEXT(name, NOSPLIT, "func(gate *float32, up *float32, n int)")
	Doc(name + " computes gate[i] = gate[i]/(1+exp(-gate[i]))·up[i] for i < n (a multiple of the lanes), exp to about 2 ulp.")
	g := Load(Param("gate"), GP64())
	u := Load(Param("up"), GP64())
	n := Load(Param("n"), GP64())
	k := GP64()
	XORQ(k, k)
	Label(name + "_loop")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	gv, x, e := v.reg(), v.reg(), v.reg()
	VMOVUPS(Mem{Base: g, Index: k, Scale: 4}, gv)
	if v.lanes == 16 {
		VPXORD(splat("signBit", 0x80000000), gv, x) // −g (VXORPS on zmm would need AVX-512 DQ)
	} else {
		VXORPS(splat("signBit", 0x80000000), gv, x)
	}
	expInto(v, x, e)
	VADDPS(splatF("one", 1), e, e)
	VDIVPS(e, gv, gv)
	VMULPS(Mem{Base: u, Index: k, Scale: 4}, gv, gv)
	VMOVUPS(gv, Mem{Base: g, Index: k, Scale: 4})
	ADDQ(U8(v.lanes), k)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// expShift writes f32ExpShift: s[i] = exp(s[i] − mx) for i < n (a multiple of the lanes), the softmax's
// exponentials, with expInto's exp.
func expShift(v vec) {
	name := "f32ExpShift" + v.suffix
	TEXT(name, NOSPLIT, "func(s *float32, mx float32, n int)")
	Doc(name + " computes s[i] = exp(s[i]-mx) for i < n (a multiple of the lanes), exp to about 2 ulp.")
	sp := Load(Param("s"), GP64())
	m := Load(Param("mx"), XMM())
	n := Load(Param("n"), GP64())
	mv := v.reg()
	VBROADCASTSS(m, mv)
	k := GP64()
	XORQ(k, k)
	Label(name + "_loop")
	CMPQ(k, n)
	JGE(LabelRef(name + "_done"))
	x, e := v.reg(), v.reg()
	VMOVUPS(Mem{Base: sp, Index: k, Scale: 4}, x)
	VSUBPS(mv, x, x)
	expInto(v, x, e)
	VMOVUPS(e, Mem{Base: sp, Index: k, Scale: 4})
	ADDQ(U8(v.lanes), k)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// deltaRows writes f32DeltaRows<rows>, the delta rule of one token (Gated DeltaNet, docs/hybrid-design.md
// §1.2) on rows consecutive rows of a value head's state, each n floats (n a multiple of 8) with k and q as
// long: for each row j, r ← α·r (rounded), u = r·k, δ = β·(v[j] − u) (rounded twice, as Go computes it),
// r ← r + δ·k (one fused multiply-add per element), o[j] = r·q. The dot products follow the package's rule (8
// lanes of fused multiply-adds in index order, hsum's tree), and rows never mix, so a row has the same bits
// whichever kernel runs it. Several rows per call share each load of k and q and give the adds independent
// chains to overlap.
func deltaRows(rows int) {
	name := fmt.Sprintf("f32DeltaRows%d", rows)
	TEXT(name, NOSPLIT, "func(s *float32, k *float32, q *float32, v *float32, o *float32, n int, alpha float32, beta float32)")
	Doc(fmt.Sprintf("%s runs the delta rule of one token on %d state row(s) of n floats (n a multiple of 8) starting at s: r = alpha·r; u = r·k; d = beta·(v[j]-u); r += d·k; o[j] = r·q.", name, rows))
	n := Load(Param("n"), GP64())
	stride := GP64()
	MOVQ(n, stride)
	SHLQ(U8(2), stride)
	rp := make([]GPVirtual, rows)
	rp[0] = Load(Param("s"), GP64()).(GPVirtual)
	for j := 1; j < rows; j++ {
		rp[j] = GP64()
		LEAQ(Mem{Base: rp[j-1], Index: stride, Scale: 1}, rp[j])
	}
	kp := Load(Param("k"), GP64())
	alpha := YMM()
	VBROADCASTSS(Load(Param("alpha"), XMM()), alpha)
	acc := make([]VecVirtual, rows)
	for j := range acc {
		acc[j] = YMM()
		VXORPS(acc[j], acc[j], acc[j])
	}
	i := GP64()
	XORQ(i, i)
	Label(name + "_decay")
	CMPQ(i, stride)
	JGE(LabelRef(name + "_decayed"))
	kv := YMM()
	VMOVUPS(Mem{Base: kp, Index: i, Scale: 1}, kv)
	for j := range rows {
		t := YMM()
		VMULPS(Mem{Base: rp[j], Index: i, Scale: 1}, alpha, t)
		VMOVUPS(t, Mem{Base: rp[j], Index: i, Scale: 1})
		VFMADD231PS(kv, t, acc[j])
	}
	ADDQ(U8(32), i)
	JMP(LabelRef(name + "_decay"))
	Label(name + "_decayed")
	// δ_j = β·(v[j] − u_j), broadcast.
	vp := Load(Param("v"), GP64())
	beta := Load(Param("beta"), XMM())
	delta := make([]VecVirtual, rows)
	for j := range rows {
		u := hsum8Reg(acc[j], false)
		d := XMM()
		VMOVSS(Mem{Base: vp, Disp: 4 * j}, d)
		VSUBSS(u, d, d)
		VMULSS(beta, d, d)
		delta[j] = YMM()
		VBROADCASTSS(d, delta[j])
		VXORPS(acc[j], acc[j], acc[j])
	}
	qp := Load(Param("q"), GP64())
	XORQ(i, i)
	Label(name + "_write")
	CMPQ(i, stride)
	JGE(LabelRef(name + "_done"))
	kv, qv := YMM(), YMM()
	VMOVUPS(Mem{Base: kp, Index: i, Scale: 1}, kv)
	VMOVUPS(Mem{Base: qp, Index: i, Scale: 1}, qv)
	for j := range rows {
		t := YMM()
		VMOVUPS(Mem{Base: rp[j], Index: i, Scale: 1}, t)
		VFMADD231PS(kv, delta[j], t)
		VMOVUPS(t, Mem{Base: rp[j], Index: i, Scale: 1})
		VFMADD231PS(qv, t, acc[j])
	}
	ADDQ(U8(32), i)
	JMP(LabelRef(name + "_write"))
	Label(name + "_done")
	op := Load(Param("o"), GP64())
	for j := range rows {
		hsum(acc[j], Mem{Base: op, Disp: 4 * j})
	}
	VZEROUPPER()
	RET()
}
