package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Options configure the JSON grammars (AnyJSON, AnyJSONObject, JSONSchema, ToolCallObject). The zero value is
// the default.
type Options struct {
	// Strict makes an object schema without additionalProperties mean additionalProperties: false, as OpenAI's
	// strict mode does. Without it such an object still only gets the properties it lists (any output is
	// valid), but one that lists none may hold any members.
	Strict bool
	// Whitespace is the most whitespace bytes (space, tab, newline, carriage return) allowed in one run. Runs
	// may come after '{', '[', ',' and ':' and before '}' and ']', which is where pretty-printers put them,
	// and nowhere else (not before ':' or ','). Bounding it keeps a model from emitting whitespace forever.
	// 0 means DefaultWhitespace; NoWhitespace allows none.
	Whitespace int
	// MaxDepth bounds how deeply values nest below the top value (which is depth 0); 0 means
	// DefaultMaxDepth. Arbitrary JSON and recursive schemas are cut off there: deeper containers must be empty.
	MaxDepth int
}

// Defaults and bounds of the JSON grammars.
const (
	DefaultWhitespace = 1
	NoWhitespace      = -1
	MaxWhitespace     = 64
	DefaultMaxDepth   = 16

	// IntegerDigits bounds the digits before the decimal point: 15 keeps every integer exactly representable
	// as a float64 (2^53 has 16 digits), which is how most clients read JSON numbers.
	IntegerDigits = 15
	// FractionDigits bounds the digits after the decimal point.
	FractionDigits = 15
	// ExponentDigits bounds the exponent's digits: 1e99 still fits a float64; 1e999 would not.
	ExponentDigits = 2
)

func (o Options) resolved() (Options, error) {
	switch {
	case o.Whitespace == 0:
		o.Whitespace = DefaultWhitespace
	case o.Whitespace == NoWhitespace:
		o.Whitespace = 0
	case o.Whitespace < 0 || o.Whitespace > MaxWhitespace:
		return o, fmt.Errorf("grammar: Whitespace %d out of range (NoWhitespace, or 0 to %d)", o.Whitespace, MaxWhitespace)
	}
	switch {
	case o.MaxDepth == 0:
		o.MaxDepth = DefaultMaxDepth
	case o.MaxDepth < 0 || o.MaxDepth > 256:
		return o, fmt.Errorf("grammar: MaxDepth %d out of range (0 to 256)", o.MaxDepth)
	}
	return o, nil
}

// objectSpec is a JSON object whose properties come in the order listed (see nfaBuilder.objectFrag).
type objectSpec struct {
	props []objProp
	ws    *node
}

type objProp struct {
	key      []byte // the name as a JSON string, quotes included
	value    *node
	required bool
}

func objectNode(o *objectSpec) *node { return finish(&node{kind: kObject, obj: o}) }

// jsonKit builds JSON pieces with one set of options; it memoizes the rules of arbitrary values per depth.
type jsonKit struct {
	opts    Options
	ws      *node
	anyRule map[int]*node
}

func newJSONKit(o Options) (*jsonKit, error) {
	o, err := o.resolved()
	if err != nil {
		return nil, err
	}
	k := &jsonKit{opts: o, anyRule: map[int]*node{}}
	k.ws = emptyNode
	if o.Whitespace > 0 {
		k.ws = repeat(class(setOf(" \t\n\r")), 0, o.Whitespace, nil)
	}
	return k, nil
}

var (
	digit     = class(rangeSet('0', '9'))
	digit19   = class(rangeSet('1', '9'))
	hexDigit  = class(setOf("0123456789abcdefABCDEF"))
	nullNode  = lit([]byte("null"))
	boolNode  = alt(lit([]byte("true")), lit([]byte("false")))
	comma     = lit([]byte(","))
	quote     = lit([]byte(`"`))
	colon     = lit([]byte(":"))
	intNode   = seq(optional(lit([]byte("-"))), alt(lit([]byte("0")), seq(digit19, repeat(digit, 0, IntegerDigits-1, nil))))
	fracNode  = seq(lit([]byte(".")), repeat(digit, 1, FractionDigits, nil))
	expNode   = seq(class(setOf("eE")), optional(class(setOf("+-"))), repeat(digit, 1, ExponentDigits, nil))
	numNode   = seq(intNode, optional(fracNode), optional(expNode))
	charNode  = stringChar(nil)
	anyString = seq(quote, repeat(charNode, 0, -1, nil), quote)
)

