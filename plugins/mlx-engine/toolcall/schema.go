package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// schema is the subset of JSON Schema that tool parameters use and that this package checks: type (a name or
// a list), properties, required, enum, const, additionalProperties (false or a schema) and items (one schema).
// Other keywords (anyOf, oneOf, allOf, $ref, format, minimum, pattern, ...) are accepted and not checked, so a
// value the subset passes may still break a rule it does not know; one it rejects breaks a rule for certain.
type schema struct {
	never    bool     // the schema false: nothing matches
	types    []string // normalized type names; empty: any type
	props    map[string]*schema
	required []string
	enum     []any
	hasConst bool
	konst    any
	noExtra  bool    // additionalProperties: false
	extra    *schema // additionalProperties: a schema
	items    *schema
}

// typeNames maps the type names clients write to JSON Schema's. Qwen3-Coder's own tool definitions use
// Python-ish names ("int", "float", "dict", "list"), and vLLM reads them the same way.
func normalizeType(t string) (string, bool) {
	t = strings.ToLower(strings.TrimSpace(t))
	switch {
	case t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" || t == "enum":
		return "string", true
	case t == "integer" || strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || t == "long" || t == "short":
		return "integer", true
	case t == "number" || strings.HasPrefix(t, "num") || strings.HasPrefix(t, "float") || t == "double":
		return "number", true
	case t == "boolean" || t == "bool":
		return "boolean", true
	case t == "object" || strings.HasPrefix(t, "dict") || strings.HasPrefix(t, "obj"):
		return "object", true
	case t == "array" || strings.HasPrefix(t, "list") || strings.HasPrefix(t, "arr"):
		return "array", true
	case t == "null":
		return "null", true
	}
	return "", false
}

// compileSchema reads a schema. A missing or null schema accepts anything.
func compileSchema(raw json.RawMessage) (*schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "true" {
		return &schema{}, nil
	}
	if string(raw) == "false" {
		return &schema{never: true}, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("a schema must be a JSON object or a boolean")
	}
	s := &schema{}
	if t, ok := m["type"]; ok {
		var names []string
		var one string
		if err := json.Unmarshal(t, &one); err == nil {
			names = []string{one}
		} else if err := json.Unmarshal(t, &names); err != nil {
			return nil, errors.New(`"type" must be a string or a list of strings`)
		}
		for _, n := range names {
			if nt, ok := normalizeType(n); ok {
				s.types = append(s.types, nt)
			} else {
				// A type name this subset does not know constrains nothing it can check.
				s.types = nil
				break
			}
		}
	}
	if p, ok := m["properties"]; ok && string(p) != "null" {
		var props map[string]json.RawMessage
		if err := json.Unmarshal(p, &props); err != nil {
			return nil, errors.New(`"properties" must be an object`)
		}
		s.props = make(map[string]*schema, len(props))
		for name, sub := range props {
			c, err := compileSchema(sub)
			if err != nil {
				return nil, fmt.Errorf("property %q: %w", name, err)
			}
			s.props[name] = c
		}
	}
	if r, ok := m["required"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &s.required); err != nil {
			return nil, errors.New(`"required" must be a list of strings`)
		}
	}
	if e, ok := m["enum"]; ok && string(e) != "null" {
		var vals []json.RawMessage
		if err := json.Unmarshal(e, &vals); err != nil {
			return nil, errors.New(`"enum" must be a list`)
		}
		for _, v := range vals {
			d, err := decodeValue(v)
			if err != nil {
				return nil, fmt.Errorf(`"enum": %w`, err)
			}
			s.enum = append(s.enum, d)
		}
		if s.enum == nil {
			s.enum = []any{}
		}
	}
	if c, ok := m["const"]; ok {
		d, err := decodeValue(c)
		if err != nil {
			return nil, fmt.Errorf(`"const": %w`, err)
		}
		s.hasConst, s.konst = true, d
	}
	if a, ok := m["additionalProperties"]; ok {
		switch strings.TrimSpace(string(a)) {
		case "false":
			s.noExtra = true
		case "true", "null":
		default:
			c, err := compileSchema(a)
			if err != nil {
				return nil, fmt.Errorf(`"additionalProperties": %w`, err)
			}
			s.extra = c
		}
	}
	if it, ok := m["items"]; ok && it[0] == '{' {
		c, err := compileSchema(it)
		if err != nil {
			return nil, fmt.Errorf(`"items": %w`, err)
		}
		s.items = c
	}
	return s, nil
}

// decodeValue decodes JSON keeping numbers as json.Number.
func decodeValue(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}

// allows reports whether the schema's type admits a JSON type name.
func (s *schema) allows(t string) bool {
	if len(s.types) == 0 {
		return true
	}
	for _, a := range s.types {
		if a == t || a == "number" && t == "integer" {
			return true
		}
	}
	return false
}

// validate checks a decoded value (numbers as json.Number) and returns the first violation, naming it by a
// path from $ (the arguments object).
func (s *schema) validate(v any, path string) error {
	if s.never {
		return fmt.Errorf("%s: no value is allowed", path)
	}
	t := typeOf(v)
	if !s.allows(t) {
		return fmt.Errorf("%s: want %s, got %s", path, strings.Join(s.types, " or "), t)
	}
	if s.hasConst && !equalJSON(v, s.konst) {
		return fmt.Errorf("%s: %s is not %s", path, show(v), show(s.konst))
	}
	if s.enum != nil {
		ok := false
		for _, e := range s.enum {
			if equalJSON(v, e) {
				ok = true
				break
			}
		}
		if !ok {
			shown := make([]string, len(s.enum))
			for i, e := range s.enum {
				shown[i] = show(e)
			}
			return fmt.Errorf("%s: %s is not one of %s", path, show(v), strings.Join(shown, ", "))
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for _, r := range s.required {
			if _, ok := v[r]; !ok {
				return fmt.Errorf("%s: missing required property %q", path, r)
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := s.props[k]
			if sub == nil {
				if s.noExtra {
					return fmt.Errorf("%s: property %q is not allowed", path, k)
				}
				sub = s.extra
			}
			if sub != nil {
				if err := sub.validate(v[k], path+pathKey(k)); err != nil {
					return err
				}
			}
		}
	case []any:
		if s.items != nil {
			for i, e := range v {
				if err := s.items.validate(e, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func pathKey(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return "[" + strconv.Quote(k) + "]"
		}
	}
	if k == "" {
		return `[""]`
	}
	return "." + k
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if isInteger(v) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

// isInteger: JSON Schema counts 3.0 as an integer.
func isInteger(n json.Number) bool {
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && !math.IsInf(f, 0) && f == math.Trunc(f)
}

func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		fa, ea := strconv.ParseFloat(string(a), 64)
		fb, eb := strconv.ParseFloat(string(b), 64)
		return ea == nil && eb == nil && fa == fb
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalJSON(va, vb) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}
