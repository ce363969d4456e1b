package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// maxName bounds function and parameter names, so that a model that never closes one cannot make the parser
// hold its text forever.
const maxName = 256

// valueScanner finds the end of one JSON value as its bytes arrive. It tracks strings and nesting only: the
// value is checked in full (encoding/json) when the call ends, so a bad literal inside an object is caught
// there, not here.
type valueScanner struct {
	stack  []byte // open '{' and '['
	n      int    // bytes taken
	inStr  bool
	esc    bool
	scalar bool // a number or literal at the top level, which ends at the first byte that cannot continue it
}

var errJSONNesting = errors.New("mismatched brackets")

// feed offers the next byte. It reports whether the byte belongs to the value and whether the value is
// complete; a top-level number or literal completes at the first byte after it, which it does not take.
func (v *valueScanner) feed(b byte) (took, done bool, err error) {
	if v.n == 0 {
		switch {
		case b == '{' || b == '[':
			v.stack = append(v.stack, b)
		case b == '"':
			v.inStr = true
		case b == '-' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z':
			v.scalar = true
		default:
			return false, false, errors.New("not the start of a JSON value")
		}
		v.n++
		return true, false, nil
	}
	if v.scalar {
		if b == '-' || b == '+' || b == '.' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' {
			v.n++
			return true, false, nil
		}
		return false, true, nil
	}
	v.n++
	if v.inStr {
		switch {
		case v.esc:
			v.esc = false
		case b == '\\':
			v.esc = true
		case b == '"':
			v.inStr = false
			return true, len(v.stack) == 0, nil
		}
		return true, false, nil
	}
	switch b {
	case '"':
		v.inStr = true
	case '{', '[':
		v.stack = append(v.stack, b)
	case '}', ']':
		open := byte('{')
		if b == ']' {
			open = '['
		}
		if len(v.stack) == 0 || v.stack[len(v.stack)-1] != open {
			return true, false, errJSONNesting
		}
		v.stack = v.stack[:len(v.stack)-1]
		return true, len(v.stack) == 0, nil
	}
	return true, false, nil
}

// endsAtEOF reports whether the value is complete if no byte follows: a top-level number or literal.
func (v *valueScanner) endsAtEOF() bool { return v.scalar }

// significant reports whether a byte the scanner took belongs in compact JSON: whitespace outside strings
// does not. Concatenating the significant bytes of a valid value gives what json.Compact gives.
func significant(b byte, wasInStr bool) bool { return wasInStr || !isSpace(b) }

type jcState uint8

const (
	jcOpen       jcState = iota // before '{'
	jcFirstKey                  // after '{': a member name or '}'
	jcKey                       // after ',': a member name
	jcKeyStr                    // in a member name
	jcColon                     // after a member name
	jcValueStart                // after ':'
	jcValue                     // in a member's value
	jcAfterValue                // after a member's value: ',' or '}'
)

type jcRole uint8

const (
	roleOther    jcRole = iota // a member the call does not use ("type", "id")
	roleName                   // "name"
	roleType                   // "type" as the first member of a tentative object
	roleArgsObj                // "arguments" or "parameters" holding an object: streamed as compact JSON
	roleArgsText               // "arguments" holding a string of JSON, or something that is not an object
)

// jsonCall parses one call object {"name": ..., "arguments": {...}} (or "parameters", as Llama writes it) as it
// arrives, streaming the arguments object as compact JSON as soon as the name is known. Members may come in any
// order; arguments that come before the name wait for it.
type jsonCall struct {
	st      jcState
	key     []byte
	keyEsc  bool
	member  string
	role    jcRole
	val     valueScanner
	raw     []byte // the value of a name, type or textual-arguments member
	out     []byte // compact arguments not yet passed on
	members int
	hasName bool
	hasArgs bool

	// tentative: a Llama 3 object at the start of the output, which is a call only if its first member is
	// "name", "arguments" or "parameters", or "type": "function". Until then nothing is emitted; rejected
	// says it is content after all.
	tentative bool
	rejected  bool
	complete  bool
	failed    bool
}

