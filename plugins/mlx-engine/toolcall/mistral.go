package toolcall

import "strings"

// Mistral writes its calls after [TOOL_CALLS] in one of two shapes, by tokenizer version (mistral-common):
//
//	[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, {"name": ...}]   before v11 (Mistral 7B v0.3, Nemo)
//	[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]multiply[ARGS]{"b": 2}         v11 and later (Small 3.1, Devstral)
//
// and some v11 models write NAME{...} without [ARGS], or NAME[CALL_ID]ID[ARGS]{...}. The id the model writes is
// not used: calls get the parser's ids like every other format.

type arrayPhase uint8

const (
	arrElemOrEnd arrayPhase = iota // after '[': an element or ']'
	arrElem                        // after ',': an element
	arrInElem                      // in an element
	arrAfterElem                   // after an element: ',' or ']'
)

// isNameByte: the characters of a function name written outside JSON.
func isNameByte(b byte) bool {
	return b == '_' || b == '-' || b == '.' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func skipSpace(s string) int {
	n := 0
	for n < len(s) && isSpace(s[n]) {
		n++
	}
	return n
}

// stepMistral reads what follows [TOOL_CALLS]: an array, an object or a name.
func (p *Parser) stepMistral() bool {
	n := skipSpace(p.buf)
	if n == len(p.buf) {
		if p.eof {
			c := p.newCall(markMistral + p.buf)
			p.buf = ""
			p.fail(c, ErrTruncated, "")
			p.endCall(c)
			p.toContent(bAfterCall)
			return true
		}
		return false
	}
	marker := markMistral + p.buf[:n]
	p.buf = p.buf[n:]
	switch b := p.buf[0]; {
	case b == '[':
		p.buf = p.buf[1:]
		p.st, p.arr = sMistralArray, arrElemOrEnd
	case b == '{':
		p.beginJSONCall(marker, false)
	case isNameByte(b):
		p.newCall(marker)
		p.word.Reset()
		p.st = sMistralName
	default:
		p.newCall(marker)
		p.fail(p.cur, ErrMalformed, "expected a JSON array or a function name after [TOOL_CALLS]")
		p.st = sSkip
	}
	return true
}

// stepMistralArray parses [TOOL_CALLS][{...}, {...}], one call per element.
func (p *Parser) stepMistralArray() bool {
	if p.arr == arrInElem {
		c := p.cur
		n := p.js.write(p, c, p.buf)
		p.eat(n)
		switch {
		case p.js.failed:
			p.st = sSkip
		case p.js.complete:
			p.endCall(c)
			p.arr = arrAfterElem
		case p.eof:
			p.fail(c, ErrTruncated, "")
			p.endCall(c)
			p.toContent(bAfterCall)
		default:
			return false
		}
		return true
	}
	p.buf = p.buf[skipSpace(p.buf):]
	if p.buf == "" {
		if !p.eof {
			return false
		}
		if p.arr != arrAfterElem {
			c := p.newCall("")
			p.fail(c, ErrTruncated, "")
			p.endCall(c)
		}
		p.toContent(bAfterCall)
		return true
	}
	b := p.buf[0]
	switch {
	case b == '{' && p.arr != arrAfterElem:
		p.newCall("")
		p.js = jsonCall{}
		p.arr = arrInElem
	case b == ']' && p.arr != arrElem:
		p.buf = p.buf[1:]
		p.toContent(bAfterCall)
	case b == ',' && p.arr == arrAfterElem:
		p.buf = p.buf[1:]
		p.arr = arrElem
	case p.arr == arrAfterElem:
		// No ']': what follows the last call is content.
		p.toContent(bAfterCall)
	default:
		c := p.newCall("")
		p.fail(c, ErrMalformed, "expected a call object in [TOOL_CALLS][...]")
		p.st = sSkip
	}
	return true
}

// stepMistralName reads NAME up to [ARGS], [CALL_ID] or the arguments' '{'.
func (p *Parser) stepMistralName() bool {
	c := p.cur
	n := 0
	for n < len(p.buf) && isNameByte(p.buf[n]) {
		n++
	}
	p.word.WriteString(p.buf[:n])
	p.eat(n)
	if p.word.Len() > maxName {
		p.fail(c, ErrMalformed, "function name too long")
		p.st = sSkip
		return true
	}
	if p.buf == "" {
		if !p.eof {
			return n > 0
		}
		// [TOOL_CALLS]NAME and nothing more: a call without arguments, as vLLM reads it.
		p.mistralName(c)
		p.mistralArgsDone(c, "{}")
		return true
	}
	rest := p.buf
	switch {
	case rest[0] == '{' || isSpace(rest[0]):
		p.mistralName(c)
		p.st, p.val = sMistralArgs, valueScanner{}
	case strings.HasPrefix(rest, markMistralArgs):
		p.eat(len(markMistralArgs))
		p.mistralName(c)
		p.st, p.val = sMistralArgs, valueScanner{}
	case strings.HasPrefix(rest, markMistralID):
		p.eat(len(markMistralID))
		p.mistralName(c)
		p.st = sMistralID
	case strings.HasPrefix(rest, markMistral):
		p.mistralName(c)
		p.mistralArgsDone(c, "{}")
	case !p.eof && (strings.HasPrefix(markMistralArgs, rest) || strings.HasPrefix(markMistralID, rest) || strings.HasPrefix(markMistral, rest)):
		return n > 0
	default:
		c.name = p.word.String()
		p.fail(c, ErrMalformed, "expected [ARGS] or '{' after the function name")
		p.st = sSkip
	}
	return true
}

func (p *Parser) mistralName(c *call) {
	name := p.word.String()
	if name == "" {
		p.fail(c, ErrMalformed, "empty function name after [TOOL_CALLS]")
		return
	}
	p.callName(c, name)
}

// stepMistralID skips the model's call id, up to [ARGS].
func (p *Parser) stepMistralID() bool {
	c := p.cur
	if i := strings.Index(p.buf, markMistralArgs); i >= 0 {
		p.eat(i + len(markMistralArgs))
		p.st, p.val = sMistralArgs, valueScanner{}
		return true
	}
	if i := strings.IndexByte(p.buf, '{'); i >= 0 {
		p.eat(i)
		p.st, p.val = sMistralArgs, valueScanner{}
		return true
	}
	keep := 0
	if !p.eof {
		keep = holdLen(p.buf, []string{markMistralArgs})
	}
	p.eat(len(p.buf) - keep)
	if p.eof {
		p.fail(c, ErrTruncated, "")
		p.endCall(c)
		p.toContent(bAfterCall)
		return true
	}
	return false
}

// stepMistralArgs streams the JSON value after the name as compact JSON. A [TOOL_CALLS] ends it wherever it
// comes (it is a control token, never part of a string the model means).
func (p *Parser) stepMistralArgs() bool {
	c := p.cur
	if p.val.n == 0 {
		k := skipSpace(p.buf)
		p.eat(k)
	}
	i := strings.Index(p.buf, markMistral)
	safe := p.buf
	switch {
	case i >= 0:
		safe = p.buf[:i]
	case !p.eof:
		safe = p.buf[:len(p.buf)-holdLen(p.buf, []string{markMistral})]
	}
	n := 0
	done := false
	for n < len(safe) && !done {
		b := safe[n]
		wasInStr := p.val.inStr
		took, d, err := p.val.feed(b)
		if err != nil {
			p.flushMistral(c)
			p.fail(c, ErrMalformed, "bad JSON arguments: "+err.Error())
			p.eat(n)
			p.st = sSkip
			return true
		}
		if !took {
			done = true
			break
		}
		if significant(b, wasInStr) {
			p.out = append(p.out, b)
		}
		n++
		done = d
	}
	p.eat(n)
	p.flushMistral(c)
	switch {
	case done:
		p.mistralArgsDone(c, "")
	case i >= 0 || p.eof:
		switch {
		case p.val.n == 0:
			p.mistralArgsDone(c, "{}")
		case p.val.endsAtEOF():
			p.mistralArgsDone(c, "")
		case i >= 0:
			p.fail(c, ErrMalformed, "[TOOL_CALLS] before the end of the arguments")
			p.mistralArgsDone(c, "")
		default:
			p.fail(c, ErrTruncated, "")
			p.mistralArgsDone(c, "")
		}
	default:
		return n > 0
	}
	return true
}

func (p *Parser) flushMistral(c *call) {
	if len(p.out) > 0 {
		p.callArgs(c, string(p.out))
		p.out = p.out[:0]
	}
}

func (p *Parser) mistralArgsDone(c *call, args string) {
	p.callArgs(c, args)
	p.endCall(c)
	p.toContent(bAfterCall)
}
