package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text as the Hugging Face tokenizer.json of a model
// says. It is safe for concurrent use.
type Tokenizer struct {
	model        *bpe
	normalizer   normalizer
	preTokenizer preTokenizer
	post         postProcessor
	decoder      []stageFactory

	added          []AddedToken
	addedByID      map[int32]int32 // id -> index into added
	addedByContent map[string]int32
	rawTrie        *trie // added tokens matched in the raw text
	normTrie       *trie // added tokens matched in normalized text
	special        map[int32]bool

	bos       int32 // -1 when unknown
	eos       []int32
	vocabSize int
	// maxBytesPerToken: see MaxBytesPerToken.
	maxBytesPerToken int

	words sync.Pool // *[]string scratch for pre-tokenized words
}

// Load reads the tokenizer of a Hugging Face model directory: tokenizer.json, and tokenizer_config.json,
// special_tokens_map.json, generation_config.json and config.json where present.
func Load(dir string) (*Tokenizer, error) {
	f, err := ReadFiles(dir)
	if err != nil {
		return nil, err
	}
	return FromFiles(f)
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and tokenizer_config.json (which may be
// nil).
func FromJSON(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	return FromFiles(Files{Tokenizer: tokenizerJSON, TokenizerConfig: tokenizerConfigJSON})
}

// FromFiles builds a tokenizer from the contents of a model's tokenizer files.
func FromFiles(f Files) (*Tokenizer, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(f.Tokenizer, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	if isNull(tj.Model) {
		return nil, errors.New("tokenizer: tokenizer.json has no model")
	}
	t := &Tokenizer{
		addedByID:      map[int32]int32{},
		addedByContent: map[string]int32{},
		rawTrie:        newTrie(),
		normTrie:       newTrie(),
		special:        map[int32]bool{},
		bos:            -1,
	}
	var err error
	if t.model, err = newBPE(tj.Model); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.normalizer, err = parseNormalizer(tj.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.preTokenizer, err = parsePreTokenizer(tj.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.post, err = parsePostProcessor(tj.PostProcessor); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.decoder, err = parseDecoder(tj.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}

	var cfg, stm configJSON
	if err := unmarshalOptional("tokenizer_config.json", f.TokenizerConfig, &cfg); err != nil {
		return nil, err
	}
	if err := unmarshalOptional("special_tokens_map.json", f.SpecialTokensMap, &stm); err != nil {
		return nil, err
	}
	var gen, mc idConfigJSON
	if err := unmarshalOptional("generation_config.json", f.GenerationConfig, &gen); err != nil {
		return nil, err
	}
	if err := unmarshalOptional("config.json", f.ModelConfig, &mc); err != nil {
		return nil, err
	}

	for i, a := range tj.AddedTokens {
		if a.ID == nil {
			return nil, fmt.Errorf("tokenizer: added token %d (%q) has no id", i, a.Content)
		}
		if err := t.addToken(a.token(*a.ID)); err != nil {
			return nil, err
		}
	}
	// Tokens that only tokenizer_config.json declares are added too, as transformers does.
	for key, a := range cfg.AddedTokensDecoder {
		id, err := strconv.ParseInt(key, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: added_tokens_decoder key %q is not an id", key)
		}
		if _, ok := t.addedByID[int32(id)]; ok {
			continue
		}
		if err := t.addToken(a.token(int32(id))); err != nil {
			return nil, err
		}
	}
	for _, s := range append(cfg.AdditionalSpecialTokens, stm.AdditionalSpecialTokens...) {
		if id, ok := t.TokenID(string(s)); ok {
			t.special[id] = true
		}
	}

	t.vocabSize = len(t.model.tokens)
	for _, a := range t.added {
		t.vocabSize = max(t.vocabSize, int(a.ID)+1)
	}

	bos, eos := cfg.BOSToken, cfg.EOSToken
	if bos == "" {
		bos = stm.BOSToken
	}
	if eos == "" {
		eos = stm.EOSToken
	}
	if bos != "" {
		id, ok := t.TokenID(string(bos))
		if !ok {
			return nil, fmt.Errorf("tokenizer: bos_token %q is not in the vocabulary", bos)
		}
		t.bos = id
	}
	var eosIDs []int32
	if eos != "" {
		id, ok := t.TokenID(string(eos))
		if !ok {
			return nil, fmt.Errorf("tokenizer: eos_token %q is not in the vocabulary", eos)
		}
		eosIDs = append(eosIDs, id)
	}
	eosIDs = append(append(eosIDs, gen.EOSTokenID...), mc.EOSTokenID...)
	for _, id := range eosIDs {
		if id < 0 || int(id) >= t.vocabSize {
			return nil, fmt.Errorf("tokenizer: eos token id %d is outside the vocabulary (size %d)", id, t.vocabSize)
		}
		if !contains(t.eos, id) {
			t.eos = append(t.eos, id)
		}
	}
	t.words.New = func() any { return new([]string) }
	t.maxBytesPerToken = t.computeMaxBytesPerToken()
	return t, nil
}

// Identity identifies the vocabulary: every token and added token with its id, hashed. Two tokenizers with the
// same Identity turn a text into the same ids (their other settings come from the same files in practice).
func (t *Tokenizer) Identity() string {
	h := sha256.New()
	var n [4]byte
	for id, tok := range t.model.tokens {
		binary.LittleEndian.PutUint32(n[:], uint32(id))
		h.Write(n[:])
		h.Write([]byte(tok))
		h.Write([]byte{0})
	}
	for _, a := range t.added {
		binary.LittleEndian.PutUint32(n[:], uint32(a.ID))
		h.Write(n[:])
		h.Write([]byte(a.Content))
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// MaxBytesPerToken is the most bytes of input text one token can stand for, so that a text of n bytes has at
// least n/MaxBytesPerToken tokens: a prompt can be known to overflow a context from its length alone, without
// tokenizing it. It is the longest token (as it appears in normalized text) times what the normalizer can
// shrink text by; 0 when no bound holds (a normalizer that deletes text, an added token that swallows the
// whitespace around it, unknown characters fused into one token).
func (t *Tokenizer) MaxBytesPerToken() int { return t.maxBytesPerToken }

func (t *Tokenizer) computeMaxBytesPerToken() int {
	shrink := 1
	if t.normalizer != nil {
		shrink = t.normalizer.shrink()
	}
	if shrink == 0 || t.model.unk >= 0 && t.model.fuseUnk && !t.model.byteFallback {
		return 0
	}
	longest := 0
	if t.model.unk >= 0 {
		longest = utf8.UTFMax // an unknown character
	}
	for _, a := range t.added {
		if a.LStrip || a.RStrip {
			return 0
		}
		longest = max(longest, len(a.Content))
	}
	k := t.rawKind()
	for _, tok := range t.model.tokens {
		n := len(tok) // SentencePiece: "▁" counts its 3 bytes, as it stands in normalized text
		if k.byteLevel {
			n = len(byteLevelBytes(nil, tok))
		} else if _, ok := parseByteToken(tok); ok && k.byteFallback {
			n = 1
		}
		longest = max(longest, n)
	}
	return longest * shrink
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func (t *Tokenizer) addToken(a AddedToken) error {
	if a.ID < 0 || a.ID >= maxVocabID {
		return fmt.Errorf("tokenizer: added token %q has id %d out of range", a.Content, a.ID)
	}
	if a.Content == "" {
		return fmt.Errorf("tokenizer: added token %d is empty", a.ID)
	}
	if _, dup := t.addedByID[a.ID]; dup {
		return fmt.Errorf("tokenizer: added token id %d appears twice", a.ID)
	}
	i := int32(len(t.added))
	t.added = append(t.added, a)
	t.addedByID[a.ID] = i
	t.addedByContent[a.Content] = i
	if a.Normalized {
		t.normTrie.insert(a.Content, i)
	} else {
		t.rawTrie.insert(a.Content, i)
	}
	if a.Special {
		t.special[a.ID] = true
	}
	return nil
}

// Encode turns text into token ids. With addSpecialTokens the post-processor of tokenizer.json adds what the
// model expects around a text (the BOS token of Llama 2, say); chat prompts rendered from a template already
// hold their special tokens and are encoded without. Added tokens written in the text ("<|eot_id|>") are
// always recognised. Invalid UTF-8 is read as U+FFFD.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []int32 {
	ids, _ := t.EncodeLimit(text, addSpecialTokens, 0)
	return ids
}

// EncodeLimit is Encode that gives up once the text has more than limit tokens (0: no limit), returning
// complete false and the tokens so far. A prompt far over a model's context then costs little more than the
// part that fills it: for Llama 3, Qwen and GPT-2 style pre-tokenizers the text is cut into words a batch at a
// time, so a 15 MB prompt is never held as millions of words. (Other pre-tokenizers cut the whole text first;
// MaxBytesPerToken bounds what reaches them.)
func (t *Tokenizer) EncodeLimit(text string, addSpecialTokens bool, limit int) (ids []int32, complete bool) {
	if !utf8.ValidString(text) {
		text = lossyUTF8([]byte(text))
	}
	size := len(text)/3 + 4
	if limit > 0 {
		size = min(size, limit+4)
	}
	ids = make([]int32, 0, size)
	over := func() bool { return limit > 0 && len(ids) > limit }
	wp := t.words.Get().(*[]string)
	words := *wp
	defer func() {
		clear(words)
		*wp = words[:0]
		t.words.Put(wp)
	}()
	for _, sec := range splitAdded(nil, text, t.rawTrie, t.added, true) {
		if sec.token >= 0 {
			ids = append(ids, t.added[sec.token].ID)
			if over() {
				return ids, false
			}
			continue
		}
		s := sec.text
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		if s == "" {
			continue
		}
		for _, sub := range splitAdded(nil, s, t.normTrie, t.added, sec.first) {
			if sub.token >= 0 {
				ids = append(ids, t.added[sub.token].ID)
			} else if t.preTokenizer == nil {
				ids = t.model.encode(ids, sub.text)
			} else {
				words = eachBatch(t.preTokenizer, words, sub.text, sub.first, wordBatch, func(batch []string) bool {
					for _, w := range batch {
						ids = t.model.encode(ids, w)
					}
					return !over()
				})
			}
			if over() {
				return ids, false
			}
		}
	}
	if addSpecialTokens && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids, true
}

// wordBatch is how many words EncodeLimit cuts at a time: enough to amortise the batch's byte-level buffer,
// few enough that a long text never costs more than a few hundred kilobytes of them.
const wordBatch = 4096

// Decode turns token ids into text. With skipSpecial, special tokens (BOS, EOS, chat markers) are left out.
// Unknown ids are skipped; byte sequences that are not valid UTF-8 become U+FFFD. Unlike transformers, Decode
// never applies clean_up_tokenization_spaces, which would alter generated code and prose (" ." becomes ".").
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	s := t.NewStream(skipSpecial)
	for _, id := range ids {
		s.feed(id)
	}
	s.p.flush()
	return s.p.take()
}

// IDToken returns the vocabulary entry of id, as written in tokenizer.json.
func (t *Tokenizer) IDToken(id int32) (string, bool) {
	if i, ok := t.addedByID[id]; ok {
		return t.added[i].Content, true
	}
	if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
		return t.model.tokens[id], true
	}
	return "", false
}

// TokenID returns the id of a vocabulary entry, as written in tokenizer.json.
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if i, ok := t.addedByContent[token]; ok {
		return t.added[i].ID, true
	}
	return t.model.tokenID(token)
}

// IsSpecial reports whether id is a special token, one that Decode skips on request.
func (t *Tokenizer) IsSpecial(id int32) bool { return t.special[id] }

// AddedTokens returns the added tokens of the vocabulary.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// BOS returns the id of the beginning-of-sequence token named by the tokenizer config, if it names one.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns the ids that end generation: the eos_token of the tokenizer config, then the eos_token_id of
// generation_config.json and config.json (an id or a list), without repeats.
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eos...) }

// VocabSize returns one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }
