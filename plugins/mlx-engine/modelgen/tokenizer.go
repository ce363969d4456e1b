package modelgen

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// tokenizer is a generated vocabulary with everything needed to write tokenizer.json and tokenizer_config.json.
type tokenizer struct {
	kind   TokenizerKind
	family model.Family
	vocab  []string     // id → token, for the ids the BPE model owns
	merges []string     // "left right", rank order
	added  []addedToken // tokens after the BPE vocabulary
	// inVocab are special tokens that are also BPE vocabulary entries (SentencePiece's <unk>, <s>, </s> at ids
	// 0-2); they are listed in added_tokens like the others but take no extra id.
	inVocab  []addedToken
	bos, eos string // "" when the family has none
	bosID    *int
	eosIDs   []int
	template string
	stream   []int32 // the training text as token ids
	reserved int     // trailing added tokens that are reserved placeholders
}

// size is the number of token ids the tokenizer defines.
func (t *tokenizer) size() int { return len(t.vocab) + len(t.added) }

type addedToken struct {
	id      int
	content string
}

// Pre-tokenizer patterns of the real tokenizers: Llama 3 groups digits in threes, Qwen splits every digit.
const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Chat templates in the style of each family, written for this project.
const (
	// The Llama 3 style template offers tools as Llama 3.1's does: in a system turn, for a JSON answer
	// {"name": ..., "parameters": ...}, with tool results in ipython turns. Without tools it renders exactly
	// the plain turns.
	llama3Template = `{{- bos_token }}
{%- if tools %}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}
{%- if messages[0]['role'] == 'system' %}
{{- messages[0]['content'] | trim + '\n\n' }}
{%- endif %}
{{- 'You can call functions. To call one, answer with only a JSON object {"name": function name, "parameters": arguments}. The functions:' }}
{%- for t in tools %}
{{- '\n' + t | tojson }}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
{%- if tools and loop.first and message['role'] == 'system' %}
{%- elif message['role'] == 'assistant' and message.tool_calls %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- for call in message.tool_calls %}
{%- if call.function.arguments is string %}
{{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments + '}' }}
{%- else %}
{{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments | tojson + '}' }}
{%- endif %}
{%- endfor %}
{{- '<|eot_id|>' }}
{%- elif message['role'] == 'tool' or message['role'] == 'ipython' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
`
	// The ChatML template offers tools as Hermes and Qwen do: signatures in <tools></tools> in the system turn,
	// calls in <tool_call></tool_call>, results in <tool_response></tool_response>. Without tools it renders
	// exactly the plain turns.
	chatMLTemplate = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}
{{- messages[0]['content'] + '\n\n' }}
{%- endif %}
{{- '# Tools\n\nYou may call one or more functions. Their signatures are within <tools></tools>:\n<tools>' }}
{%- for t in tools %}
{{- '\n' + t | tojson }}
{%- endfor %}
{{- '\n</tools>\n\nFor each call, write a JSON object with the function name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if tools and loop.first and message['role'] == 'system' %}
{%- elif message['role'] == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant\n' + (message['content'] or '') }}
{%- for call in message.tool_calls %}
{%- if call.function.arguments is string %}
{{- '\n<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' + call.function.arguments + '}\n</tool_call>' }}
{%- else %}
{{- '\n<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' + call.function.arguments | tojson + '}\n</tool_call>' }}
{%- endif %}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message['role'] == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}
`
	instTemplate = `{%- if messages[0]['role'] == 'system' %}
{%- set system_message = messages[0]['content'] %}
{%- set loop_messages = messages[1:] %}
{%- else %}
{%- set system_message = '' %}
{%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
{%- if message['role'] == 'user' %}
{%- if loop.first and system_message != '' %}
{{- '[INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
{%- else %}
{{- '[INST] ' + message['content'] + ' [/INST]' }}
{%- endif %}
{%- elif message['role'] == 'assistant' %}
{{- ' ' + message['content'] + eos_token }}
{%- endif %}
{%- endfor %}
`
)

// buildTokenizer learns a vocabulary of at most vocabSize tokens from text: base symbols, as many merges as the
// text offers, the family's special tokens and (for Llama 3 style vocabularies) reserved special tokens.
func buildTokenizer(kind TokenizerKind, fam model.Family, text string, vocabSize int) (*tokenizer, error) {
	t := &tokenizer{kind: kind, family: fam}
	var specials []string
	switch {
	case kind == SentencePiece:
		t.bos, t.eos, t.template = "<s>", "</s>", instTemplate
		t.inVocab = []addedToken{{0, "<unk>"}, {1, "<s>"}, {2, "</s>"}}
	case fam == model.Qwen2 || fam == model.Qwen3:
		specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
		t.eos, t.template = "<|im_end|>", chatMLTemplate
	default:
		specials = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
		t.bos, t.eos, t.template = "<|begin_of_text|>", "<|eot_id|>", llama3Template
	}
	var err error
	if kind == SentencePiece {
		err = t.learnSentencePiece(text, vocabSize)
	} else {
		err = t.learnByteLevel(text, vocabSize-len(specials))
	}
	if err != nil {
		return nil, err
	}
	for _, s := range specials {
		t.added = append(t.added, addedToken{len(t.vocab) + len(t.added), s})
	}
	if kind == ByteLevel && len(specials) == 5 {
		// Llama 3 keeps 256 special ids, most of them reserved; so do we, as far as the vocabulary allows.
		for i := 0; len(t.added) < 256 && t.size() < vocabSize; i++ {
			t.added = append(t.added, addedToken{t.size(), fmt.Sprintf("<|reserved_special_token_%d|>", i)})
			t.reserved++
		}
	}
	ids := map[string]int{}
	for i, s := range t.vocab {
		ids[s] = i
	}
	for _, a := range t.added {
		ids[a.content] = a.id
	}
	if t.bos != "" {
		id := ids[t.bos]
		t.bosID = &id
	}
	switch {
	case kind == SentencePiece:
		t.eosIDs = []int{ids["</s>"]}
	case fam == model.Qwen2 || fam == model.Qwen3:
		t.eosIDs = []int{ids["<|endoftext|>"], ids["<|im_end|>"]}
	default:
		t.eosIDs = []int{ids["<|end_of_text|>"], ids["<|eot_id|>"]}
	}
	return t, nil
}

func (t *tokenizer) learnByteLevel(text string, budget int) error {
	order, runeOf := byteLevelAlphabet()
	if budget < len(order) {
		return fmt.Errorf("modelgen: vocabulary too small for 256 byte tokens and the special tokens")
	}
	mapped := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteRune(runeOf[s[i]])
		}
		return b.String()
	}
	words := splitByteLevel(text)
	for i, w := range words {
		words[i] = mapped(w)
	}
	res := learnBPE(words, runesOf, budget-len(order), func(a, b string) bool { return true })
	for _, b := range order {
		t.vocab = append(t.vocab, string(runeOf[b]))
	}
	t.addMerges(res)
	t.mapStream(res)
	return nil
}

func (t *tokenizer) learnSentencePiece(text string, vocabSize int) error {
	t.vocab = []string{"<unk>", "<s>", "</s>"}
	for b := 0; b < 256; b++ {
		t.vocab = append(t.vocab, fmt.Sprintf("<0x%02X>", b))
	}
	words := splitSentencePiece(text)
	alphabet := map[string]bool{}
	for _, w := range words {
		if w == "\n" {
			continue // newlines are left to byte fallback, as in Llama 2
		}
		for _, r := range w {
			alphabet[string(r)] = true
		}
	}
	chars := make([]string, 0, len(alphabet))
	for c := range alphabet {
		chars = append(chars, c)
	}
	sort.Strings(chars)
	budget := vocabSize - len(t.vocab) - len(chars)
	if budget < 0 {
		return fmt.Errorf("modelgen: vocabulary too small for the special, byte and character tokens")
	}
	noDigits := func(a, b string) bool { // SentencePiece splits digits (Llama 2's split_digits)
		return !strings.ContainsFunc(a+b, unicode.IsDigit) && a != "\n" && b != "\n"
	}
	res := learnBPE(words, runesOf, budget, noDigits)
	t.addMerges(res)
	t.vocab = append(t.vocab, chars...)
	t.mapStream(res)
	return nil
}

// addMerges appends the merge results to the vocabulary in rank order.
func (t *tokenizer) addMerges(res *bpeResult) {
	have := map[string]bool{}
	for _, s := range t.vocab {
		have[s] = true
	}
	for _, m := range res.merges {
		a, b := res.symbols[m[0]], res.symbols[m[1]]
		t.merges = append(t.merges, a+" "+b)
		if !have[a+b] {
			have[a+b] = true
			t.vocab = append(t.vocab, a+b)
		}
	}
}

// mapStream turns the tokenized training text into vocabulary ids; symbols outside the vocabulary (newlines
// in SentencePiece vocabularies) become their byte-fallback tokens.
func (t *tokenizer) mapStream(res *bpeResult) {
	ids := map[string]int32{}
	for i, s := range t.vocab {
		ids[s] = int32(i)
	}
	for _, s := range res.stream {
		sym := res.symbols[s]
		if id, ok := ids[sym]; ok {
			t.stream = append(t.stream, id)
			continue
		}
		for i := 0; i < len(sym); i++ {
			t.stream = append(t.stream, ids[fmt.Sprintf("<0x%02X>", sym[i])])
		}
	}
}

// tokenizerJSON renders tokenizer.json in the Hugging Face tokenizers format.
func (t *tokenizer) tokenizerJSON() ([]byte, error) {
	qwen := t.family == model.Qwen2 || t.family == model.Qwen3
	added := []any{}
	for _, a := range append(append([]addedToken(nil), t.inVocab...), t.added...) {
		added = append(added, addedJSON(a))
	}
	vocab := make(obj, 0, len(t.vocab))
	for i, s := range t.vocab {
		vocab = append(vocab, kv{s, i})
	}
	merges := t.merges
	if merges == nil {
		merges = []string{}
	}
	var normalizer, preTokenizer, postProcessor, decoder any
	var bpe obj
	if t.kind == SentencePiece {
		normalizer = obj{{"type", "Sequence"}, {"normalizers", []any{
			obj{{"type", "Prepend"}, {"prepend", "▁"}},
			obj{{"type", "Replace"}, {"pattern", obj{{"String", " "}}}, {"content", "▁"}},
		}}}
		postProcessor = obj{{"type", "TemplateProcessing"},
			{"single", []any{obj{{"SpecialToken", obj{{"id", t.bos}, {"type_id", 0}}}}, obj{{"Sequence", obj{{"id", "A"}, {"type_id", 0}}}}}},
			{"pair", []any{obj{{"SpecialToken", obj{{"id", t.bos}, {"type_id", 0}}}}, obj{{"Sequence", obj{{"id", "A"}, {"type_id", 0}}}},
				obj{{"SpecialToken", obj{{"id", t.bos}, {"type_id", 1}}}}, obj{{"Sequence", obj{{"id", "B"}, {"type_id", 1}}}}}},
			{"special_tokens", obj{{t.bos, obj{{"id", t.bos}, {"ids", []int{*t.bosID}}, {"tokens", []string{t.bos}}}}}},
		}
		decoder = obj{{"type", "Sequence"}, {"decoders", []any{
			obj{{"type", "Replace"}, {"pattern", obj{{"String", "▁"}}}, {"content", " "}},
			obj{{"type", "ByteFallback"}},
			obj{{"type", "Fuse"}},
			obj{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}},
		}}}
		bpe = obj{{"type", "BPE"}, {"dropout", nil}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nil},
			{"end_of_word_suffix", nil}, {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false}}
	} else {
		pattern := llama3Pattern
		if qwen {
			pattern = qwenPattern
			normalizer = obj{{"type", "NFC"}}
		}
		preTokenizer = obj{{"type", "Sequence"}, {"pretokenizers", []any{
			obj{{"type", "Split"}, {"pattern", obj{{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
			obj{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}},
		}}}
		postProcessor = obj{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}
		decoder = obj{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}
		bpe = obj{{"type", "BPE"}, {"dropout", nil}, {"unk_token", nil}, {"continuing_subword_prefix", nil},
			{"end_of_word_suffix", nil}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", !qwen}}
	}
	bpe = append(bpe, kv{"vocab", vocab}, kv{"merges", merges})
	return indentJSON(obj{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", normalizer},
		{"pre_tokenizer", preTokenizer},
		{"post_processor", postProcessor},
		{"decoder", decoder},
		{"model", bpe},
	})
}

func addedJSON(a addedToken) obj {
	return obj{{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
		{"normalized", false}, {"special", true}}
}

// tokenizerConfigJSON renders tokenizer_config.json with the chat template and special tokens.
func (t *tokenizer) tokenizerConfigJSON(maxLen int) ([]byte, error) {
	decoderMap := obj{}
	for _, a := range append(append([]addedToken(nil), t.inVocab...), t.added...) {
		decoderMap = append(decoderMap, kv{fmt.Sprint(a.id), obj{{"content", a.content}, {"lstrip", false},
			{"normalized", false}, {"rstrip", false}, {"single_word", false}, {"special", true}}})
	}
	tokenOrNil := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	c := obj{
		{"add_bos_token", t.kind == SentencePiece},
		{"add_eos_token", false},
		{"added_tokens_decoder", decoderMap},
		{"bos_token", tokenOrNil(t.bos)},
		{"chat_template", t.template},
		{"clean_up_tokenization_spaces", false},
		{"eos_token", t.eos},
		{"model_max_length", maxLen},
	}
	switch {
	case t.kind == SentencePiece:
		c = append(c, kv{"pad_token", nil}, kv{"tokenizer_class", "LlamaTokenizerFast"}, kv{"unk_token", "<unk>"})
	case t.family == model.Qwen2 || t.family == model.Qwen3:
		c = append(c, kv{"pad_token", "<|endoftext|>"}, kv{"tokenizer_class", "Qwen2TokenizerFast"})
	default:
		c = append(c, kv{"tokenizer_class", "PreTrainedTokenizerFast"})
	}
	return indentJSON(c)
}
