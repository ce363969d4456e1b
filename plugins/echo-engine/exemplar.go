package echo

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// exemplar makes up a JSON value that matches schema, the echo engine's stand-in for constrained decoding:
// strings say text, objects have their required properties (all of them when none are marked required),
// arrays their least number of items, and enum, const, oneOf/anyOf take their first option. Formats the
// engine knows (date, date-time, time, uuid, email) get a value of that format. It covers the schemas
// clients' structured-output helpers send; a schema it cannot satisfy is an error.
func exemplar(schema []byte, text string) (json.RawMessage, error) {
	var s any
	if len(schema) == 0 {
		s = map[string]any{}
	} else if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
	}
	root, _ := s.(map[string]any)
	v, err := exemplarOf(s, root, text, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func exemplarOf(s any, root map[string]any, text string, depth int) (any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("the schema nests deeper than 32 levels")
	}
	switch s := s.(type) {
	case bool:
		if !s {
			return nil, fmt.Errorf("a schema of false matches nothing")
		}
		return text, nil
	case map[string]any:
		return exemplarOfObject(s, root, text, depth)
	}
	return nil, fmt.Errorf("a schema must be an object or a boolean, not %T", s)
}

func exemplarOfObject(s, root map[string]any, text string, depth int) (any, error) {
	if ref, ok := s["$ref"].(string); ok {
		target, err := resolveRef(root, ref)
		if err != nil {
			return nil, err
		}
		return exemplarOf(target, root, text, depth+1)
	}
	if c, ok := s["const"]; ok {
		return c, nil
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0], nil
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			return exemplarOf(alts[0], root, text, depth+1)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
		return exemplarOf(all[0], root, text, depth+1)
	}
	typ := s["type"]
	if ts, ok := typ.([]any); ok && len(ts) > 0 {
		typ = ts[0]
	}
	if typ == nil {
		if _, ok := s["properties"]; ok {
			typ = "object"
		} else if _, ok := s["items"]; ok {
			typ = "array"
		}
	}
	switch typ {
	case "object", nil:
		return exemplarObject(s, root, text, depth)
	case "array":
		n := 0
		if m, ok := s["minItems"].(float64); ok {
			n = int(m)
		}
		items := make([]any, 0, n)
		for range min(n, 64) {
			v, err := exemplarOf(orEmpty(s["items"]), root, text, depth+1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return items, nil
	case "string":
		return exemplarString(s, text), nil
	case "integer":
		return int64(exemplarNumber(s)), nil
	case "number":
		return exemplarNumber(s), nil
	case "boolean":
		return true, nil
	case "null":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown type %v", typ)
}

func exemplarObject(s, root map[string]any, text string, depth int) (any, error) {
	props, _ := s["properties"].(map[string]any)
	var names []string
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if n, ok := r.(string); ok {
				names = append(names, n)
			}
		}
	} else {
		for n := range props {
			names = append(names, n)
		}
	}
	// Properties in the schema's order would need an ordered decode; sorted names keep the output stable.
	slices.Sort(names)
	out := make(orderedObject, 0, len(names))
	for _, n := range names {
		v, err := exemplarOf(orEmpty(props[n]), root, text, depth+1)
		if err != nil {
			return nil, fmt.Errorf("property %q: %w", n, err)
		}
		out = append(out, member{n, v})
	}
	return out, nil
}

func exemplarString(s map[string]any, text string) string {
	switch s["format"] {
	case "date":
		return "2026-12-01"
	case "date-time":
		return "2026-12-01T12:00:00Z"
	case "time":
		return "12:00:00Z"
	case "uuid":
		return "00000000-0000-4000-8000-000000000000"
	case "email":
		return "echo@example.com"
	}
	text = strings.TrimSpace(text)
	if m, ok := s["maxLength"].(float64); ok && len([]rune(text)) > int(m) {
		text = string([]rune(text)[:int(m)])
	}
	if m, ok := s["minLength"].(float64); ok {
		for len([]rune(text)) < int(m) {
			text += "."
		}
	}
	return text
}

func exemplarNumber(s map[string]any) float64 {
	v := 0.0
	if m, ok := s["minimum"].(float64); ok {
		v = m
	}
	if m, ok := s["exclusiveMinimum"].(float64); ok {
		v = m + 1
	}
	return v
}

func resolveRef(root map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, fmt.Errorf("$ref %q: only references into the schema itself are supported", ref)
	}
	var cur any = root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
	}
	return cur, nil
}

func orEmpty(s any) any {
	if s == nil {
		return map[string]any{}
	}
	return s
}

type member struct {
	k string
	v any
}

// orderedObject is a JSON object that keeps its members' order.
type orderedObject []member

func (o orderedObject) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.k)
		v, err := json.Marshal(m.v)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}
