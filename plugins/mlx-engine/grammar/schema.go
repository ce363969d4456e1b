package grammar

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// SchemaError is a JSON schema the compiler refuses: a feature it does not enforce, or a malformed schema. It
// names the keyword and where it is, so that the gateway can answer 400 with both.
type SchemaError struct {
	// Pointer is the JSON pointer (RFC 6901) of the keyword in the schema document, e.g. "/properties/a/not".
	Pointer string
	// Keyword is the keyword refused, e.g. "not".
	Keyword string
	// Reason says why.
	Reason string
	// Unsupported is true for valid JSON Schema that this package does not enforce, false for a malformed
	// schema.
	Unsupported bool
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("json schema: %s at #%s: %s", e.Keyword, e.Pointer, e.Reason)
}

// Keywords that constrain values and are enforced.
var supportedKeywords = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "prefixItems": true, "minItems": true, "maxItems": true,
	"anyOf": true, "oneOf": true, "allOf": true, "$ref": true, "format": true, "minLength": true,
	"maxLength": true, "pattern": true, "minProperties": true, "maxProperties": true, "uniqueItems": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
}

// Keywords that constrain values and are refused: a grammar that ignored them could generate invalid output.
// Every other keyword is an annotation (title, description, default, examples, $defs, ...) or unknown to
// JSON Schema, which validators ignore, and so is ignored here.
var refusedKeywords = map[string]string{
	"not":                   "negation cannot be turned into a grammar",
	"if":                    "conditional schemas are not supported",
	"then":                  "conditional schemas are not supported",
	"else":                  "conditional schemas are not supported",
	"patternProperties":     "property names by pattern are not supported",
	"propertyNames":         "constraints on property names are not supported",
	"dependentSchemas":      "dependent schemas are not supported",
	"dependentRequired":     "dependent required properties are not supported",
	"dependencies":          "dependencies are not supported",
	"unevaluatedProperties": "unevaluated properties are not supported",
	"unevaluatedItems":      "unevaluated items are not supported",
	"contains":              "contains is not supported",
	"minContains":           "contains is not supported",
	"maxContains":           "contains is not supported",
	"additionalItems":       "draft 7 tuples are not supported; use prefixItems",
	"$dynamicRef":           "dynamic references are not supported",
	"$dynamicAnchor":        "dynamic references are not supported",
	"$recursiveRef":         "recursive references are not supported; use $ref",
	"$recursiveAnchor":      "recursive references are not supported; use $ref",
	"multipleOf":            "multipleOf is not enforced",
	"contentSchema":         "contentSchema is not supported",
}

// Bounds on what a schema may ask for. Lengths and counts above the caps are generated up to the cap, which
// keeps every output valid; minimums above them are refused.
const (
	MaxStringLength = 1000
	MaxItems        = 4096
	maxSchemaWork   = 1 << 16 // subschemas compiled, refs expanded included
)

type types uint8

const (
	tNull types = 1 << iota
	tBool
	tInt
	tNum // numbers that need not be integers; "number" means tNum|tInt
	tStr
	tArr
	tObj
	tAll = tNull | tBool | tInt | tNum | tStr | tArr | tObj
)

var typeNames = map[string]types{
	"null": tNull, "boolean": tBool, "integer": tInt, "number": tNum | tInt, "string": tStr, "array": tArr, "object": tObj,
}

type refFrame struct {
	target *jval
	depth  int
}

type ruleKey struct {
	target  *jval
	depth   int
	allowed types
}

type schemaCompiler struct {
	doc   *jval
	k     *jsonKit
	stack []refFrame
	memo  map[ruleKey]*node
	work  int
}

// JSONSchema compiles a JSON schema into a grammar node. The node matches a subset of the JSON texts valid
// against the schema, chosen to keep the automaton small (properties in schema order, bounded whitespace and
// numbers), and every text it matches validates. Features it cannot enforce are refused with a *SchemaError;
// the package documentation lists them.
func JSONSchema(schema []byte, opts Options) (Node, error) {
	k, err := newJSONKit(opts)
	if err != nil {
		return Node{}, err
	}
	doc, err := parseJSON(schema)
	if err != nil {
		return Node{}, err
	}
	c := &schemaCompiler{doc: doc, k: k, memo: map[ruleKey]*node{}}
	n, err := c.schema(doc, "", 0, tAll)
	if err != nil {
		return Node{}, err
	}
	return Node{n}, nil
}

