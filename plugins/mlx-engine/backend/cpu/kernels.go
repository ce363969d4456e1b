package cpu

// The matrix kernels. Every output element is a dot product summed in one accumulator in index order,
// whatever tile computes it, so a row's result does not depend on how many rows share the call: batched and
// unbatched Forward agree bit for bit, and so do chunked and one-shot prefill. Speed comes from computing
// several independent dot products at once (8 accumulators hide the add latency; each loaded weight is used
// for every input row of the tile) and from 4-way unrolled loops whose bounds checks the compiler removes
// (one reslice per operand per iteration; see `go build -gcflags=-d=ssa/check_bce`).
//
// Every product is rounded before it is added, float32(x*w): the Go spec lets the compiler fuse x*w + s into one
// multiply-add without the intermediate rounding, and it does so on arm64 and with GOAMD64=v3, but only where its
// pattern matching happens to apply (a product whose operand is a memory load may stay unfused on amd64). A
// kernel that fused and one that did not would make batched and unbatched results differ; the explicit
// conversion forbids the fusion everywhere, so every architecture computes the same thing in every kernel. (On
// amd64 with the default GOAMD64=v1 nothing is fused anyway and the conversion costs nothing.)

// dot8 returns the dot products of x with eight rows of w starting at w[0], each len(x) long.
func dot8(x, w []float32) (s0, s1, s2, s3, s4, s5, s6, s7 float32) {
	n := len(x)
	w0, w1, w2, w3 := w[0*n:1*n], w[1*n:2*n], w[2*n:3*n], w[3*n:4*n]
	w4, w5, w6, w7 := w[4*n:5*n], w[5*n:6*n], w[6*n:7*n], w[7*n:8*n]
	k := 0
	for ; k+4 <= n; k += 4 {
		xs := x[k : k+4 : k+4]
		a, b, c, d := w0[k:k+4:k+4], w1[k:k+4:k+4], w2[k:k+4:k+4], w3[k:k+4:k+4]
		s0 += float32(xs[0] * a[0])
		s1 += float32(xs[0] * b[0])
		s2 += float32(xs[0] * c[0])
		s3 += float32(xs[0] * d[0])
		s0 += float32(xs[1] * a[1])
		s1 += float32(xs[1] * b[1])
		s2 += float32(xs[1] * c[1])
		s3 += float32(xs[1] * d[1])
		s0 += float32(xs[2] * a[2])
		s1 += float32(xs[2] * b[2])
		s2 += float32(xs[2] * c[2])
		s3 += float32(xs[2] * d[2])
		s0 += float32(xs[3] * a[3])
		s1 += float32(xs[3] * b[3])
		s2 += float32(xs[3] * c[3])
		s3 += float32(xs[3] * d[3])
		e, f, g, h := w4[k:k+4:k+4], w5[k:k+4:k+4], w6[k:k+4:k+4], w7[k:k+4:k+4]
		s4 += float32(xs[0] * e[0])
		s5 += float32(xs[0] * f[0])
		s6 += float32(xs[0] * g[0])
		s7 += float32(xs[0] * h[0])
		s4 += float32(xs[1] * e[1])
		s5 += float32(xs[1] * f[1])
		s6 += float32(xs[1] * g[1])
		s7 += float32(xs[1] * h[1])
		s4 += float32(xs[2] * e[2])
		s5 += float32(xs[2] * f[2])
		s6 += float32(xs[2] * g[2])
		s7 += float32(xs[2] * h[2])
		s4 += float32(xs[3] * e[3])
		s5 += float32(xs[3] * f[3])
		s6 += float32(xs[3] * g[3])
		s7 += float32(xs[3] * h[3])
	}
	for ; k < n; k++ {
		v := x[k]
		s0 += float32(v * w0[k])
		s1 += float32(v * w1[k])
		s2 += float32(v * w2[k])
		s3 += float32(v * w3[k])
		s4 += float32(v * w4[k])
		s5 += float32(v * w5[k])
		s6 += float32(v * w6[k])
		s7 += float32(v * w7[k])
	}
	return
}

// dot1 is the dot product of x and w (len(w) >= len(x)).
func dot1(x, w []float32) (s float32) {
	w = w[:len(x)]
	for k, v := range x {
		s += float32(v * w[k])
	}
	return s
}

