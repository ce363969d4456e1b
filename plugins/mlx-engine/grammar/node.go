package grammar

import (
	"fmt"
	"unicode/utf8"
)

// Node is a piece of grammar: a language of byte strings built from the combinators below. Nodes are immutable
// values and may be shared between grammars. The zero Node matches the empty string.
type Node struct{ n *node }

type kind uint8

const (
	kEmpty  kind = iota // the empty string
	kNever              // nothing: a branch that can never be taken (pruned by Compile)
	kLit                // a byte string
	kClass              // one byte out of a set
	kSeq                // kids in order
	kAlt                // one of kids
	kRepeat             // kids[0] between min and max times (max < 0: unbounded), sep between
	kRule               // kids[0] compiled once as its own rule, entered by a call: shares it between uses
	kObject             // a JSON object with properties in order (see objectNode)
)

// node is the internal form. Kinds with children keep them in kids; kRepeat keeps its separator in sep.
type node struct {
	kind     kind
	lit      []byte
	set      byteSet
	kids     []*node
	sep      *node
	min, max int
	obj      *objectSpec

	special bool // a Special token's bytes: the one literal allowed to hold specialMark

	// Set by finish when the node is made, so that nodes are immutable afterwards and may be shared between
	// goroutines.
	null bool // matches the empty string
	sz   int  // estimated NFA states when inlined
}

var (
	emptyNode = finish(&node{kind: kEmpty})
	neverNode = finish(&node{kind: kNever})
)

func (n Node) get() *node {
	if n.n == nil {
		return emptyNode
	}
	return n.n
}

// Literal matches s exactly.
func Literal(s string) Node { return Node{lit([]byte(s))} }

// Special matches one special (control) token of the vocabulary by its text, such as Mistral's "[TOOL_CALLS]".
// Special tokens are not text a grammar can spell out byte by byte: the Index gives each the bytes
// specialMark+text+specialMark, which no UTF-8 text contains, and this node matches exactly those. A Matcher
// refuses to start on an Index that has no special token with this text.
func Special(text string) Node {
	b := make([]byte, 0, len(text)+2)
	b = append(b, specialMark)
	b = append(b, text...)
	b = append(b, specialMark)
	n := lit(b)
	n.special = true
	return Node{n}
}

// specialMark (0xFF) never occurs in UTF-8, so bytes that contain it can only come from a special token.
const specialMark = 0xFF

// Seq matches its nodes one after another.
func Seq(nodes ...Node) Node {
	kids := make([]*node, 0, len(nodes))
	for _, n := range nodes {
		kids = append(kids, n.get())
	}
	return Node{seq(kids...)}
}

// Alt matches any one of its nodes. Alt() matches nothing.
func Alt(nodes ...Node) Node {
	kids := make([]*node, 0, len(nodes))
	for _, n := range nodes {
		kids = append(kids, n.get())
	}
	return Node{alt(kids...)}
}

// Optional matches n or the empty string.
func Optional(n Node) Node { return Node{repeat(n.get(), 0, 1, nil)} }

// Repeat matches n at least min and at most max times, with sep between consecutive repetitions (the zero
// Node for none). max < 0 means no upper bound; it should then only be used on nodes that cannot match the
// empty string, or the output need not progress.
func Repeat(n Node, min, max int, sep Node) Node {
	if min < 0 {
		min = 0
	}
	var s *node
	if sep.n != nil {
		s = sep.n
	}
	return Node{repeat(n.get(), min, max, s)}
}

// String describes a node for debugging; it is not a grammar syntax.
func (n Node) String() string { return n.get().String() }

func (n *node) String() string {
	switch n.kind {
	case kEmpty:
		return `""`
	case kNever:
		return "never"
	case kLit:
		if utf8.Valid(n.lit) {
			return fmt.Sprintf("%q", n.lit)
		}
		return fmt.Sprintf("%x", n.lit)
	case kClass:
		return n.set.String()
	case kSeq, kAlt:
		s := "seq("
		if n.kind == kAlt {
			s = "alt("
		}
		for i, k := range n.kids {
			if i > 0 {
				s += " "
			}
			s += k.String()
		}
		return s + ")"
	case kRepeat:
		return fmt.Sprintf("repeat(%v, %d, %d, %v)", n.kids[0], n.min, n.max, n.sep)
	case kRule:
		return "rule(...)"
	case kObject:
		return fmt.Sprintf("object(%d properties)", len(n.obj.props))
	}
	return "?"
}