func malformed(ptr, keyword, format string, args ...any) *SchemaError {
	return &SchemaError{Pointer: ptr, Keyword: keyword, Reason: fmt.Sprintf(format, args...)}
}

func unsupported(ptr, keyword, format string, args ...any) *SchemaError {
	return &SchemaError{Pointer: ptr, Keyword: keyword, Reason: fmt.Sprintf(format, args...), Unsupported: true}
}

// schema compiles the subschema v (at ptr, nesting depth) restricted to the types in allowed.
func (c *schemaCompiler) schema(v *jval, ptr string, depth int, allowed types) (*node, error) {
	c.work++
	if c.work > maxSchemaWork {
		return nil, unsupported(ptr, "schema", "%v: the schema expands to more than %d subschemas", ErrTooLarge, maxSchemaWork)
	}
	if depth > c.k.opts.MaxDepth {
		return neverNode, nil
	}
	switch v.kind {
	case 'b':
		if !v.b {
			return neverNode, nil
		}
		return c.anyOfTypes(allowed, depth), nil
	case 'o':
	default:
		return nil, malformed(ptr, "schema", "a schema must be an object or a boolean")
	}
	// Refuse what cannot be enforced before anything else, so the error names the real obstacle.
	var constraining []string
	for i, key := range v.keys {
		kp := pointerJoin(ptr, key)
		if why, ok := refusedKeywords[key]; ok {
			return nil, unsupported(kp, key, "%s", why)
		}
		switch {
		case key == "$id" && ptr != "":
			return nil, unsupported(kp, key, "$id below the root changes the base of references and is not supported")
		case key == "uniqueItems":
			if val := v.vals[i]; val.kind != 'b' {
				return nil, malformed(kp, key, "must be a boolean")
			} else if val.b {
				return nil, unsupported(kp, key, "unique items are not enforced")
			}
		case supportedKeywords[key]:
			constraining = append(constraining, key)
		}
	}
	has := func(k string) bool { return slices.Contains(constraining, k) }
	// declared narrows allowed by "type".
	declared := tAll
	if t, ok := v.get("type"); ok {
		var err error
		if declared, err = parseTypes(t, pointerJoin(ptr, "type")); err != nil {
			return nil, err
		}
	}
	allowed &= declared
	others := func(except ...string) []string {
		var out []string
		for _, k := range constraining {
			if k != "type" && !slices.Contains(except, k) {
				out = append(out, k)
			}
		}
		return out
	}

	if ref, ok := v.get("$ref"); ok {
		if o := others("$ref"); len(o) > 0 {
			return nil, unsupported(pointerJoin(ptr, o[0]), o[0], "keywords beside $ref are not supported")
		}
		return c.ref(ref, pointerJoin(ptr, "$ref"), depth, allowed)
	}
	if all, ok := v.get("allOf"); ok {
		kp := pointerJoin(ptr, "allOf")
		if all.kind != 'a' || len(all.arr) == 0 {
			return nil, malformed(kp, "allOf", "must be a non-empty array of schemas")
		}
		if len(all.arr) > 1 {
			return nil, unsupported(kp, "allOf", "allOf of more than one schema is not supported")
		}
		if o := others("allOf"); len(o) > 0 {
			return nil, unsupported(pointerJoin(ptr, o[0]), o[0], "keywords beside allOf are not supported")
		}
		return c.schema(all.arr[0], pointerJoin(kp, "0"), depth, allowed)
	}
	if has("anyOf") || has("oneOf") {
		key := "anyOf"
		if !has("anyOf") {
			key = "oneOf"
		}
		kp := pointerJoin(ptr, key)
		if o := others(key); len(o) > 0 {
			return nil, unsupported(pointerJoin(ptr, o[0]), o[0], "keywords beside %s are not supported", key)
		}
		list, _ := v.get(key)
		if list.kind != 'a' || len(list.arr) == 0 {
			return nil, malformed(kp, key, "must be a non-empty array of schemas")
		}
		var alts []*node
		for i, sub := range list.arr {
			n, err := c.schema(sub, pointerJoin(kp, strconv.Itoa(i)), depth, allowed)
			if err != nil {
				return nil, err
			}
			alts = append(alts, n)
		}
		return alt(alts...), nil
	}
	if has("enum") || has("const") {
		return c.enum(v, ptr, depth, allowed, others("enum", "const"))
	}
	if _, ok := v.get("type"); !ok {
		allowed &= inferTypes(constraining)
	}
	return c.typed(v, ptr, depth, allowed)
}