// stringChar matches one character of a JSON string's content: an unescaped code point (not '"', '\' or a
// control character) from ranges (nil: all), or an escape. \u escapes of surrogates are left out, since a lone
// one is not a character; escapes are only offered for characters in ranges.
func stringChar(ranges []runeRange) *node {
	if ranges == nil {
		ranges = []runeRange{{0, 0x10FFFF}}
	}
	var plain []runeRange
	var escapes []*node
	hasRune := func(r rune) bool {
		for _, rr := range ranges {
			if r >= rr.lo && r <= rr.hi {
				return true
			}
		}
		return false
	}
	for _, e := range []struct {
		r   rune
		esc string
	}{{'"', `\"`}, {'\\', `\\`}, {'/', `\/`}, {'\b', `\b`}, {'\f', `\f`}, {'\n', `\n`}, {'\r', `\r`}, {'\t', `\t`}} {
		if hasRune(e.r) {
			escapes = append(escapes, lit([]byte(e.esc)))
		}
	}
	for _, rr := range ranges {
		lo, hi := rr.lo, rr.hi
		// Cut out '"', '\' and the control characters, which must be escaped.
		for _, cut := range []runeRange{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}} {
			if lo <= cut.hi && hi >= cut.lo {
				if lo < cut.lo {
					plain = append(plain, runeRange{lo, cut.lo - 1})
				}
				lo = max(lo, cut.hi+1)
			}
		}
		if lo <= hi {
			plain = append(plain, runeRange{lo, hi})
		}
	}
	if len(ranges) == 1 && ranges[0] == (runeRange{0, 0x10FFFF}) {
		// Any character: also \uXXXX for any non-surrogate.
		nonSur := alt(
			seq(class(setOf("0123456789abcABC")), hexDigit, hexDigit, hexDigit),
			seq(class(setOf("dD")), class(rangeSet('0', '7')), hexDigit, hexDigit),
			seq(class(setOf("eEfF")), hexDigit, hexDigit, hexDigit),
		)
		escapes = append(escapes, seq(lit([]byte(`\u`)), nonSur))
	} else {
		// Only control characters need \u (those without a short escape).
		for c := rune(0); c < 0x20; c++ {
			if hasRune(c) && c != '\b' && c != '\f' && c != '\n' && c != '\r' && c != '\t' {
				escapes = append(escapes, lit(fmt.Appendf(nil, `\u%04x`, c)))
			}
		}
	}
	return alt(append([]*node{runeSetNode(plain)}, escapes...)...)
}

// stringNode is a JSON string of minLen to maxLen (< 0: unbounded) characters.
func stringNode(minLen, maxLen int) *node {
	return seq(quote, repeat(charNode, minLen, maxLen, nil), quote)
}

// mapObject is an object of any number of members `key:` ws value, keys and values from the nodes given: a
// map, or arbitrary JSON.
func (k *jsonKit) mapObject(key, value *node) *node {
	member := seq(key, colon, k.ws, value)
	sep := seq(comma, k.ws)
	return seq(lit([]byte("{")), k.ws, alt(lit([]byte("}")), seq(repeat(member, 1, -1, sep), k.ws, lit([]byte("}")))))
}

// arrayOf is an array of minItems to maxItems (< 0: unbounded) items.
func (k *jsonKit) arrayOf(item *node, minItems, maxItems int) *node {
	open, closeB := lit([]byte("[")), lit([]byte("]"))
	if maxItems == 0 {
		return seq(open, k.ws, closeB)
	}
	sep := seq(comma, k.ws)
	items := seq(repeat(item, max(minItems, 1), maxItems, sep), k.ws, closeB)
	if minItems > 0 {
		return seq(open, k.ws, items)
	}
	return seq(open, k.ws, alt(closeB, items))
}

// anyValue is any JSON value at depth; the values inside its containers are rules (one per depth), which
// keeps the automaton linear in MaxDepth.
func (k *jsonKit) anyValue(depth int) *node {
	return alt(k.anyObject(depth), k.anyArray(depth), anyString, numNode, boolNode, nullNode)
}

func (k *jsonKit) anyObject(depth int) *node { return k.mapObject(anyString, k.inner(depth)) }
func (k *jsonKit) anyArray(depth int) *node  { return k.arrayOf(k.inner(depth), 0, -1) }

