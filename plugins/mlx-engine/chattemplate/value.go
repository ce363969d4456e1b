package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of JSON values handed to templates (tool schemas, tool call arguments).
const maxJSONDepth = 64

// jsonValue converts JSON to a template value, keeping the order of object members: tojson must write tool
// schemas and arguments in the order the client sent them, as Python's json.dumps and JavaScript do. Integers
// stay integers.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, ok := k.(string)
				if !ok {
					return jinja.Value{}, fmt.Errorf("object key %v is not a string", k)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		}
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// messageValue builds the dict a template sees for one message: role, content, then the extra fields in the
// order given.
func messageValue(m Message) (jinja.Value, error) {
	d := jinja.NewDict()
	d.AsDict().Set("role", jinja.NewString(m.Role))
	d.AsDict().Set("content", jinja.NewString(m.Content))
	if len(bytes.TrimSpace(m.Extra)) == 0 {
		return d, nil
	}
	extra, err := jsonValue(m.Extra)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("extra fields: %w", err)
	}
	if !extra.IsDict() {
		return jinja.Value{}, errors.New("extra fields must be a JSON object")
	}
	for _, k := range extra.AsDict().OrderedKeys() {
		if k == "role" || k == "content" {
			return jinja.Value{}, fmt.Errorf("extra fields must not hold %q", k)
		}
		v, _ := extra.AsDict().Get(k)
		d.AsDict().Set(k, v)
	}
	return d, nil
}

// goValue converts a Go value from Input.Vars; JSON-shaped values (json.RawMessage) keep their member order.
func goValue(v any) (jinja.Value, error) {
	switch t := v.(type) {
	case json.RawMessage:
		return jsonValue(t)
	case jinja.Value:
		return t, nil
	}
	val := jinja.FromGoValue(v)
	if val.IsUndefined() {
		return val, fmt.Errorf("unsupported type %T", v)
	}
	return val, nil
}

// isBlank reports whether raw JSON is absent or null.
func isBlank(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