func parseTypes(t *jval, ptr string) (types, error) {
	var names []*jval
	switch t.kind {
	case 's':
		names = []*jval{t}
	case 'a':
		names = t.arr
	default:
		return 0, malformed(ptr, "type", "must be a string or an array of strings")
	}
	var out types
	for _, n := range names {
		ty, ok := typeNames[n.str]
		if n.kind != 's' || !ok {
			return 0, malformed(ptr, "type", "unknown type %s", n.encode(nil))
		}
		out |= ty
	}
	return out, nil
}

// inferTypes narrows a schema without "type" to the types its keywords are about: a schema with properties
// is meant to be an object, though JSON Schema would let any non-object through. Generating only objects
// still generates valid values.
func inferTypes(keys []string) types {
	var t types
	for _, k := range keys {
		switch k {
		case "properties", "required", "additionalProperties", "minProperties", "maxProperties":
			t |= tObj
		case "items", "prefixItems", "minItems", "maxItems", "uniqueItems":
			t |= tArr
		case "minLength", "maxLength", "pattern", "format":
			t |= tStr
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			t |= tNum | tInt
		}
	}
	if t == 0 {
		return tAll
	}
	return t
}

// anyOfTypes is any value of the allowed types.
func (c *schemaCompiler) anyOfTypes(allowed types, depth int) *node {
	if allowed == tAll {
		return c.k.anyValue(depth)
	}
	var alts []*node
	if allowed&tObj != 0 {
		alts = append(alts, c.k.anyObject(depth))
	}
	if allowed&tArr != 0 {
		alts = append(alts, c.k.anyArray(depth))
	}
	return alt(append(alts, c.scalars(allowed, nil, nil, nil)...)...)
}

// scalars is the scalar alternatives of allowed; str, num and integer replace the unconstrained string,
// number and integer when not nil.
func (c *schemaCompiler) scalars(allowed types, str, num, integer *node) []*node {
	var alts []*node
	if allowed&tStr != 0 {
		if str == nil {
			str = anyString
		}
		alts = append(alts, str)
	}
	if num == nil {
		num = numNode
	}
	if integer == nil {
		integer = intNode
	}
	switch {
	case allowed&tNum != 0:
		alts = append(alts, num)
	case allowed&tInt != 0:
		alts = append(alts, integer)
	}
	if allowed&tBool != 0 {
		alts = append(alts, boolNode)
	}
	if allowed&tNull != 0 {
		alts = append(alts, nullNode)
	}
	return alts
}

func (c *schemaCompiler) ref(ref *jval, ptr string, depth int, allowed types) (*node, error) {
	if ref.kind != 's' {
		return nil, malformed(ptr, "$ref", "must be a string")
	}
	if !strings.HasPrefix(ref.str, "#") {
		return nil, unsupported(ptr, "$ref", "only references within the schema (#...) are supported, not %q", ref.str)
	}
	frag, err := url.PathUnescape(ref.str[1:])
	if err != nil {
		return nil, malformed(ptr, "$ref", "bad escape in %q", ref.str)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return nil, unsupported(ptr, "$ref", "references to anchors (%q) are not supported", ref.str)
	}
	target, ok := resolvePointer(c.doc, frag)
	if !ok {
		return nil, malformed(ptr, "$ref", "%q points at nothing", ref.str)
	}
	recursive := false
	for _, f := range c.stack {
		if f.target == target {
			if f.depth == depth {
				return nil, unsupported(ptr, "$ref", "%q refers back to itself without going into a property or item", ref.str)
			}
			recursive = true
		}
	}
	key := ruleKey{target, depth, allowed}
	if n, ok := c.memo[key]; ok {
		return n, nil
	}
	if recursive {
		// A rule of its own per depth: the recursion unrolls at most MaxDepth times, each level once.
		r := &node{kind: kRule, sz: 2}
		c.memo[key] = r
		body, err := c.expand(target, frag, depth, allowed)
		if err != nil {
			return nil, err
		}
		r.kids = []*node{body}
		return r, nil
	}
	body, err := c.expand(target, frag, depth, allowed)
	if err != nil {
		return nil, err
	}
	// A large definition used in many places is built once.
	if body.size() > 1024 && !body.nullable() {
		body = rule(body)
	}
	c.memo[key] = body
	return body, nil
}