// inner is a value inside a container at depth: a call to the rule of depth+1, or at MaxDepth a scalar or
// an empty container.
func (k *jsonKit) inner(depth int) *node {
	d := depth + 1
	if d > k.opts.MaxDepth {
		empty := alt(seq(lit([]byte("{")), k.ws, lit([]byte("}"))), seq(lit([]byte("[")), k.ws, lit([]byte("]"))))
		return alt(empty, anyString, numNode, boolNode, nullNode)
	}
	if r, ok := k.anyRule[d]; ok {
		return r
	}
	r := rule(k.anyValue(d))
	k.anyRule[d] = r
	return r
}

// AnyJSON matches any JSON value (no whitespace around it), nested at most opts.MaxDepth deep.
func AnyJSON(opts Options) (Node, error) {
	k, err := newJSONKit(opts)
	if err != nil {
		return Node{}, err
	}
	return Node{k.anyValue(0)}, nil
}

// AnyJSONObject matches any JSON object, as OpenAI's response_format json_object asks.
func AnyJSONObject(opts Options) (Node, error) {
	k, err := newJSONKit(opts)
	if err != nil {
		return Node{}, err
	}
	return Node{k.anyObject(0)}, nil
}

// jsonLiteral encodes a string as JSON, leaving <, > and & as they are.
func jsonLiteral(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Formats of JSON Schema strings that have an automaton. Each is a subset of what the format allows, chosen so
// that every string it produces passes a strict validator: uppercase T and Z only, no leap seconds, no
// February 29th (the automaton does not know leap years), bounded lengths for email parts.
var formats = map[string]func() *node{
	"date":      dateNode,
	"time":      timeNode,
	"date-time": func() *node { return seq(dateNode(), lit([]byte("T")), timeNode()) },
	"uuid":      uuidNode,
	"email":     emailNode,
	"hostname":  hostnameNode,
	"ipv4":      ipv4Node,
}

func digits(n int) *node { return repeat(digit, n, n, nil) }

func litS(s string) *node { return lit([]byte(s)) }

func dateNode() *node {
	d1to28 := alt(seq(litS("0"), digit19), seq(litS("1"), digit), seq(litS("2"), class(rangeSet('0', '8'))))
	d29to30 := alt(litS("29"), litS("30"))
	month31 := alt(litS("01"), litS("03"), litS("05"), litS("07"), litS("08"), litS("10"), litS("12"))
	month30 := alt(litS("04"), litS("06"), litS("09"), litS("11"))
	md := alt(
		seq(month31, litS("-"), alt(d1to28, d29to30, litS("31"))),
		seq(month30, litS("-"), alt(d1to28, d29to30)),
		seq(litS("02-"), d1to28),
	)
	return seq(digits(4), litS("-"), md)
}

func timeNode() *node {
	hour := alt(seq(class(setOf("01")), digit), seq(litS("2"), class(rangeSet('0', '3'))))
	minute := seq(class(rangeSet('0', '5')), digit)
	frac := optional(seq(litS("."), repeat(digit, 1, 9, nil)))
	offset := alt(litS("Z"), seq(class(setOf("+-")), hour, litS(":"), minute))
	return seq(hour, litS(":"), minute, litS(":"), minute, frac, offset)
}

func uuidNode() *node {
	h := func(n int) *node { return repeat(hexDigit, n, n, nil) }
	return seq(h(8), litS("-"), h(4), litS("-"), h(4), litS("-"), h(4), litS("-"), h(12))
}

var alnum = class(setOf("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))

// label is a hostname label of 1 to 20 characters, no hyphen first or last.
func label() *node {
	return seq(alnum, optional(seq(repeat(alt(alnum, litS("-")), 0, 18, nil), alnum)))
}

// hostnameNode is 1 to 4 labels and a top-level domain of 2 to 8 letters.
func hostnameNode() *node {
	letter := class(setOf("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
	return seq(repeat(seq(label(), litS(".")), 1, 4, nil), repeat(letter, 2, 8, nil))
}

// emailNode is a dot-atom local part (1 to 4 atoms of 1 to 15 characters: at most 63, under the limit of
// 64) at a hostname.
func emailNode() *node {
	atomChar := class(setOf("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_%+-"))
	atom := repeat(atomChar, 1, 15, nil)
	return seq(repeat(atom, 1, 4, litS(".")), litS("@"), hostnameNode())
}

func ipv4Node() *node {
	octet := alt(
		seq(litS("25"), class(rangeSet('0', '5'))),
		seq(litS("2"), class(rangeSet('0', '4')), digit),
		seq(litS("1"), digit, digit),
		seq(digit19, digit),
		digit,
	)
	return repeat(octet, 4, 4, litS("."))
}
