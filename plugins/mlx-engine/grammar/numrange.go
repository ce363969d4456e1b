package grammar

import (
	"math/big"
	"strconv"
	"strings"
)

// maxMagnitude is the largest integer part a number may have (IntegerDigits nines).
const maxMagnitude = 999_999_999_999_999

// numberRange reads minimum, maximum, exclusiveMinimum and exclusiveMaximum as integer bounds on the
// integer part: lo = ceil(minimum) or floor(exclusiveMinimum)+1, hi = floor(maximum) or
// ceil(exclusiveMaximum)-1. ok is false when the schema has none of them.
func numberRange(v *jval, ptr string) (lo, hi int64, ok bool, err error) {
	lo, hi = -maxMagnitude, maxMagnitude
	for _, kw := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		n, has := v.get(kw)
		if !has {
			continue
		}
		ok = true
		if n.kind != 'n' {
			return 0, 0, false, malformed(pointerJoin(ptr, kw), kw, "must be a number")
		}
		r, good := new(big.Rat).SetString(string(n.num))
		if !good {
			return 0, 0, false, malformed(pointerJoin(ptr, kw), kw, "must be a number")
		}
		switch kw {
		case "minimum":
			lo = max(lo, clampInt(ratCeil(r)))
		case "exclusiveMinimum":
			lo = max(lo, clampInt(new(big.Int).Add(ratFloor(r), big.NewInt(1))))
		case "maximum":
			hi = min(hi, clampInt(ratFloor(r)))
		case "exclusiveMaximum":
			hi = min(hi, clampInt(new(big.Int).Sub(ratCeil(r), big.NewInt(1))))
		}
	}
	return lo, hi, ok, nil
}

// ratFloor rounds down: DivMod is Euclidean division, which for a positive denominator (as Rat keeps it) is
// the floor.
func ratFloor(r *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	return q
}

func ratCeil(r *big.Rat) *big.Int {
	q := ratFloor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// clampInt keeps a bound within what numbers can reach anyway, one past the largest magnitude.
func clampInt(x *big.Int) int64 {
	if x.Cmp(big.NewInt(maxMagnitude+1)) > 0 {
		return maxMagnitude + 1
	}
	if x.Cmp(big.NewInt(-maxMagnitude-1)) < 0 {
		return -maxMagnitude - 1
	}
	return x.Int64()
}

// intRange is the canonical JSON integers in [lo, hi] ("-0" left out).
func intRange(lo, hi int64) *node {
	lo, hi = max(lo, -maxMagnitude), min(hi, maxMagnitude)
	if lo > hi {
		return neverNode
	}
	var alts []*node
	if hi >= 0 {
		alts = append(alts, uintRange(max(lo, 0), hi))
	}
	if lo < 0 {
		alts = append(alts, seq(litS("-"), uintRange(max(1, -hi), -lo)))
	}
	return alt(alts...)
}

// numRange is JSON numbers whose value is in [lo, hi]: the integers, and decimals I.F (no exponent) whose
// interval [I, I+1) (or (-(I+1), -I] for negatives) lies inside. A decimal just below hi+1 such as 4.5 for
// hi = 4 is left out, which keeps every output inside the bounds.
func numRange(lo, hi int64) *node {
	lo, hi = max(lo, -maxMagnitude), min(hi, maxMagnitude)
	if lo > hi {
		return neverNode
	}
	return alt(
		intRange(lo, hi),
		seq(uintRange(max(lo, 0), hi-1), fracNode),
		seq(litS("-"), uintRange(max(0, -hi), -lo-1), fracNode),
	)
}

// uintRange is the canonical decimal digits of the integers in [a, b], 0 <= a.
func uintRange(a, b int64) *node {
	if a > b || b < 0 {
		return neverNode
	}
	a = max(a, 0)
	var alts []*node
	la, lb := len(strconv.FormatInt(a, 10)), len(strconv.FormatInt(b, 10))
	for l := la; l <= lb; l++ {
		lo, hi := a, b
		if l > la {
			lo = pow10(l - 1)
		}
		if l < lb {
			hi = pow10(l) - 1
		}
		alts = append(alts, sameLength(strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)))
	}
	return alt(alts...)
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLength matches the digit strings from x to y, of equal length, digit by digit.
func sameLength(x, y string) *node {
	if x == "" {
		return emptyNode
	}
	if x[0] == y[0] {
		return seq(lit([]byte{x[0]}), sameLength(x[1:], y[1:]))
	}
	rest := len(x) - 1
	nines, zeros := strings.Repeat("9", rest), strings.Repeat("0", rest)
	if x[1:] == zeros && y[1:] == nines {
		return seq(class(rangeSet(x[0], y[0])), digits(rest))
	}
	alts := []*node{seq(lit([]byte{x[0]}), sameLength(x[1:], nines))}
	if x[0]+1 <= y[0]-1 {
		alts = append(alts, seq(class(rangeSet(x[0]+1, y[0]-1)), digits(rest)))
	}
	alts = append(alts, seq(lit([]byte{y[0]}), sameLength(zeros, y[1:])))
	return alt(alts...)
}