// dot4x2 returns the dot products of two input rows (x0, x1) with four weight rows starting at w[0].
func dot4x2(x0, x1, w []float32) (s00, s01, s02, s03, s10, s11, s12, s13 float32) {
	n := len(x0)
	x1 = x1[:n]
	w0, w1, w2, w3 := w[0*n:1*n], w[1*n:2*n], w[2*n:3*n], w[3*n:4*n]
	k := 0
	for ; k+2 <= n; k += 2 {
		p, q := x0[k:k+2:k+2], x1[k:k+2:k+2]
		a, b, c, d := w0[k:k+2:k+2], w1[k:k+2:k+2], w2[k:k+2:k+2], w3[k:k+2:k+2]
		p0, q0 := p[0], q[0]
		v := a[0]
		s00 += float32(p0 * v)
		s10 += float32(q0 * v)
		v = b[0]
		s01 += float32(p0 * v)
		s11 += float32(q0 * v)
		v = c[0]
		s02 += float32(p0 * v)
		s12 += float32(q0 * v)
		v = d[0]
		s03 += float32(p0 * v)
		s13 += float32(q0 * v)
		p1, q1 := p[1], q[1]
		v = a[1]
		s00 += float32(p1 * v)
		s10 += float32(q1 * v)
		v = b[1]
		s01 += float32(p1 * v)
		s11 += float32(q1 * v)
		v = c[1]
		s02 += float32(p1 * v)
		s12 += float32(q1 * v)
		v = d[1]
		s03 += float32(p1 * v)
		s13 += float32(q1 * v)
	}
	for ; k < n; k++ {
		u, v := x0[k], x1[k]
		s00 += float32(u * w0[k])
		s01 += float32(u * w1[k])
		s02 += float32(u * w2[k])
		s03 += float32(u * w3[k])
		s10 += float32(v * w0[k])
		s11 += float32(v * w1[k])
		s12 += float32(v * w2[k])
		s13 += float32(v * w3[k])
	}
	return
}

// matmulRowsGo computes y[r][o] = Σ_k x[r][k]·W[o][k] for all rows r < rows and outputs o in [o0, o1), where x is
// [rows, in], y is [rows, out] (row stride out) and w holds rows [o0, o1) of the [out, in] matrix W: the whole
// matrix sliced from row o0, or a tile expanded from a stored format. Every output is one sum over k in the same
// order whatever rows is, so a sequence's results do not depend on what it is batched with.
func matmulRowsGo(y, x, w []float32, rows, in, out, o0, o1 int) {
	if rows == 1 {
		xr := x[:in]
		o := o0
		for ; o+8 <= o1; o += 8 {
			s0, s1, s2, s3, s4, s5, s6, s7 := dot8(xr, w[(o-o0)*in:(o-o0+8)*in])
			yy := y[o : o+8 : o+8]
			yy[0], yy[1], yy[2], yy[3], yy[4], yy[5], yy[6], yy[7] = s0, s1, s2, s3, s4, s5, s6, s7
		}
		for ; o < o1; o++ {
			y[o] = dot1(xr, w[(o-o0)*in:(o-o0+1)*in])
		}
		return
	}
	// Tiles of 4 weight rows × 2 input rows; a block of weight rows stays in cache while all input rows pass.
	const block = 64
	for b0 := o0; b0 < o1; b0 += block {
		b1 := min(b0+block, o1)
		r := 0
		for ; r+2 <= rows; r += 2 {
			x0, x1 := x[r*in:(r+1)*in], x[(r+1)*in:(r+2)*in]
			y0, y1 := y[r*out:(r+1)*out], y[(r+1)*out:(r+2)*out]
			o := b0
			for ; o+4 <= b1; o += 4 {
				s00, s01, s02, s03, s10, s11, s12, s13 := dot4x2(x0, x1, w[(o-o0)*in:(o-o0+4)*in])
				a, b := y0[o:o+4:o+4], y1[o:o+4:o+4]
				a[0], a[1], a[2], a[3] = s00, s01, s02, s03
				b[0], b[1], b[2], b[3] = s10, s11, s12, s13
			}
			for ; o < b1; o++ {
				y0[o] = dot1(x0, w[(o-o0)*in:(o-o0+1)*in])
				y1[o] = dot1(x1, w[(o-o0)*in:(o-o0+1)*in])
			}
		}
		if r < rows {
			xr, yr := x[r*in:(r+1)*in], y[r*out:(r+1)*out]
			o := b0
			for ; o+8 <= b1; o += 8 {
				s0, s1, s2, s3, s4, s5, s6, s7 := dot8(xr, w[(o-o0)*in:(o-o0+8)*in])
				yy := yr[o : o+8 : o+8]
				yy[0], yy[1], yy[2], yy[3], yy[4], yy[5], yy[6], yy[7] = s0, s1, s2, s3, s4, s5, s6, s7
			}
			for ; o < b1; o++ {
				yr[o] = dot1(xr, w[(o-o0)*in:(o-o0+1)*in])
			}
		}
	}
}
