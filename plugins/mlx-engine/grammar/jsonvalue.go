package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jval is a parsed JSON value that keeps the order of object members, which the schema compiler needs:
// properties are generated in the order the schema lists them.
type jval struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' boolean, 'z' null
	str  string
	num  json.Number
	b    bool
	arr  []*jval
	keys []string
	vals []*jval
}

func (v *jval) get(key string) (*jval, bool) {
	for i, k := range v.keys {
		if k == key {
			return v.vals[i], true
		}
	}
	return nil, false
}

// Limits on schema documents, so that no input makes the compiler work without bound.
const (
	MaxSchemaBytes = 1 << 20
	maxJSONDepth   = 128
)

func parseJSON(data []byte) (*jval, error) {
	if len(data) > MaxSchemaBytes {
		return nil, fmt.Errorf("json schema: %d bytes, more than the %d allowed", len(data), MaxSchemaBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json schema: data after the top-level value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (*jval, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested more than %d deep", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jval{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				if _, dup := v.get(k); dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				val, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		case '[':
			v := &jval{kind: 'a'}
			for dec.More() {
				val, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		}
	case string:
		return &jval{kind: 's', str: t}, nil
	case json.Number:
		return &jval{kind: 'n', num: t}, nil
	case bool:
		return &jval{kind: 'b', b: t}, nil
	case nil:
		return &jval{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// encode writes v as compact JSON, members in their order: the text a const or enum value is generated as.
func (v *jval) encode(b []byte) []byte {
	switch v.kind {
	case 'o':
		b = append(b, '{')
		for i, k := range v.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, jsonLiteral(k)...)
			b = append(b, ':')
			b = v.vals[i].encode(b)
		}
		return append(b, '}')
	case 'a':
		b = append(b, '[')
		for i, e := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.encode(b)
		}
		return append(b, ']')
	case 's':
		return append(b, jsonLiteral(v.str)...)
	case 'n':
		return append(b, v.num...)
	case 'b':
		if v.b {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	}
	return append(b, "null"...)
}

// pointerJoin appends a reference token to a JSON pointer (RFC 6901).
func pointerJoin(ptr, tok string) string {
	tok = strings.ReplaceAll(tok, "~", "~0")
	tok = strings.ReplaceAll(tok, "/", "~1")
	return ptr + "/" + tok
}

// resolvePointer follows a JSON pointer (without the leading '#') from root.
func resolvePointer(root *jval, ptr string) (*jval, bool) {
	if ptr == "" {
		return root, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := root
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur.kind {
		case 'o':
			next, ok := cur.get(tok)
			if !ok {
				return nil, false
			}
			cur = next
		case 'a':
			i := 0
			if tok == "" || len(tok) > 9 {
				return nil, false
			}
			for _, c := range tok {
				if c < '0' || c > '9' {
					return nil, false
				}
				i = i*10 + int(c-'0')
			}
			if i >= len(cur.arr) {
				return nil, false
			}
			cur = cur.arr[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