// write takes bytes of the object and returns how many it consumed: all of s unless the object completed,
// failed or was rejected within it.
func (j *jsonCall) write(p *Parser, c *call, s string) int {
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch j.st {
		case jcOpen:
			if isSpace(b) {
				continue
			}
			if b != '{' {
				return j.bad(p, c, i, "expected a JSON object")
			}
			j.st = jcFirstKey
		case jcFirstKey, jcKey:
			if isSpace(b) {
				continue
			}
			if b == '"' {
				j.key, j.keyEsc, j.st = append(j.key[:0], b), false, jcKeyStr
				continue
			}
			if b == '}' && j.st == jcFirstKey {
				j.finish(p, c)
				return i + 1
			}
			return j.bad(p, c, i, "expected a member name")
		case jcKeyStr:
			j.key = append(j.key, b)
			if len(j.key) > maxName {
				return j.bad(p, c, i, "member name too long")
			}
			switch {
			case j.keyEsc:
				j.keyEsc = false
			case b == '\\':
				j.keyEsc = true
			case b == '"':
				var k string
				if err := json.Unmarshal(j.key, &k); err != nil {
					return j.bad(p, c, i, "bad member name")
				}
				j.member, j.st = k, jcColon
				if j.tentative && j.members == 0 {
					switch k {
					case "name", "arguments", "parameters":
						j.tentative = false
					case "type":
					default:
						j.rejected = true
						return i + 1
					}
				}
				j.members++
			}
		case jcColon:
			if isSpace(b) {
				continue
			}
			if b != ':' {
				return j.bad(p, c, i, "expected ':'")
			}
			j.st = jcValueStart
		case jcValueStart:
			if isSpace(b) {
				continue
			}
			if msg := j.startValue(b); msg != "" {
				return j.bad(p, c, i, msg)
			}
			j.st = jcValue
			i-- // the value's first byte
		case jcValue:
			wasInStr := j.val.inStr
			took, done, err := j.val.feed(b)
			if err != nil {
				return j.bad(p, c, i, "bad JSON: "+err.Error())
			}
			if took {
				j.take(b, wasInStr)
			}
			if done {
				if msg := j.endValue(p, c); msg != "" {
					return j.bad(p, c, i, msg)
				}
				if j.rejected {
					return i + 1
				}
				j.st = jcAfterValue
				if !took {
					i--
				}
			}
		case jcAfterValue:
			if isSpace(b) {
				continue
			}
			switch b {
			case ',':
				j.st = jcKey
			case '}':
				j.finish(p, c)
				return i + 1
			default:
				return j.bad(p, c, i, "expected ',' or '}'")
			}
		}
	}
	j.flush(p, c)
	return len(s)
}

// bad ends the object at byte i: a tentative one is content after all, a call is malformed.
func (j *jsonCall) bad(p *Parser, c *call, i int, msg string) int {
	if j.tentative {
		j.rejected = true
		return i + 1
	}
	j.flush(p, c)
	j.failed = true
	p.fail(c, ErrMalformed, msg)
	return i + 1
}

func (j *jsonCall) startValue(b byte) string {
	j.val = valueScanner{}
	j.raw = j.raw[:0]
	switch {
	case j.member == "name":
		if j.hasName {
			return `two "name" members`
		}
		j.role = roleName
	case j.member == "arguments" || j.member == "parameters":
		if j.hasArgs {
			return `more than one "arguments" or "parameters" member`
		}
		j.hasArgs = true
		j.role = roleArgsText
		if b == '{' {
			j.role = roleArgsObj
		}
	case j.member == "type" && j.tentative:
		j.role = roleType
	default:
		j.role = roleOther
	}
	return ""
}

func (j *jsonCall) take(b byte, wasInStr bool) {
	switch j.role {
	case roleArgsObj:
		if significant(b, wasInStr) {
			j.out = append(j.out, b)
		}
	case roleName, roleType:
		if len(j.raw) <= maxName {
			j.raw = append(j.raw, b)
		}
	case roleArgsText:
		j.raw = append(j.raw, b)
	}
}

// endValue acts on a complete member value; it returns a message if the call is malformed.
func (j *jsonCall) endValue(p *Parser, c *call) string {
	switch j.role {
	case roleName:
		var name string
		if len(j.raw) > maxName || json.Unmarshal(j.raw, &name) != nil {
			return `"name" must be a string`
		}
		if name == "" {
			return `empty "name"`
		}
		j.hasName = true
		j.flush(p, c)
		p.callName(c, name)
	case roleType:
		var t string
		json.Unmarshal(j.raw, &t)
		if t != "function" {
			j.rejected = true
			return ""
		}
		j.tentative = false
	case roleArgsObj:
		j.flush(p, c)
	case roleArgsText:
		args, msg := textArguments(j.raw)
		if msg != "" {
			return msg
		}
		j.out = append(j.out, args...)
		j.flush(p, c)
	}
	return ""
}

// textArguments reads arguments that are not an object: a JSON string holding the object's text (as some
// models and the OpenAI wire format write them), null for none; anything else is passed on for the tool's check
// to reject.
func textArguments(raw []byte) (string, string) {
	raw = bytes.TrimSpace(raw)
	switch {
	case string(raw) == "null":
		return "{}", ""
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", "bad arguments string"
		}
		if strings.TrimSpace(s) == "" {
			return "{}", ""
		}
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(s)); err != nil {
			return "", "the arguments string is not JSON: " + err.Error()
		}
		return b.String(), ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return b.String(), ""
	}
	return string(raw), ""
}

func (j *jsonCall) finish(p *Parser, c *call) {
	j.flush(p, c)
	j.complete = true
	if j.tentative {
		// {} or {"type": ...} alone: not a call.
		j.rejected = true
		return
	}
	if !j.hasArgs {
		p.callArgs(c, "{}")
	}
}

func (j *jsonCall) flush(p *Parser, c *call) {
	if len(j.out) > 0 {
		p.callArgs(c, string(j.out))
		j.out = j.out[:0]
	}
}

// jsonString writes s as a JSON string, leaving <, > and & as they are (json.Marshal escapes them for HTML).
func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
