package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The phases of a <tool_call> body.
const (
	phLead  = iota // before the body's first character, which says JSON or XML
	phJSON         // a JSON call object
	phXML          // Qwen3-Coder <function=…>
	phTrail        // after the call: only whitespace may follow before </tool_call>
	phSkip         // the call is malformed: the rest of the block is skipped
)

// body parses what a <tool_call> block holds: a JSON call object (Hermes, Qwen 2.5 and 3) or a Qwen3-Coder
// <function=…> element. Either is accepted whichever format was detected, since both families share the
// block; a bare body (Qwen3-Coder's <function= without <tool_call>) starts in phXML and ends at </function>.
type body struct {
	phase int
	bare  bool
	js    jsonCall
	xml   xmlCall
}

// feed consumes a prefix of s; final says s is all the body will get.
func (b *body) feed(p *Parser, c *call, s string, final bool) int {
	n := 0
	for n < len(s) {
		rest := s[n:]
		switch b.phase {
		case phLead:
			if isSpace(s[n]) {
				n++
				continue
			}
			switch {
			case s[n] == '{':
				b.phase = phJSON
			case strings.HasPrefix(rest, markFunction):
				n += len(markFunction)
				b.phase = phXML
			case !final && strings.HasPrefix(markFunction, rest):
				return n
			default:
				p.fail(c, ErrMalformed, "expected a JSON object or <function=NAME>")
				b.phase = phSkip
			}
		case phJSON:
			n += b.js.write(p, c, rest)
			switch {
			case b.js.failed:
				b.phase = phSkip
			case b.js.complete:
				b.phase = phTrail
			}
		case phXML:
			k := b.xml.write(p, c, rest, final)
			n += k
			switch {
			case b.xml.failed:
				b.phase = phSkip
			case b.xml.complete:
				b.phase = phTrail
				if b.bare {
					return n
				}
			case k < len(rest):
				return n
			}
		case phTrail:
			if isSpace(s[n]) {
				n++
				continue
			}
			p.fail(c, ErrMalformed, "text after the call, before </tool_call>")
			b.phase = phSkip
		case phSkip:
			return len(s)
		}
	}
	return n
}

// close ends the body at </tool_call> or, truncated, at the end of the output.
func (b *body) close(p *Parser, c *call, truncated bool) {
	switch b.phase {
	case phLead:
		if truncated {
			p.fail(c, ErrTruncated, "")
		} else {
			p.fail(c, ErrMalformed, "empty <tool_call>")
		}
	case phJSON:
		if truncated {
			p.fail(c, ErrTruncated, "")
		} else {
			b.js.flush(p, c)
			p.fail(c, ErrMalformed, "</tool_call> before the end of the JSON object")
		}
	case phXML:
		if truncated {
			p.fail(c, ErrTruncated, "")
		} else {
			b.xml.closeLenient(p, c)
		}
	}
}

type xmlState uint8

const (
	xName    xmlState = iota // after <function=, up to '>'
	xBetween                 // between parameters
	xPName                   // after <parameter=, up to '>'
	xValue                   // a parameter's value
)

var valueEnds = []string{markParamEnd, markParameter, markFunctionEnd}

// xmlCall parses <function=NAME><parameter=P>VALUE</parameter>…</function>, as Qwen3-Coder writes calls (the
// rules are in the package documentation). The arguments object is streamed one parameter at a time:
// `{"p":value` when the first parameter closes, `,"q":…` for the next, `}` at </function>.
type xmlCall struct {
	st       xmlState
	name     []byte
	pname    []byte
	val      strings.Builder
	nparams  int
	seen     map[string]bool
	complete bool
	failed   bool
}