func (c *schemaCompiler) expand(target *jval, ptr string, depth int, allowed types) (*node, error) {
	c.stack = append(c.stack, refFrame{target, depth})
	defer func() { c.stack = c.stack[:len(c.stack)-1] }()
	return c.schema(target, ptr, depth, allowed)
}

func valueType(v *jval) types {
	switch v.kind {
	case 'z':
		return tNull
	case 'b':
		return tBool
	case 'n':
		if strings.ContainsAny(string(v.num), ".eE") {
			return tNum
		}
		return tInt
	case 's':
		return tStr
	case 'a':
		return tArr
	}
	return tObj
}

// enum generates the listed values that the rest of the schema also allows: each value's compact text is
// checked against the grammar of the other keywords, so that a value the schema contradicts is never
// generated.
func (c *schemaCompiler) enum(v *jval, ptr string, depth int, allowed types, rest []string) (*node, error) {
	var values []*jval
	if e, ok := v.get("enum"); ok {
		if e.kind != 'a' {
			return nil, malformed(pointerJoin(ptr, "enum"), "enum", "must be an array")
		}
		values = e.arr
	}
	if cv, ok := v.get("const"); ok {
		if _, both := v.get("enum"); both {
			values = slices.DeleteFunc(slices.Clone(values), func(e *jval) bool {
				return string(e.encode(nil)) != string(cv.encode(nil))
			})
		} else {
			values = []*jval{cv}
		}
	}
	var check *Grammar
	if len(rest) > 0 {
		stripped := &jval{kind: 'o'}
		for i, k := range v.keys {
			if k != "enum" && k != "const" {
				stripped.keys = append(stripped.keys, k)
				stripped.vals = append(stripped.vals, v.vals[i])
			}
		}
		n, err := c.schema(stripped, ptr, depth, allowed)
		if err != nil {
			return nil, err
		}
		if check, err = Compile(Node{n}); err != nil && !errors.Is(err, ErrNoMatch) {
			return nil, err
		}
	}
	var alts []*node
	for _, e := range values {
		if valueType(e)&allowed == 0 {
			continue
		}
		text := e.encode(nil)
		if len(rest) > 0 && (check == nil || !check.matches(text)) {
			continue
		}
		alts = append(alts, lit(text))
	}
	return alt(alts...), nil
}

