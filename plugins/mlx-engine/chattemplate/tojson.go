package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The tojson filter writes the tool definitions and tool call arguments into prompts, so its output must match
// transformers byte for byte: Python's json.dumps with ensure_ascii=False, keys in insertion order, ", " and
// ": " between items, and with indent=N one item per line (Llama 3.1 renders tools with tojson(indent=4)).
// The engine's own tojson sorts keys and escapes HTML when indenting, and its filters cannot be replaced, so
// the template source is rewritten to call ours under another name (rewriteFilters) and Render provides it.

// tojsonName is the name our tojson filter takes in rewritten templates. Filters the engine does not know are
// looked up among the template variables.
const tojsonName = "duet_tojson"

// rewriteFilters renames the tojson filter inside {{ }} and {% %} tags, leaving text, comments, string
// literals and raw blocks alone.
func rewriteFilters(src string) string {
	var b strings.Builder
	b.Grow(len(src) + 64)
	i := 0
	for i < len(src) {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || i+open+1 >= len(src) {
			b.WriteString(src[i:])
			break
		}
		open += i
		b.WriteString(src[i:open])
		var closer string
		switch src[open+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			end := strings.Index(src[open+2:], "#}")
			if end < 0 {
				b.WriteString(src[open:])
				return b.String()
			}
			b.WriteString(src[open : open+2+end+2])
			i = open + 2 + end + 2
			continue
		default:
			b.WriteByte('{')
			i = open + 1
			continue
		}
		end := tagEnd(src, open+2, closer)
		tag := src[open:end]
		if closer == "%}" && isRawTag(tag) {
			// Copy everything up to and including {% endraw %} unchanged.
			rest := src[end:]
			stop := findEndRaw(rest)
			b.WriteString(tag)
			b.WriteString(rest[:stop])
			i = end + stop
			continue
		}
		b.WriteString(renameFilter(tag, "tojson", tojsonName))
		i = end
	}
	return b.String()
}

// tagEnd returns the offset just past the closer of a tag that starts before i, skipping string literals.
func tagEnd(src string, i int, closer string) int {
	var quote byte
	for ; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case strings.HasPrefix(src[i:], closer):
			return i + len(closer)
		}
	}
	return len(src)
}

func isRawTag(tag string) bool {
	inner := strings.Trim(tag, "{%}-+ \t\r\n")
	return inner == "raw"
}

func findEndRaw(s string) int {
	for off := 0; ; {
		j := strings.Index(s[off:], "{%")
		if j < 0 {
			return len(s)
		}
		start := off + j
		end := tagEnd(s, start+2, "%}")
		if strings.Trim(s[start:end], "{%}-+ \t\r\n") == "endraw" {
			return end
		}
		off = end
	}
}