func lit(b []byte) *node {
	if len(b) == 0 {
		return emptyNode
	}
	return finish(&node{kind: kLit, lit: b})
}

func class(s byteSet) *node {
	if s.empty() {
		return neverNode
	}
	return finish(&node{kind: kClass, set: s})
}

// seq flattens nested sequences and drops empty strings; a never anywhere makes the whole never.
func seq(kids ...*node) *node {
	out := make([]*node, 0, len(kids))
	for _, k := range kids {
		switch k.kind {
		case kEmpty:
		case kNever:
			return neverNode
		case kSeq:
			out = append(out, k.kids...)
		default:
			out = append(out, k)
		}
	}
	switch len(out) {
	case 0:
		return emptyNode
	case 1:
		return out[0]
	}
	return finish(&node{kind: kSeq, kids: out})
}

// alt drops never branches, so that an alternative that cannot be taken costs nothing.
func alt(kids ...*node) *node {
	out := make([]*node, 0, len(kids))
	for _, k := range kids {
		switch k.kind {
		case kNever:
		case kAlt:
			out = append(out, k.kids...)
		default:
			out = append(out, k)
		}
	}
	switch len(out) {
	case 0:
		return neverNode
	case 1:
		return out[0]
	}
	return finish(&node{kind: kAlt, kids: out})
}

func repeat(body *node, min, max int, sep *node) *node {
	if max >= 0 && max < min {
		return neverNode
	}
	if max == 0 {
		return emptyNode
	}
	if body.kind == kNever {
		if min == 0 {
			return emptyNode
		}
		return neverNode
	}
	if sep != nil && sep.kind == kEmpty {
		sep = nil
	}
	if min == 1 && max == 1 {
		return body
	}
	return finish(&node{kind: kRepeat, kids: []*node{body}, min: min, max: max, sep: sep})
}

func optional(n *node) *node { return repeat(n, 0, 1, nil) }

// rule makes body a rule of its own: Compile builds it once, and every use enters it by a call. That keeps the
// automaton small where a big piece is used many times (array items, recursion), at the price of tokens that
// cross the rule's end being checked against the stack at run time.
func rule(body *node) *node {
	if body.kind == kNever {
		return neverNode
	}
	return finish(&node{kind: kRule, kids: []*node{body}})
}

func (n *node) nullable() bool { return n.null }
func (n *node) size() int      { return n.sz }

// maxSize saturates size estimates so that huge repetitions do not overflow.
const maxSize = 1 << 40

func satAdd(a, b int) int {
	if a+b > maxSize {
		return maxSize
	}
	return a + b
}

func satMul(a, b int) int {
	if a != 0 && b > maxSize/a {
		return maxSize
	}
	return min(a*b, maxSize)
}

// finish computes n's nullability and size from its children, which are finished already.
func finish(n *node) *node {
	s := 1
	switch n.kind {
	case kEmpty:
		n.null = true
	case kLit:
		s = len(n.lit) + 1
	case kClass:
		s = 2
	case kSeq:
		n.null = true
		for _, k := range n.kids {
			n.null = n.null && k.null
			s = satAdd(s, k.sz)
		}
	case kAlt:
		for _, k := range n.kids {
			n.null = n.null || k.null
			s = satAdd(s, k.sz)
		}
	case kRepeat:
		n.null = n.min == 0 || n.kids[0].null
		per := n.kids[0].sz
		if n.sep != nil {
			per = satAdd(per, n.sep.sz)
		}
		copies := n.max
		if copies < 0 {
			copies = n.min + 1
		}
		s = satAdd(s, satMul(per, copies))
	case kRule:
		n.null = n.kids[0].null
		s = 2
	case kObject:
		for _, p := range n.obj.props {
			s = satAdd(s, satAdd(len(p.key)+4, p.value.sz))
		}
		s = satAdd(s, satMul(n.obj.ws.sz, 2*len(n.obj.props)+2))
	}
	n.sz = s
	return n
}