// typed builds the alternatives for each allowed type from the type-specific keywords.
func (c *schemaCompiler) typed(v *jval, ptr string, depth int, allowed types) (*node, error) {
	var alts []*node
	if allowed&tObj != 0 {
		n, err := c.object(v, ptr, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if allowed&tArr != 0 {
		n, err := c.array(v, ptr, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	var str *node
	if allowed&tStr != 0 {
		var err error
		if str, err = c.str(v, ptr); err != nil {
			return nil, err
		}
	}
	var num, integer *node
	if allowed&(tNum|tInt) != 0 {
		lo, hi, ok, err := numberRange(v, ptr)
		if err != nil {
			return nil, err
		}
		if ok {
			num, integer = numRange(lo, hi), intRange(lo, hi)
		}
	}
	return alt(append(alts, c.scalars(allowed, str, num, integer)...)...), nil
}

// count reads a non-negative integer keyword.
func count(v *jval, key, ptr string) (int, bool, error) {
	n, ok := v.get(key)
	if !ok {
		return 0, false, nil
	}
	kp := pointerJoin(ptr, key)
	if n.kind != 'n' {
		return 0, false, malformed(kp, key, "must be a non-negative integer")
	}
	f, err := strconv.ParseFloat(string(n.num), 64)
	if err != nil || f < 0 || f != float64(int64(f)) {
		return 0, false, malformed(kp, key, "must be a non-negative integer")
	}
	if f > 1<<30 {
		f = 1 << 30
	}
	return int(f), true, nil
}

func (c *schemaCompiler) str(v *jval, ptr string) (*node, error) {
	minLen, _, err := count(v, "minLength", ptr)
	if err != nil {
		return nil, err
	}
	maxLen, hasMax, err := count(v, "maxLength", ptr)
	if err != nil {
		return nil, err
	}
	if !hasMax {
		maxLen = -1
	}
	if minLen > MaxStringLength {
		return nil, unsupported(pointerJoin(ptr, "minLength"), "minLength", "more than %d characters", MaxStringLength)
	}
	if maxLen > MaxStringLength {
		maxLen = MaxStringLength
	}
	_, hasLen := v.get("minLength")
	hasLen = hasLen || hasMax
	if f, ok := v.get("format"); ok {
		kp := pointerJoin(ptr, "format")
		if f.kind != 's' {
			return nil, malformed(kp, "format", "must be a string")
		}
		build, ok := formats[f.str]
		if !ok {
			return nil, unsupported(kp, "format", "format %q is not supported", f.str)
		}
		if _, p := v.get("pattern"); p || hasLen {
			return nil, unsupported(kp, "format", "format together with pattern, minLength or maxLength is not supported")
		}
		return seq(quote, build(), quote), nil
	}
	if p, ok := v.get("pattern"); ok {
		kp := pointerJoin(ptr, "pattern")
		if p.kind != 's' {
			return nil, malformed(kp, "pattern", "must be a string")
		}
		if hasLen {
			return nil, unsupported(kp, "pattern", "pattern together with minLength or maxLength is not supported")
		}
		n, err := patternNode(p.str)
		if err != nil {
			return nil, unsupported(kp, "pattern", "%v", err)
		}
		return seq(quote, n, quote), nil
	}
	if maxLen >= 0 && minLen > maxLen {
		return neverNode, nil
	}
	return stringNode(minLen, maxLen), nil
}

func (c *schemaCompiler) array(v *jval, ptr string, depth int) (*node, error) {
	minItems, _, err := count(v, "minItems", ptr)
	if err != nil {
		return nil, err
	}
	maxItems, hasMax, err := count(v, "maxItems", ptr)
	if err != nil {
		return nil, err
	}
	if !hasMax {
		maxItems = -1
	}
	if minItems > MaxItems {
		return nil, unsupported(pointerJoin(ptr, "minItems"), "minItems", "more than %d items", MaxItems)
	}
	if maxItems > MaxItems {
		maxItems = MaxItems
	}
	if maxItems >= 0 && minItems > maxItems {
		return neverNode, nil
	}
	var prefix []*node
	if p, ok := v.get("prefixItems"); ok {
		kp := pointerJoin(ptr, "prefixItems")
		if p.kind != 'a' {
			return nil, malformed(kp, "prefixItems", "must be an array of schemas")
		}
		for i, s := range p.arr {
			n, err := c.schema(s, pointerJoin(kp, strconv.Itoa(i)), depth+1, tAll)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, n)
		}
	}
	rest := c.k.inner(depth)
	if it, ok := v.get("items"); ok {
		kp := pointerJoin(ptr, "items")
		if it.kind == 'a' {
			return nil, unsupported(kp, "items", "items as an array (draft 7 tuples) is not supported; use prefixItems")
		}
		if rest, err = c.schema(it, kp, depth+1, tAll); err != nil {
			return nil, err
		}
	}
	return c.k.tuple(prefix, rest, minItems, maxItems), nil
}

// tuple is an array of minItems to maxItems (< 0: unbounded) items, the first ones from prefix, the rest
// matching rest.
func (k *jsonKit) tuple(prefix []*node, rest *node, minItems, maxItems int) *node {
	if len(prefix) == 0 {
		return k.arrayOf(rest, minItems, maxItems)
	}
	open, closeB := lit([]byte("[")), lit([]byte("]"))
	sep := seq(comma, k.ws)
	// from(i, need): items i onward, at least need in all, item i preceded by a separator unless first.
	var from func(i, need int) *node
	from = func(i, need int) *node {
		if maxItems >= 0 && i >= maxItems {
			return emptyNode
		}
		lead := emptyNode
		if i > 0 {
			lead = sep
		}
		if i >= len(prefix) {
			more := -1
			if maxItems >= 0 {
				more = maxItems - i
			}
			if i == 0 {
				return repeat(rest, need, more, sep)
			}
			return repeat(seq(lead, rest), max(need-i, 0), more, nil)
		}
		one := seq(lead, prefix[i], from(i+1, need))
		if i < need {
			return one
		}
		return optional(one)
	}
	body := seq(from(0, max(minItems, 1)), k.ws, closeB)
	if minItems > 0 {
		return seq(open, k.ws, body)
	}
	return seq(open, k.ws, alt(closeB, body))
}

func (c *schemaCompiler) object(v *jval, ptr string, depth int) (*node, error) {
	var props []objProp
	var names []string
	if p, ok := v.get("properties"); ok {
		kp := pointerJoin(ptr, "properties")
		if p.kind != 'o' {
			return nil, malformed(kp, "properties", "must be an object of schemas")
		}
		for i, name := range p.keys {
			n, err := c.schema(p.vals[i], pointerJoin(kp, name), depth+1, tAll)
			if err != nil {
				return nil, err
			}
			props = append(props, objProp{key: jsonLiteral(name), value: n})
			names = append(names, name)
		}
	}
	// additionalProperties: nil means none may be added.
	var additional *jval
	if a, ok := v.get("additionalProperties"); ok {
		if a.kind != 'o' && a.kind != 'b' {
			return nil, malformed(pointerJoin(ptr, "additionalProperties"), "additionalProperties", "must be a schema")
		}
		if a.kind == 'o' || a.b {
			additional = a
		}
	} else if !c.k.opts.Strict {
		additional = &jval{kind: 'b', b: true}
	}
	nreq := 0
	if r, ok := v.get("required"); ok {
		kp := pointerJoin(ptr, "required")
		if r.kind != 'a' {
			return nil, malformed(kp, "required", "must be an array of strings")
		}
		for _, e := range r.arr {
			if e.kind != 's' {
				return nil, malformed(kp, "required", "must be an array of strings")
			}
			i := slices.Index(names, e.str)
			if i >= 0 {
				if !props[i].required {
					props[i].required = true
					nreq++
				}
				continue
			}
			if additional == nil {
				return nil, unsupported(kp, "required", "property %q is required but additionalProperties does not allow it", e.str)
			}
			n, err := c.schema(additional, pointerJoin(ptr, "additionalProperties"), depth+1, tAll)
			if err != nil {
				return nil, err
			}
			props = append(props, objProp{key: jsonLiteral(e.str), value: n, required: true})
			names = append(names, e.str)
			nreq++
		}
	}
	minProps, _, err := count(v, "minProperties", ptr)
	if err != nil {
		return nil, err
	}
	maxProps, hasMax, err := count(v, "maxProperties", ptr)
	if err != nil {
		return nil, err
	}
	if minProps > nreq {
		return nil, unsupported(pointerJoin(ptr, "minProperties"), "minProperties", "more than the required properties is not supported")
	}
	if len(props) == 0 && additional != nil {
		if hasMax {
			return nil, unsupported(pointerJoin(ptr, "maxProperties"), "maxProperties", "maxProperties of an open object is not supported")
		}
		// A map: any keys, values of the additionalProperties schema.
		if additional.kind == 'b' {
			return c.k.anyObject(depth), nil
		}
		val, err := c.schema(additional, pointerJoin(ptr, "additionalProperties"), depth+1, tAll)
		if err != nil {
			return nil, err
		}
		return c.k.mapObject(anyString, val), nil
	}
	if hasMax && maxProps < len(props) {
		if maxProps < nreq {
			return neverNode, nil
		}
		return nil, unsupported(pointerJoin(ptr, "maxProperties"), "maxProperties", "fewer than the properties listed is not supported")
	}
	// Properties beyond those listed are never generated, which any additionalProperties allows.
	return objectNode(&objectSpec{props: props, ws: c.k.ws}), nil
}
