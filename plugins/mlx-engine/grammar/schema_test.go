package grammar

import (
	"errors"
	"strings"
	"testing"
)

// TestSchemaAccepts compiles schemas and checks texts against the automaton: the ones listed under match are
// complete sentences, the ones under reject are not.
func TestSchemaAccepts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		schema string
		opts   Options
		match  []string
		reject []string
	}{
		"object in schema order": {
			schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false}`,
			match:  []string{`{"b":""}`, `{"a":1,"b":"x"}`, `{"a": -0, "b": "x", "c": true}`, `{"b":"x","c":false}`},
			reject: []string{`{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"b":"x",}`, `{"b" :"x"}`, `{"b":"x" ,"c":true}`, `{"b":"x","d":1}`},
		},
		"whitespace bounded": {
			schema: `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`,
			opts:   Options{Whitespace: 2},
			match:  []string{`{"a":[1,2]}`, "{\n \"a\": [ 1,\n 2 ]\n}", `{  "a":  [  ]  }`},
			reject: []string{`{   "a":[]}`, ` {"a":[]}`, `{"a":[]} `, `{"a":[1 ,2]}`},
		},
		"no whitespace": {
			schema: `{"type":"array","items":{"type":"null"}}`,
			opts:   Options{Whitespace: NoWhitespace},
			match:  []string{`[]`, `[null,null]`},
			reject: []string{`[ ]`, `[null, null]`},
		},
		"numbers bounded": {
			schema: `{"type":"array","items":{"type":"number"}}`,
			match:  []string{`[0,-1,1.5,1e5,2E-10,-0.25e+3,123456789012345,0.123456789012345]`},
			reject: []string{`[01]`, `[1.]`, `[.5]`, `[1e]`, `[+1]`, `[1234567890123456]`, `[0.1234567890123456]`, `[1e100]`, `[NaN]`},
		},
		"integer": {
			schema: `{"type":"integer"}`,
			match:  []string{`0`, `-7`, `42`},
			reject: []string{`1.0`, `1e3`, `-`, `00`},
		},
		"type list": {
			schema: `{"type":["string","null"]}`,
			match:  []string{`null`, `"x"`},
			reject: []string{`1`, `true`},
		},
		"string escapes and unicode": {
			schema: `{"type":"string"}`,
			match:  []string{`"a\"b\\c\/\n\t\u00e9\uFFFF"`, `"naïve 😀"`, `""`},
			reject: []string{`"a`, "\"\n\"", `"\x"`, `"\ud800"`, `"\u12"`, `"a"b"`},
		},
		"length in characters": {
			schema: `{"type":"string","minLength":2,"maxLength":3}`,
			match:  []string{`"ab"`, `"ééé"`, `"\n\"x"`, `"😀😀"`},
			reject: []string{`"a"`, `"abcd"`, `"é"`},
		},
		"enum and const": {
			schema: `{"type":"object","properties":{"e":{"enum":["a",1,null,{"k":[true]}]},"c":{"const":"fixed"}},"required":["e","c"],"additionalProperties":false}`,
			match:  []string{`{"e":"a","c":"fixed"}`, `{"e":1,"c":"fixed"}`, `{"e":null,"c":"fixed"}`, `{"e":{"k":[true]},"c":"fixed"}`},
			reject: []string{`{"e":"b","c":"fixed"}`, `{"e":"a","c":"other"}`, `{"e":2,"c":"fixed"}`},
		},
		"enum filtered by the other keywords": {
			schema: `{"type":"string","enum":["a","abcd",5],"maxLength":3}`,
			match:  []string{`"a"`},
			reject: []string{`"abcd"`, `5`},
		},
		"formats": {
			schema: `{"type":"array","prefixItems":[{"format":"date"},{"format":"time"},{"format":"date-time"},{"format":"uuid"},{"format":"email"},{"format":"ipv4"},{"format":"hostname"}],"items":false}`,
			match:  []string{`["2024-02-28","23:59:59.5+01:00","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","first.last+tag@mail.example.com","192.168.0.255","api.example.org"]`},
			reject: []string{
				`["2024-02-30","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","1.2.3.4","a.co"]`,
				`["2024-13-01","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","1.2.3.4","a.co"]`,
				`["2024-01-01","24:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","1.2.3.4","a.co"]`,
				`["2024-01-01","00:00:00","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","1.2.3.4","a.co"]`,
				`["2024-01-01","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-42661417400","a@b.co","1.2.3.4","a.co"]`,
				`["2024-01-01","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a..b@b.co","1.2.3.4","a.co"]`,
				`["2024-01-01","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","256.2.3.4","a.co"]`,
				`["2024-01-01","00:00:00Z","1999-12-31T00:00:00Z","123e4567-e89b-12d3-a456-426614174000","a@b.co","1.2.3.4","-a.co"]`,
			},
		},
		"pattern": {
			schema: `{"type":"array","prefixItems":[{"pattern":"^[A-Z]{2}\\d+$"},{"pattern":"x"},{"pattern":"^a|b$"},{"pattern":"^[\"\\\\]$"}],"items":false,"minItems":4}`,
			match:  []string{`["AB1","x","a","\""]`, `["ZZ123","axb","ab","\\"]`, `["AB1","x","cb","\\"]`},
			reject: []string{`["A1","x","a","\""]`, `["AB1","y","a","\""]`, `["AB1","x","ca","\""]`, `["AB1","x","a","\"\""]`, `["AB1","x","a","\\\\"]`},
		},
		"pattern dot": {
			schema: `{"pattern":"^.$"}`,
			match:  []string{`"a"`, `"é"`, `"\t"`},
			reject: []string{`"\n"`, `"\r"`, `"\u2028"`, `"😀"`, `"ab"`},
		},
		"arrays": {
			schema: `{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1},"n":{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}},"required":["t","n"],"additionalProperties":false}`,
			match:  []string{`{"t":["a"],"n":[true]}`, `{"t":["a",1],"n":[true,false]}`},
			reject: []string{`{"t":[],"n":[true]}`, `{"t":["a",1,2],"n":[true]}`, `{"t":[1],"n":[true]}`, `{"t":["a"],"n":[]}`, `{"t":["a"],"n":[true,true,true]}`},
		},
		"map": {
			schema: `{"type":"object","additionalProperties":{"type":"integer"}}`,
			match:  []string{`{}`, `{"a":1,"b":2}`, `{"":0}`},
			reject: []string{`{"a":"x"}`, `{"a":1,}`},
		},
		"open object without properties": {
			schema: `{"type":"object"}`,
			match:  []string{`{}`, `{"a":[1,{"b":null}],"c":"d"}`},
			reject: []string{`[]`, `{"a"}`},
		},
		"strict object without properties": {
			schema: `{"type":"object"}`,
			opts:   Options{Strict: true},
			match:  []string{`{}`},
			reject: []string{`{"a":1}`},
		},
		"required beyond properties": {
			schema: `{"type":"object","properties":{"a":{"type":"null"}},"required":["z"],"additionalProperties":{"type":"boolean"}}`,
			match:  []string{`{"z":true}`, `{"a":null,"z":false}`},
			reject: []string{`{"a":null}`, `{"z":1}`},
		},
		"anyOf with type": {
			schema: `{"type":"string","anyOf":[{"maxLength":1},{"type":"integer"},{"format":"date"}]}`,
			match:  []string{`"a"`, `"2020-01-01"`},
			reject: []string{`1`, `"ab"`},
		},
		"local refs": {
			schema: `{"definitions":{"p":{"type":"integer"}},"$defs":{"q":{"$ref":"#/definitions/p"}},"type":"array","items":{"$ref":"#/$defs/q"}}`,
			match:  []string{`[1,2]`},
			reject: []string{`["1"]`},
		},
		"recursive ref bounded by depth": {
			schema: `{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`,
			opts:   Options{MaxDepth: 3},
			match:  []string{`[]`, `[[],[[]]]`, `[[[[]]]]`},
			reject: []string{`[[[[[]]]]]`},
		},
		"any value": {
			schema: `true`,
			match:  []string{`1`, `"s"`, `{"a":[{},[]]}`, `null`},
			reject: []string{``, `{`, `[1,]`},
		},
		"allOf of one": {
			schema: `{"allOf":[{"type":"boolean"}],"description":"flag"}`,
			match:  []string{`true`},
			reject: []string{`1`},
		},
		"unknown keywords ignored": {
			schema: `{"type":"boolean","x-vendor":{"not":{}},"nullable":true}`,
			match:  []string{`false`},
			reject: []string{`null`},
		},
		"integer range": {
			schema: `{"type":"array","items":{"type":"integer","minimum":-12,"maximum":105}}`,
			match:  []string{`[-12,-9,-1,0,7,10,99,100,105]`},
			reject: []string{`[-13]`, `[106]`, `[110]`, `[-0]`, `[1000]`, `[-100]`},
		},
		"exclusive bounds, fractional bounds": {
			schema: `{"type":"array","prefixItems":[{"type":"integer","exclusiveMinimum":0},{"type":"integer","maximum":2.5},{"type":"integer","exclusiveMaximum":-3.5}],"items":false}`,
			match:  []string{`[1,2,-4]`, `[999,-7,-100]`},
			reject: []string{`[0,2,-4]`, `[1,3,-4]`, `[1,2,-3]`},
		},
		"number range": {
			schema: `{"type":"array","items":{"type":"number","minimum":-1,"maximum":3}}`,
			match:  []string{`[-1,-0.5,0,0.25,2.999,3,-0.0]`},
			reject: []string{`[-1.5]`, `[3.5]`, `[4]`, `[1e0]`, `[-2]`},
		},
		"one-sided range": {
			schema: `{"type":"number","minimum":0}`,
			match:  []string{`0`, `12.5`, `999999999999999`},
			reject: []string{`-1`, `-0.5`},
		},
		"uniqueItems false": {
			schema: `{"type":"array","uniqueItems":false,"items":{"type":"integer"}}`,
			match:  []string{`[1,1]`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := compileSchema(t, []byte(tc.schema), tc.opts)
			for _, s := range tc.match {
				if !g.matches([]byte(s)) {
					t.Errorf("%s does not match", s)
				}
			}
			for _, s := range tc.reject {
				if g.matches([]byte(s)) {
					t.Errorf("%s matches", s)
				}
			}
		})
	}
}

