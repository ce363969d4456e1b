// Package grammar constrains decoding to a grammar: at each step only the tokens that keep the output a valid
// prefix of the grammar may be sampled, so OpenAI's response_format (json_object, json_schema with strict)
// and forced tool calls (tool_choice required or a named function) are a guarantee, not a hope.
//
// # Building a grammar
//
// A grammar is a Node built from combinators over bytes (UTF-8 text, byte by byte):
//
//	Literal(s)                      s exactly
//	Special(text)                   one special token of the vocabulary, e.g. "[TOOL_CALLS]"
//	Seq(a, b, ...)                  one after another
//	Alt(a, b, ...)                  any one of them
//	Optional(n)                     n or nothing
//	Repeat(n, min, max, sep)        n min..max times (max < 0: unbounded), sep between
//	AnyJSON(opts)                   any JSON value
//	AnyJSONObject(opts)             any JSON object (response_format json_object)
//	JSONSchema(schema, opts)        JSON valid against a schema (response_format json_schema)
//	ToolCallObject(tools, key, opts) {"name": <tool>, key: <its arguments>}, paired per tool
//	ToolCalls(tools, opts, wrap)    wrap(name, <its arguments>) per tool, for syntaxes that are not JSON
//	Text()                          any text without special tokens
//	HarmonyCall(tools, opts)        a forced call in gpt-oss's harmony format (below)
//	HarmonyFinal(answer)            a constrained answer on harmony's final channel
//
// Compile(root) turns it into a *Grammar, immutable and shared by every request that uses it; a Cache keeps
// compiled grammars by schema, least recently used out. Forced tool calls in three model families:
//
//	call, _ := grammar.ToolCallObject(tools, "arguments", opts)
//	// Hermes / Qwen: one or more <tool_call> blocks.
//	grammar.Repeat(grammar.Seq(grammar.Literal("<tool_call>\n"), call, grammar.Literal("\n</tool_call>")), 1, -1, grammar.Literal("\n"))
//	// Llama 3.1: the object alone, arguments under "parameters".
//	llama, _ := grammar.ToolCallObject(tools, "parameters", opts)
//	// Mistral: the [TOOL_CALLS] control token, then a JSON array of calls.
//	grammar.Seq(grammar.Special("[TOOL_CALLS]"), grammar.Literal("["), grammar.Repeat(call, 1, -1, grammar.Literal(", ")), grammar.Literal("]"))
//
// Harmony (gpt-oss) allows one analysis message (free text) and then requires
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|> (HarmonyCall), or
// <|channel|>final<|message|>ANSWER<|return|> for a response format (HarmonyFinal). <|call|> and <|return|>
// end generation too; build the index from Vocabulary.Unstop(HarmonyEnds...) so that the grammar can name
// them (the engine stops on them before the matcher would need them taken).
//
// # Following a grammar
//
// NewIndex(VocabularyOf(tokenizer)) prepares a vocabulary once per tokenizer: the bytes each token adds to the
// output (byte-level BPE pieces and byte-fallback tokens may hold part of a UTF-8 character; the automaton
// works on bytes, so they just work), special tokens by their text, end-of-sequence ids. Each generation then
// has a Matcher (Grammar.NewMatcher): Mask writes the bitset of allowed tokens (ApplyMask applies it to
// logits), Accept advances on the token sampled, Complete says an end-of-sequence token is allowed, Done says
// nothing else is, Reset starts over.
//
// # How masks are fast
//
// The automaton is a set of rules, each a DFA over bytes (built by subset construction from Thompson automata
// of the combinators, then pruned so that every state can still reach the end), whose states may call other
// rules. Most of a grammar is inlined into one rule; rules appear only where sharing matters (a JSON value
// nested in arbitrary JSON, one per depth; a recursive $ref; a big array item repeated many times), so the
// stack is shallow.
//
// As in XGrammar, each state's verdict on the whole vocabulary is computed once per vocabulary, the first time
// a Matcher reaches it, and cached in the Grammar: tokens accepted or rejected whatever the stack below holds,
// and, for states where their rule may end, the few uncertain tokens that run past the end, which Mask checks
// against the real stack. The verdict is computed by walking the vocabulary sorted by bytes, a byte trie laid
// flat: a prefix is stepped once for all the tokens that share it, and a prefix nothing survives rules out
// every token below it in one jump. A cached verdict is a list of accepted ids, of rejected ids, or a bitset,
// whichever is smallest, so a warm Mask is a copy and a few bit flips. Nondeterminism (a number that may go on
// or end, a rule that may return) is handled by following every configuration at once; configurations share
// their stack frames, which are interned so that equal stacks compare equal.
//
// # Guarantees
//
//   - Every token Mask allows is one Accept takes, and the output stays a prefix of a sentence of the
//     grammar that can still be completed (states that cannot reach the end are pruned at Compile time).
//   - End-of-sequence is allowed exactly when the output is complete; when nothing else may follow, Done is
//     true and the mask holds end-of-sequence alone. An empty or truncated object is only ever the doing of
//     max_tokens.
//   - A grammar never loops without progress: every token adds bytes, whitespace runs and numbers are
//     bounded, nesting is bounded by MaxDepth. Strings and arrays without maxLength/maxItems are unbounded;
//     max_tokens ends those, and Fit makes them end in time (below).
//   - No input panics. Compile refuses grammars over MaxStates states or too costly to determinize
//     (ErrTooLarge), and grammars that match nothing (ErrNoMatch).
//
// # Fitting max_tokens
//
// Compile also computes, for every state, the fewest bytes that take it to an end of its rule (a call costs
// the shortest sentence of the rule it enters), as Knuth's generalisation of Dijkstra's algorithm does for
// grammars, and the first step of one such shortest way. Per vocabulary, the steps from each state are
// spelled with the fewest tokens that cover them (keys, punctuation and special tokens whole): that count,
// summed over the frames of the stack (kept with each interned frame), is Matcher.Shortest, the tokens one
// shortest completion needs. Fit narrows a mask to the tokens after which the output can still be completed
// within the tokens left: when a budget runs short, a free string closes, then the object around it. Each
// token of the spelling is one the grammar allows and takes the count down by one, so an output whose
// Shortest fits max_tokens at the start always ends complete. The count follows the shortest way in bytes,
// so it may exceed the true fewest tokens (steering then starts a little early), never fall below it.
// A cached state mask also holds the longest completion any of its tokens may leave, so Fit walks single
// tokens only on the few steps near the end of the budget.
//
// # JSON output
//
// The JSON grammars generate a subset of the valid texts, chosen to keep the automaton small, and every text
// in it validates:
//   - Object properties come in schema order; required ones always, optional ones may be skipped. Properties a
//     schema does not list are never generated, which any additionalProperties allows; an object schema that
//     lists none and allows others (not Strict) is a map of any keys.
//   - Whitespace: at most Options.Whitespace bytes (default 1; NoWhitespace for none) in a run, after '{', '['
//     ',' and ':' and before '}' and ']'; none at the start or end.
//   - Numbers: at most 15 integer digits (exact in a float64), 15 fraction digits, 2 exponent digits.
//   - Nesting: at most Options.MaxDepth (default 16) levels below the top value; arbitrary JSON and recursive
//     $ref are cut off there (deeper containers must be empty, or are not generated).
//
// # JSON Schema support
//
// Supported: type (and lists of types), properties, required, additionalProperties (false, true or a schema;
// Strict makes absent mean false), enum and const (values also checked against the schema's other keywords),
// items, prefixItems, minItems, maxItems (generated up to MaxItems), nested objects, anyOf and oneOf (with
// "type" beside them), allOf of one schema, $ref to local pointers (#/$defs/..., #/definitions/..., any
// #/...), recursive $ref (bounded by MaxDepth), minLength and maxLength (in characters, generated up to
// MaxStringLength), pattern (RE2 syntax, see below), format date, time, date-time, uuid, email, hostname and
// ipv4, minimum, maximum, exclusiveMinimum and exclusiveMaximum (see below), minProperties up to the number
// of required properties, uniqueItems false. Annotations (title,
// description, default, examples, $comment, deprecated, ...) and keywords unknown to JSON Schema are ignored,
// as validators ignore them. A schema without "type" is read as the types its keywords are about
// (properties: object), a subset of what it allows.
//
// oneOf is treated as anyOf: the output matches at least one branch, and exactly one when the branches are
// disjoint (as discriminated unions with a const tag are); overlapping branches are the schema author's
// risk.
//
// Formats generate strict subsets: uppercase T and Z, no leap seconds, no February 29th (the automaton does
// not count leap years), offsets required on times, email as a dot-atom local part of at most 63 characters
// at a hostname of up to five labels.
//
// Numeric bounds are enforced on the digits: an integer range becomes an automaton of digit ranges. Bounds are
// first tightened to integers inside them (minimum 0.5 becomes 1, exclusiveMinimum 0 becomes 1), and a
// bounded number is an integer in range or a decimal I.F without exponent whose whole interval [I, I+1)
// (for a negative one, (-(I+1), -I]) lies in range: with maximum 4, 3.75 but not 4.0. Values left out this
// way are valid but never generated.
//
// Patterns are ECMA-262 regexes in JSON Schema; they are parsed with Go's regexp/syntax, which covers what
// schemas use, and lookaround or backreferences fail to parse and are refused. A pattern is unanchored unless
// it starts with ^ or ends with $. Generated characters stay in the Basic Multilingual Plane and avoid the
// whitespace that only ECMA's \s knows, so that both regex dialects agree on every output.
//
// Refused, with a *SchemaError naming the keyword and its JSON pointer so the gateway can answer 400: not,
// if/then/else, patternProperties, propertyNames, dependentSchemas, dependentRequired, dependencies,
// unevaluatedProperties, unevaluatedItems, contains, minContains, maxContains, additionalItems and items as
// an array (draft 7 tuples), $dynamicRef, $recursiveRef, multipleOf, uniqueItems true, allOf of several schemas,
// keywords beside $ref, allOf, anyOf or oneOf (other than "type"), references outside the document or to
// anchors, $id below the root, a $ref cycle that does not go through a property or item, formats other than
// those above, pattern or format combined with length bounds, minLength or minItems above the caps,
// minProperties above the required count, maxProperties below the listed properties, and required properties
// that additionalProperties forbids.
package grammar
