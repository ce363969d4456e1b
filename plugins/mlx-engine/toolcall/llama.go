package toolcall

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Llama 3.1-3.3 call tools in two ways (Meta's prompt format documentation, llama.cpp's chat.cpp):
//
//	{"name": "get_weather", "parameters": {"city": "Paris"}}      custom tools: JSON as the whole answer
//	<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>   built-in tools
//
// The JSON form may also follow <|python_tag|>, and several JSON calls may be separated by ";" or newlines.
// A JSON object at the start of the output is a call only if its first member is "name", "parameters" or
// "arguments", or "type": "function"; until its first member says so it is held back, and otherwise it is
// content. JSON that does not start the output is content. After <|python_tag|>, anything that is neither JSON
// nor NAME.call(...) is code for the code interpreter: a call of code_interpreter (or of python, if the request
// defines that and not code_interpreter) with {"code": "..."}.

var pythonEnds = []string{markEOM, markEOT}

// stepPythonTag looks at the first character after <|python_tag|>.
func (p *Parser) stepPythonTag() bool {
	p.eat(skipSpace(p.buf))
	if p.buf == "" {
		if p.eof {
			p.fail(p.cur, ErrTruncated, "")
			p.endCall(p.cur)
			p.toContent(bAfterCall)
			return true
		}
		return false
	}
	if p.buf[0] == '{' {
		p.beginJSONCall("", false)
		return true
	}
	p.word.Reset()
	p.st = sPythonBody
	return true
}

// stepPythonBody gathers a built-in call or code up to <|eom_id|>, <|eot_id|> or the end of the output, then
// parses it whole.
func (p *Parser) stepPythonBody() bool {
	c := p.cur
	i, m := findMarker(p.buf, pythonEnds)
	if i < 0 {
		keep := 0
		if !p.eof {
			keep = holdLen(p.buf, pythonEnds)
		}
		p.word.WriteString(p.buf[:len(p.buf)-keep])
		p.eat(len(p.buf) - keep)
		if !p.eof {
			return false
		}
	} else {
		p.word.WriteString(p.buf[:i])
		p.eat(i + len(m))
	}
	src := strings.TrimRight(p.word.String(), " \t\r\n")
	name, args, err := parseBuiltinCall(src)
	switch {
	case errors.Is(err, errNotBuiltin):
		name = "code_interpreter"
		if p.tools[name] == nil && p.tools["python"] != nil {
			name = "python"
		}
		p.callName(c, name)
		p.callArgs(c, `{"code":`+jsonString(src)+"}")
	case errors.Is(err, errPyEOF) && i < 0:
		c.name = name
		p.fail(c, ErrTruncated, "")
	case err != nil:
		c.name = name
		p.fail(c, ErrMalformed, err.Error())
	default:
		p.callName(c, name)
		p.callArgs(c, args)
	}
	p.endCall(c)
	p.toContent(bAfterCall)
	return true
}

var (
	errNotBuiltin = errors.New("not a NAME.call(...) expression")
	errPyEOF      = errors.New("unexpected end of the call")
)

// parseBuiltinCall reads NAME.call(key=value, ...) with Python literal values (strings in either quotes,
// numbers, True, False, None, lists, tuples and dicts of them) and returns the name and the keyword arguments
// as a compact JSON object, in the order written.
func parseBuiltinCall(src string) (name, args string, err error) {
	s := pyScanner{src: src}
	s.space()
	name = s.ident()
	if name == "" {
		return "", "", errNotBuiltin
	}
	s.space()
	if !s.lit(".") {
		return "", "", errNotBuiltin
	}
	s.space()
	if s.ident() != "call" {
		return "", "", errNotBuiltin
	}
	s.space()
	if !s.lit("(") {
		return "", "", errNotBuiltin
	}
	var b strings.Builder
	b.WriteByte('{')
	for first := true; ; first = false {
		s.space()
		if s.lit(")") {
			break
		}
		if !first {
			if !s.lit(",") {
				return name, "", s.errf("expected ',' or ')'")
			}
			s.space()
			if s.lit(")") {
				break
			}
		}
		key := s.ident()
		if key == "" {
			return name, "", s.errf("expected a keyword argument")
		}
		s.space()
		if !s.lit("=") {
			return name, "", s.errf("expected '=' after " + key)
		}
		s.space()
		v, err := s.value(0)
		if err != nil {
			return name, "", err
		}
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(key))
		b.WriteByte(':')
		b.WriteString(v)
	}
	s.space()
	if s.i < len(s.src) {
		return name, "", s.errf("text after the call")
	}
	b.WriteByte('}')
	return name, b.String(), nil
}

