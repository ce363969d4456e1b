package grammar

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"unicode"
)

// patternNode turns a JSON Schema pattern into the content of a JSON string (without the quotes) whose
// decoded text the pattern matches. Patterns are read with Go's RE2 syntax, which covers the ECMA-262 subset
// schemas use; lookaround and backreferences fail to parse and are refused. Like ECMA-262, a pattern is
// unanchored: without ^ it may start anywhere, without $ end anywhere.
//
// Generated characters are kept where ECMA-262 and RE2 agree: within the Basic Multilingual Plane (ECMA
// counts an astral character as two), and never a character that ECMA's \s counts as whitespace but RE2's
// does not (so \S means the same in both). Characters that JSON must escape are generated escaped.
func patternNode(pattern string) (*node, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %v", pattern, err)
	}
	var branches []*syntax.Regexp
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	} else {
		branches = []*syntax.Regexp{re}
	}
	anyChars := repeat(stringChar(safeRanges(nil)), 0, -1, nil)
	var alts []*node
	for _, b := range branches {
		subs := []*syntax.Regexp{b}
		if b.Op == syntax.OpConcat {
			subs = b.Sub
		}
		start, end := false, false
		if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
			start, subs = true, subs[1:]
		}
		if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
			end, subs = true, subs[:len(subs)-1]
		}
		parts := make([]*node, 0, len(subs)+2)
		if !start {
			parts = append(parts, anyChars)
		}
		for _, s := range subs {
			n, err := regexNode(s)
			if err != nil {
				return nil, fmt.Errorf("pattern %q: %v", pattern, err)
			}
			parts = append(parts, n)
		}
		if !end {
			parts = append(parts, anyChars)
		}
		alts = append(alts, seq(parts...))
	}
	return alt(alts...), nil
}

// ecmaOnlySpace is what ECMA-262's \s matches beyond RE2's [\t\n\f\r ].
var ecmaOnlySpace = []rune{0x0B, 0xA0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007,
	0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF}

// safeRanges intersects ranges (nil: everything) with the BMP and removes ecmaOnlySpace.
func safeRanges(ranges []runeRange) []runeRange {
	if ranges == nil {
		ranges = []runeRange{{0, 0x10FFFF}}
	}
	var out []runeRange
	for _, r := range ranges {
		lo, hi := r.lo, min(r.hi, 0xFFFF)
		for _, c := range ecmaOnlySpace {
			if c < lo || c > hi {
				continue
			}
			if c > lo {
				out = append(out, runeRange{lo, c - 1})
			}
			lo = c + 1
		}
		if lo <= hi {
			out = append(out, runeRange{lo, hi})
		}
	}
	return out
}

func charsNode(ranges []runeRange) *node {
	r := safeRanges(ranges)
	if len(r) == 0 {
		return neverNode
	}
	return stringChar(r)
}

func regexNode(re *syntax.Regexp) (*node, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return neverNode, nil
	case syntax.OpEmptyMatch:
		return emptyNode, nil
	case syntax.OpLiteral:
		kids := make([]*node, 0, len(re.Rune))
		for _, r := range re.Rune {
			rs := []runeRange{{r, r}}
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					rs = append(rs, runeRange{f, f})
				}
			}
			kids = append(kids, charsNode(rs))
		}
		return seq(kids...), nil
	case syntax.OpCharClass:
		var rs []runeRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			rs = append(rs, runeRange{re.Rune[i], re.Rune[i+1]})
		}
		return charsNode(rs), nil
	case syntax.OpAnyCharNotNL:
		// ECMA's '.' stops at every line terminator, not just '\n'.
		return charsNode([]runeRange{{0, 0x09}, {0x0B, 0x0C}, {0x0E, 0x2027}, {0x202A, 0x10FFFF}}), nil
	case syntax.OpAnyChar:
		return charsNode(nil), nil
	case syntax.OpCapture:
		return regexNode(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := regexNode(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return repeat(sub, 0, -1, nil), nil
		case syntax.OpPlus:
			return repeat(sub, 1, -1, nil), nil
		case syntax.OpQuest:
			return repeat(sub, 0, 1, nil), nil
		}
		return repeat(sub, re.Min, re.Max, nil), nil
	case syntax.OpConcat, syntax.OpAlternate:
		kids := make([]*node, 0, len(re.Sub))
		for _, s := range re.Sub {
			n, err := regexNode(s)
			if err != nil {
				return nil, err
			}
			kids = append(kids, n)
		}
		if re.Op == syntax.OpConcat {
			return seq(kids...), nil
		}
		return alt(kids...), nil
	case syntax.OpBeginText, syntax.OpEndText, syntax.OpBeginLine, syntax.OpEndLine:
		return nil, errors.New("anchors are only supported at the start and end of the pattern")
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, errors.New("word boundaries are not supported")
	}
	return nil, fmt.Errorf("regex operator %v is not supported", re.Op)
}