func (x *xmlCall) write(p *Parser, c *call, s string, final bool) int {
	n := 0
	for n < len(s) {
		rest := s[n:]
		switch x.st {
		case xName, xPName:
			buf := &x.name
			if x.st == xPName {
				buf = &x.pname
			}
			i := strings.IndexByte(rest, '>')
			seg := rest
			if i >= 0 {
				seg = rest[:i]
			}
			if strings.ContainsAny(seg, "<\n") || len(*buf)+len(seg) > maxName {
				return x.bad(p, c, n, "bad name in <function=NAME> or <parameter=NAME>")
			}
			*buf = append(*buf, seg...)
			if i < 0 {
				return len(s)
			}
			n += i + 1
			name := strings.TrimSpace(string(*buf))
			if name == "" {
				return x.bad(p, c, n, "empty name in <function=NAME> or <parameter=NAME>")
			}
			if x.st == xName {
				p.callName(c, name)
				x.st = xBetween
				continue
			}
			if x.seen[name] {
				return x.bad(p, c, n, fmt.Sprintf("parameter %q given twice", name))
			}
			if x.seen == nil {
				x.seen = map[string]bool{}
			}
			x.seen[name] = true
			x.pname = append(x.pname[:0], name...)
			x.val.Reset()
			x.st = xValue
		case xBetween:
			if isSpace(s[n]) {
				n++
				continue
			}
			switch {
			case strings.HasPrefix(rest, markParameter):
				n += len(markParameter)
				x.pname = x.pname[:0]
				x.st = xPName
			case strings.HasPrefix(rest, markFunctionEnd):
				n += len(markFunctionEnd)
				x.closeArgs(p, c)
				return n
			case !final && (strings.HasPrefix(markParameter, rest) || strings.HasPrefix(markFunctionEnd, rest)):
				return n
			default:
				return x.bad(p, c, n, "expected <parameter=NAME> or </function>")
			}
		case xValue:
			if i, m := findMarker(rest, valueEnds); i >= 0 {
				x.val.WriteString(rest[:i])
				n += i
				if m == markParamEnd {
					n += len(m)
				}
				x.endParam(p, c)
				x.st = xBetween
				continue
			}
			keep := 0
			if !final {
				keep = holdLen(rest, valueEnds)
			}
			x.val.WriteString(rest[:len(rest)-keep])
			return n + len(rest) - keep
		}
	}
	return n
}

func (x *xmlCall) bad(p *Parser, c *call, n int, msg string) int {
	x.failed = true
	p.fail(c, ErrMalformed, msg)
	return n
}

func (x *xmlCall) endParam(p *Parser, c *call) {
	v := x.val.String()
	x.val.Reset()
	v = strings.TrimPrefix(v, "\n")
	v = strings.TrimSuffix(v, "\n")
	var sch *schema
	if c.tool != nil && c.tool.params.props != nil {
		sch = c.tool.params.props[string(x.pname)]
	}
	frag := ","
	if x.nparams == 0 {
		frag = "{"
	}
	x.nparams++
	p.callArgs(c, frag+jsonString(string(x.pname))+":"+typedValue(v, sch))
}

func (x *xmlCall) closeArgs(p *Parser, c *call) {
	if x.nparams == 0 {
		p.callArgs(c, "{}")
	} else {
		p.callArgs(c, "}")
	}
	x.complete = true
}

// closeLenient ends the element at </tool_call>, forgiving a missing </parameter> and </function>.
func (x *xmlCall) closeLenient(p *Parser, c *call) {
	switch x.st {
	case xValue:
		x.endParam(p, c)
		x.closeArgs(p, c)
	case xBetween:
		x.closeArgs(p, c)
	default:
		x.failed = true
		p.fail(c, ErrMalformed, "</tool_call> inside <function=NAME> or <parameter=NAME>")
	}
}

// typedValue turns a parameter's text into a JSON value as the parameter's schema asks (see xmlCall).
func typedValue(v string, s *schema) string {
	if s == nil || len(s.types) == 0 {
		return jsonString(v)
	}
	t := strings.TrimSpace(v)
	if t == "null" && s.allows("null") {
		return "null"
	}
	if s.allows("string") {
		return jsonString(v)
	}
	switch {
	case (t == "True" || t == "False") && s.allows("boolean"):
		return strings.ToLower(t)
	case t == "None" && s.allows("null"):
		return "null"
	}
	if d, err := decodeValue([]byte(t)); err == nil && s.allows(typeOf(d)) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(t)) == nil {
			return b.String()
		}
	}
	return jsonString(v)
}