// TestSchemaRefused checks that each feature the compiler cannot enforce is refused with its keyword and
// JSON pointer.
func TestSchemaRefused(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		schema      string
		keyword     string
		pointer     string
		unsupported bool
	}{
		"not":                   {`{"type":"object","properties":{"a":{"not":{"type":"string"}}}}`, "not", "/properties/a/not", true},
		"if":                    {`{"if":{"type":"string"},"then":{"maxLength":3}}`, "if", "/if", true},
		"then":                  {`{"then":{"maxLength":3}}`, "then", "/then", true},
		"else":                  {`{"else":{"maxLength":3}}`, "else", "/else", true},
		"patternProperties":     {`{"type":"object","patternProperties":{"^x":{}}}`, "patternProperties", "/patternProperties", true},
		"propertyNames":         {`{"propertyNames":{"maxLength":3}}`, "propertyNames", "/propertyNames", true},
		"dependentSchemas":      {`{"properties":{"a":{"type":"object","dependentSchemas":{"b":{}}}}}`, "dependentSchemas", "/properties/a/dependentSchemas", true},
		"dependentRequired":     {`{"dependentRequired":{"a":["b"]}}`, "dependentRequired", "/dependentRequired", true},
		"unevaluatedProperties": {`{"unevaluatedProperties":false}`, "unevaluatedProperties", "/unevaluatedProperties", true},
		"unevaluatedItems":      {`{"type":"array","unevaluatedItems":false}`, "unevaluatedItems", "/unevaluatedItems", true},
		"contains":              {`{"type":"array","contains":{"type":"integer"}}`, "contains", "/contains", true},
		"multipleOf":            {`{"type":"integer","multipleOf":2}`, "multipleOf", "/multipleOf", true},
		"uniqueItems":           {`{"type":"array","uniqueItems":true}`, "uniqueItems", "/uniqueItems", true},
		"additionalItems":       {`{"type":"array","additionalItems":false}`, "additionalItems", "/additionalItems", true},
		"draft 7 tuple":         {`{"type":"array","items":[{"type":"string"}]}`, "items", "/items", true},
		"allOf of two":          {`{"allOf":[{"type":"string"},{"maxLength":2}]}`, "allOf", "/allOf", true},
		"anyOf with siblings":   {`{"anyOf":[{"type":"string"}],"maxLength":2}`, "maxLength", "/maxLength", true},
		"ref with siblings":     {`{"$defs":{"a":{}},"$ref":"#/$defs/a","maxLength":2}`, "maxLength", "/maxLength", true},
		"remote ref":            {`{"$ref":"https://example.com/s.json"}`, "$ref", "/$ref", true},
		"anchor ref":            {`{"$ref":"#node"}`, "$ref", "/$ref", true},
		"ref cycle":             {`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`, "$ref", "/$defs/a/anyOf/0/$ref", true},
		"unknown format":        {`{"type":"string","format":"ipv6"}`, "format", "/format", true},
		"format with pattern":   {`{"type":"string","format":"date","pattern":"^2"}`, "format", "/format", true},
		"lookahead pattern":     {`{"type":"string","pattern":"^(?=a)"}`, "pattern", "/pattern", true},
		"backreference":         {`{"type":"string","pattern":"(a)\\1"}`, "pattern", "/pattern", true},
		"anchor inside":         {`{"type":"string","pattern":"a(^b)"}`, "pattern", "/pattern", true},
		"word boundary":         {`{"type":"string","pattern":"\\bword"}`, "pattern", "/pattern", true},
		"pattern with length":   {`{"type":"string","pattern":"a","maxLength":3}`, "pattern", "/pattern", true},
		"minProperties":         {`{"type":"object","properties":{"a":{}},"minProperties":1}`, "minProperties", "/minProperties", true},
		"nested $id":            {`{"properties":{"a":{"$id":"other.json"}}}`, "$id", "/properties/a/$id", true},
		"dynamicRef":            {`{"$dynamicRef":"#meta"}`, "$dynamicRef", "/$dynamicRef", true},
		"long minLength":        {`{"type":"string","minLength":100000}`, "minLength", "/minLength", true},
		"required not allowed":  {`{"type":"object","required":["a"],"additionalProperties":false}`, "required", "/required", true},
		"bad type":              {`{"type":"text"}`, "type", "/type", false},
		"bad ref":               {`{"$ref":"#/$defs/missing"}`, "$ref", "/$ref", false},
		"bad minLength":         {`{"type":"string","minLength":-1}`, "minLength", "/minLength", false},
		"schema not an object":  {`{"properties":{"a":3}}`, "schema", "/properties/a", false},
		"escaped pointer":       {`{"properties":{"a/b~c":{"not":{}}}}`, "not", "/properties/a~1b~0c/not", true},
		"pointer through a ref": {`{"$defs":{"x":{"type":"string","format":"uri"}},"properties":{"a":{"$ref":"#/$defs/x"}}}`, "format", "/$defs/x/format", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := JSONSchema([]byte(tc.schema), Options{})
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SchemaError", err)
			}
			if se.Keyword != tc.keyword || se.Pointer != tc.pointer || se.Unsupported != tc.unsupported {
				t.Errorf("got keyword %q at %q (unsupported %t), want %q at %q (%t): %v", se.Keyword, se.Pointer,
					se.Unsupported, tc.keyword, tc.pointer, tc.unsupported, err)
			}
			if !strings.Contains(err.Error(), tc.keyword) || !strings.Contains(err.Error(), tc.pointer) {
				t.Errorf("message %q does not name %q and %q", err, tc.keyword, tc.pointer)
			}
		})
	}
}

func TestSchemaMalformedJSON(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]string{
		"truncated":     `{"type":`,
		"trailing data": `{} {}`,
		"duplicate key": `{"type":"string","type":"integer"}`,
		"too deep":      strings.Repeat("[", 200) + strings.Repeat("]", 200),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := JSONSchema([]byte(s), Options{}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestSchemaMatchesNothing(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]string{
		"false":              `false`,
		"required false":     `{"type":"object","properties":{"a":false},"required":["a"]}`,
		"empty enum":         `{"enum":[]}`,
		"enum of wrong type": `{"type":"string","enum":[1,2]}`,
		"endless recursion":  `{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"}`,
	} {
		t.Run(name, func(t *testing.T) {
			n, err := JSONSchema([]byte(s), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Compile(n); !errors.Is(err, ErrNoMatch) {
				t.Errorf("Compile: %v, want ErrNoMatch", err)
			}
		})
	}
}