type pyScanner struct {
	src string
	i   int
}

func (s *pyScanner) errf(msg string) error {
	if s.i >= len(s.src) {
		return errPyEOF
	}
	return errors.New(msg + " at offset " + strconv.Itoa(s.i))
}

func (s *pyScanner) space() {
	for s.i < len(s.src) && isSpace(s.src[s.i]) {
		s.i++
	}
}

func (s *pyScanner) lit(t string) bool {
	if strings.HasPrefix(s.src[s.i:], t) {
		s.i += len(t)
		return true
	}
	return false
}

func (s *pyScanner) ident() string {
	j := s.i
	for j < len(s.src) {
		c := s.src[j]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > s.i && c >= '0' && c <= '9' {
			j++
			continue
		}
		break
	}
	id := s.src[s.i:j]
	s.i = j
	return id
}

const maxPyDepth = 64

// value reads one Python literal and returns it as JSON.
func (s *pyScanner) value(depth int) (string, error) {
	if depth > maxPyDepth {
		return "", s.errf("literal nested too deep")
	}
	if s.i >= len(s.src) {
		return "", errPyEOF
	}
	switch c := s.src[s.i]; {
	case c == '"' || c == '\'':
		str, err := s.str()
		if err != nil {
			return "", err
		}
		return jsonString(str), nil
	case c == '[' || c == '(':
		end := byte(']')
		if c == '(' {
			end = ')'
		}
		s.i++
		var b strings.Builder
		b.WriteByte('[')
		for n := 0; ; n++ {
			s.space()
			if s.i < len(s.src) && s.src[s.i] == end {
				s.i++
				break
			}
			if n > 0 {
				if !s.lit(",") {
					return "", s.errf("expected ','")
				}
				s.space()
				if s.i < len(s.src) && s.src[s.i] == end {
					s.i++
					break
				}
				b.WriteByte(',')
			}
			v, err := s.value(depth + 1)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		}
		b.WriteByte(']')
		return b.String(), nil
	case c == '{':
		s.i++
		var b strings.Builder
		b.WriteByte('{')
		for n := 0; ; n++ {
			s.space()
			if s.lit("}") {
				break
			}
			if n > 0 {
				if !s.lit(",") {
					return "", s.errf("expected ','")
				}
				s.space()
				if s.lit("}") {
					break
				}
				b.WriteByte(',')
			}
			if s.i >= len(s.src) || s.src[s.i] != '"' && s.src[s.i] != '\'' {
				return "", s.errf("dict keys must be strings")
			}
			k, err := s.str()
			if err != nil {
				return "", err
			}
			s.space()
			if !s.lit(":") {
				return "", s.errf("expected ':'")
			}
			s.space()
			v, err := s.value(depth + 1)
			if err != nil {
				return "", err
			}
			b.WriteString(jsonString(k))
			b.WriteByte(':')
			b.WriteString(v)
		}
		b.WriteByte('}')
		return b.String(), nil
	}
	j := s.i
	for j < len(s.src) && (isNameByte(s.src[j]) || s.src[j] == '+') {
		j++
	}
	word := s.src[s.i:j]
	switch word {
	case "True", "true":
		s.i = j
		return "true", nil
	case "False", "false":
		s.i = j
		return "false", nil
	case "None", "null":
		s.i = j
		return "null", nil
	}
	num := strings.TrimPrefix(word, "+")
	if num != "" && json.Valid([]byte(num)) && (num[0] == '-' || num[0] >= '0' && num[0] <= '9') {
		s.i = j
		return num, nil
	}
	if j == len(s.src) {
		return "", errPyEOF
	}
	return "", s.errf("not a literal")
}

// str reads a Python string literal in single or double quotes, with the common escapes.
func (s *pyScanner) str() (string, error) {
	q := s.src[s.i]
	s.i++
	var b strings.Builder
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == q:
			s.i++
			return b.String(), nil
		case c == '\\':
			if s.i+1 >= len(s.src) {
				return "", errPyEOF
			}
			e := s.src[s.i+1]
			s.i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '\n':
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if s.i+n > len(s.src) {
					return "", errPyEOF
				}
				r, err := strconv.ParseUint(s.src[s.i:s.i+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", s.errf("bad \\" + string(e) + " escape")
				}
				b.WriteRune(rune(r))
				s.i += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			s.i++
		}
	}
	return "", errPyEOF
}
