package toolcall

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSchemaValidate(t *testing.T) {
	t.Parallel()
	person := `{"type": "object", "properties": {
		"name": {"type": "string"},
		"age": {"type": "integer"},
		"height": {"type": "number"},
		"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
		"address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"], "additionalProperties": false},
		"nickname": {"type": ["string", "null"]},
		"kind": {"const": "person"},
		"extra": {"description": "no type: anything"}},
		"required": ["name"]}`
	cases := []struct {
		name, schema, value string
		err                 string // "" for valid; else a substring of the error
	}{
		{"valid", person, `{"name": "Ada", "age": 36, "height": 1.65, "tags": ["a"], "address": {"zip": "02134"}, "nickname": null, "kind": "person", "extra": [1]}`, ""},
		{"integer as 3.0", person, `{"name": "Ada", "age": 3.0}`, ""},
		{"missing required", person, `{"age": 1}`, `$: missing required property "name"`},
		{"wrong type", person, `{"name": 7}`, "$.name: want string, got integer"},
		{"not an integer", person, `{"name": "Ada", "age": 3.5}`, "$.age: want integer, got number"},
		{"enum in items", person, `{"name": "Ada", "tags": ["a", "c"]}`, `$.tags[1]: "c" is not one of "a", "b"`},
		{"nested required", person, `{"name": "Ada", "address": {}}`, `$.address: missing required property "zip"`},
		{"additional property", person, `{"name": "Ada", "address": {"zip": "1", "city": "x"}}`, `$.address: property "city" is not allowed`},
		{"type list", person, `{"name": "Ada", "nickname": 3}`, "$.nickname: want string or null, got integer"},
		{"const", person, `{"name": "Ada", "kind": "robot"}`, `$.kind: "robot" is not "person"`},
		{"additional schema", `{"additionalProperties": {"type": "integer"}}`, `{"a": 1, "b": "x"}`, "$.b: want integer, got string"},
		{"odd key path", `{"additionalProperties": false}`, `{"a b": 1}`, `property "a b" is not allowed`},
		{"false schema", `{"properties": {"x": false}}`, `{"x": 1}`, "$.x: no value is allowed"},
		{"python type names", `{"properties": {"n": {"type": "int"}, "f": {"type": "float"}, "l": {"type": "list"}, "d": {"type": "dict"}}}`, `{"n": 1, "f": 0.5, "l": [], "d": {}}`, ""},
		{"python type names reject", `{"properties": {"n": {"type": "int"}}}`, `{"n": "1"}`, "$.n: want integer, got string"},
		{"unknown type name constrains nothing", `{"properties": {"x": {"type": "decimal"}}}`, `{"x": "1"}`, ""},
		{"unchecked keywords", `{"properties": {"x": {"type": "string", "pattern": "^a$", "anyOf": [{"minLength": 9}]}}}`, `{"x": "b"}`, ""},
		{"enum numbers", `{"properties": {"x": {"enum": [1, 2.5]}}}`, `{"x": 1.0}`, ""},
		{"nil schema", ``, `{"anything": [1, {"b": null}]}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := compileSchema(json.RawMessage(c.schema))
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodeValue([]byte(c.value))
			if err != nil {
				t.Fatal(err)
			}
			err = s.validate(v, "$")
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want %q", err, c.err)
			}
		})
	}
}

func TestSchemaCompileErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`[]`, `"x"`, `{"type": 3}`, `{"properties": []}`, `{"required": [1]}`, `{"enum": {}}`, `{"properties": {"a": {"type": {}}}}`, `{"additionalProperties": 5}`} {
		if _, err := compileSchema(json.RawMessage(s)); err == nil {
			t.Errorf("%s: no error", s)
		}
	}
}

func TestCheckArguments(t *testing.T) {
	t.Parallel()
	tools, err := compileTools([]Tool{{Name: "f", Parameters: json.RawMessage(`{"type": "object", "properties": {"a": {"type": "integer"}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	f := tools["f"]
	for args, want := range map[string]error{
		`{"a": 1}`:    nil,
		`{"a": "x"}`:  ErrInvalidArguments,
		`[1]`:         ErrInvalidArguments,
		`{"a": 1} {}`: ErrMalformed,
		`{"a": tru}`:  ErrMalformed,
		``:            ErrMalformed,
	} {
		if detail, kind := f.check(args); kind != want {
			t.Errorf("%q: %v (%s), want %v", args, kind, detail, want)
		}
	}
}

func TestTypedValue(t *testing.T) {
	t.Parallel()
	props, err := compileSchema(json.RawMessage(`{"properties": {
		"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
		"a": {"type": "array"}, "o": {"type": "object"}, "in": {"type": ["integer", "null"]}, "sn": {"type": ["string", "null"]},
		"any": {"description": "untyped"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ param, value, want string }{
		{"s", "42", `"42"`},
		{"s", "  padded ", `"  padded "`},
		{"i", "42", `42`},
		{"i", " 42 ", `42`},
		{"i", "4.5", `"4.5"`},
		{"i", "forty", `"forty"`},
		{"n", "4.50", `4.50`},
		{"n", "-1e3", `-1e3`},
		{"b", "true", `true`},
		{"b", "False", `false`},
		{"b", "yes", `"yes"`},
		{"a", `[1, "two"]`, `[1,"two"]`},
		{"a", `{"x": 1}`, `"{\"x\": 1}"`},
		{"o", "{\n  \"k\": [1, 2]\n}", `{"k":[1,2]}`},
		{"in", "null", `null`},
		{"in", "None", `null`},
		{"in", "7", `7`},
		{"sn", "null", `null`},
		{"sn", "nil", `"nil"`},
		{"any", "42", `"42"`},
		{"undeclared", "42", `"42"`},
		{"s", "<b>&</b>", `"<b>&</b>"`},
	}
	for _, c := range cases {
		if got := typedValue(c.value, props.props[c.param]); got != c.want {
			t.Errorf("%s %q: %s, want %s", c.param, c.value, got, c.want)
		}
	}
}

func TestParseBuiltinCall(t *testing.T) {
	t.Parallel()
	cases := []struct{ src, name, args, err string }{
		{`brave_search.call(query="x")`, "brave_search", `{"query":"x"}`, ""},
		{` wolfram_alpha . call ( query = 'a\'b' , n=-2.5e1, ok=False, none=None, ) `, "wolfram_alpha", `{"query":"a'b","n":-2.5e1,"ok":false,"none":null}`, ""},
		{`f.call(x=[1, (2, 3)], y={"k": ['v']}, z="\u00e9\x41\n")`, "f", `{"x":[1,[2,3]],"y":{"k":["v"]},"z":"éA\n"}`, ""},
		{`f.call()`, "f", `{}`, ""},
		{`print("hi")`, "", "", "not a NAME.call"},
		{`math.sqrt(2)`, "", "", "not a NAME.call"},
		{`f.call("positional")`, "f", "", "expected a keyword argument"},
		{`f.call(x=1) trailing`, "f", "", "text after the call"},
		{`f.call(x=unknown)`, "f", "", "not a literal"},
		{`f.call(x="open`, "f", "", "unexpected end"},
		{`f.call(x=1`, "f", "", "unexpected end"},
	}
	for _, c := range cases {
		name, args, err := parseBuiltinCall(c.src)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) || name != c.name {
				t.Errorf("%s: %q %q %v, want error %q", c.src, name, args, err, c.err)
			}
		case err != nil || name != c.name || args != c.args:
			t.Errorf("%s: %q %q %v, want %q %q", c.src, name, args, err, c.name, c.args)
		}
	}
}

func TestParseTools(t *testing.T) {
	t.Parallel()
	tools, err := ParseTools(json.RawMessage(`[{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}, {"type": "web_search"}, {"function": {"name": "b"}}]`))
	if err != nil || len(tools) != 2 || tools[0].Name != "a" || string(tools[0].Parameters) != `{"type": "object"}` || tools[1].Name != "b" {
		t.Fatalf("%+v %v", tools, err)
	}
	for _, bad := range []string{`{}`, `[{"type": "function"}]`, `[1]`} {
		if _, err := ParseTools(json.RawMessage(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if tools, err := ParseTools(nil); tools != nil || err != nil {
		t.Fatal("nil tools")
	}
}