// renameFilter renames filter old to new in one tag: an identifier old after a '|' outside string literals.
func renameFilter(tag, old, new string) string {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case quote != 0:
			b.WriteByte(c)
			if c == '\\' && i+1 < len(tag) {
				i++
				b.WriteByte(tag[i])
			} else if c == quote {
				quote = 0
			}
			continue
		case c == '\'' || c == '"':
			quote = c
		case c == '|':
			j := i + 1
			for j < len(tag) && (tag[j] == ' ' || tag[j] == '\t' || tag[j] == '\n' || tag[j] == '\r') {
				j++
			}
			if strings.HasPrefix(tag[j:], old) && !isIdentByte(tag, j+len(old)) {
				b.WriteString(tag[i:j])
				b.WriteString(new)
				i = j + len(old) - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isIdentByte(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// tojsonFilter implements tojson(x, indent=None, separators=None, sort_keys=False, ensure_ascii=False).
func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: missing value")
	}
	e := jsonEncoder{itemSep: ", ", keySep: ": ", indent: -1}
	if len(args) > 1 {
		kwargs = mergeKw(kwargs, "indent", args[1])
	}
	for k, v := range kwargs {
		switch k {
		case "indent":
			switch {
			case v.IsNone() || v.IsUndefined():
			case v.IsInt() && v.AsInt() >= 0 && v.AsInt() <= 64:
				e.indent = int(v.AsInt())
				e.itemSep = ","
			case v.IsString() && len(v.AsString()) <= 64:
				e.indentStr = v.AsString()
				e.indent = 0
				e.itemSep = ","
			default:
				return jinja.Undefined(), errors.New("tojson: indent must be an integer from 0 to 64 or a string")
			}
		case "separators":
			if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
				return jinja.Undefined(), errors.New("tojson: separators must be two strings")
			}
			e.itemSep, e.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
		case "sort_keys":
			e.sortKeys = v.IsTruthy()
		case "ensure_ascii":
			e.ascii = v.IsTruthy()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: unknown argument %q", k)
		}
	}
	if e.indentStr == "" && e.indent > 0 {
		e.indentStr = strings.Repeat(" ", e.indent)
	}
	if err := e.encode(args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(e.b.String()), nil
}

func mergeKw(kw map[string]jinja.Value, k string, v jinja.Value) map[string]jinja.Value {
	out := map[string]jinja.Value{k: v}
	for kk, vv := range kw {
		out[kk] = vv
	}
	return out
}

type jsonEncoder struct {
	b         strings.Builder
	itemSep   string
	keySep    string
	indent    int    // -1: all on one line
	indentStr string // one level of indentation
	sortKeys  bool
	ascii     bool
}

const maxEncodeDepth = 128

func (e *jsonEncoder) newline(depth int) {
	if e.indent < 0 {
		return
	}
	e.b.WriteByte('\n')
	for range depth {
		e.b.WriteString(e.indentStr)
	}
}

func (e *jsonEncoder) encode(v jinja.Value, depth int) error {
	if depth > maxEncodeDepth {
		return errors.New("tojson: value nested too deeply")
	}
	switch {
	case v.IsNone() || v.IsUndefined() || v.IsCallable():
		e.b.WriteString("null")
	case v.IsBool():
		e.b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		e.b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		s, err := pythonFloat(v.AsFloat())
		if err != nil {
			return err
		}
		e.b.WriteString(s)
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(depth + 1)
			if err := e.encode(item, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			e.b.WriteString("{}")
			return nil
		}
		if e.sortKeys {
			sort.Strings(keys)
		}
		e.b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(depth + 1)
			e.str(k)
			e.b.WriteString(e.keySep)
			item, _ := d.Get(k)
			if err := e.encode(item, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte('}')
	default:
		e.b.WriteString("null")
	}
	return nil
}

// str writes a JSON string as Python's json.dumps does: quotes, backslashes and control characters escaped,
// everything else (with ensure_ascii, everything up to U+007F) as is.
func (e *jsonEncoder) str(s string) {
	const hex = "0123456789abcdef"
	e.b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			e.b.WriteString(`\"`)
		case '\\':
			e.b.WriteString(`\\`)
		case '\n':
			e.b.WriteString(`\n`)
		case '\r':
			e.b.WriteString(`\r`)
		case '\t':
			e.b.WriteString(`\t`)
		case '\b':
			e.b.WriteString(`\b`)
		case '\f':
			e.b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (e.ascii && r >= 0x80 && r <= 0xFFFF):
				e.b.WriteString(`\u`)
				for shift := 12; shift >= 0; shift -= 4 {
					e.b.WriteByte(hex[(r>>shift)&0xF])
				}
			case e.ascii && r > 0xFFFF:
				r -= 0x10000
				for _, half := range []rune{0xD800 + r>>10, 0xDC00 + r&0x3FF} {
					e.b.WriteString(`\u`)
					for shift := 12; shift >= 0; shift -= 4 {
						e.b.WriteByte(hex[(half>>shift)&0xF])
					}
				}
			default:
				e.b.WriteRune(r) // invalid UTF-8 arrives here as U+FFFD
			}
		}
	}
	e.b.WriteByte('"')
}

// pythonFloat formats f as Python's repr: the shortest digits that read back as f, fixed-point with a ".0"
// for exponents from -4 to 15, else scientific with a two-digit exponent.
func pythonFloat(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("tojson: cannot encode %v", f)
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	exp, err := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if err != nil {
		return "", err
	}
	if exp < -4 || exp >= 16 {
		return sci, nil
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s, nil
}
