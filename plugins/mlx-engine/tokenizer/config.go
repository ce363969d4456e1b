package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Files holds the JSON files of a Hugging Face model directory that describe its tokenizer. Only Tokenizer is
// required.
type Files struct {
	Tokenizer        []byte // tokenizer.json
	TokenizerConfig  []byte // tokenizer_config.json: bos/eos tokens, extra special tokens
	SpecialTokensMap []byte // special_tokens_map.json: bos/eos when tokenizer_config.json lacks them
	GenerationConfig []byte // generation_config.json: eos_token_id, int or list
	ModelConfig      []byte // config.json: eos_token_id, int or list
}

// File size limits: tokenizer.json of large-vocabulary models runs to tens of megabytes.
const (
	maxTokenizerFile = 512 << 20
	maxConfigFile    = 16 << 20
)

// ReadFiles reads the tokenizer files of a model directory. tokenizer.json must exist; the others are read
// when present.
func ReadFiles(dir string) (Files, error) {
	var f Files
	var err error
	if f.Tokenizer, err = readFile(filepath.Join(dir, "tokenizer.json"), maxTokenizerFile, true); err != nil {
		return f, err
	}
	optional := []struct {
		name string
		dst  *[]byte
	}{
		{"tokenizer_config.json", &f.TokenizerConfig},
		{"special_tokens_map.json", &f.SpecialTokensMap},
		{"generation_config.json", &f.GenerationConfig},
		{"config.json", &f.ModelConfig},
	}
	for _, o := range optional {
		if *o.dst, err = readFile(filepath.Join(dir, o.name), maxConfigFile, false); err != nil {
			return f, err
		}
	}
	return f, nil
}

func readFile(path string, limit int64, required bool) ([]byte, error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !required {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("tokenizer: %s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// tokenizerJSON is the top level of tokenizer.json.
type tokenizerJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

// addedTokenJSON is an added token; "normalized" defaults to !special as in the Rust tokenizers.
type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

func (a addedTokenJSON) token(id int32) AddedToken {
	t := AddedToken{ID: id, Content: a.Content, SingleWord: a.SingleWord, LStrip: a.LStrip, RStrip: a.RStrip,
		Special: a.Special, Normalized: !a.Special}
	if a.Normalized != nil {
		t.Normalized = *a.Normalized
	}
	return t
}

// configJSON holds the fields of tokenizer_config.json and special_tokens_map.json this package uses.
type configJSON struct {
	BOSToken                tokenString               `json:"bos_token"`
	EOSToken                tokenString               `json:"eos_token"`
	AdditionalSpecialTokens []tokenString             `json:"additional_special_tokens"`
	AddedTokensDecoder      map[string]addedTokenJSON `json:"added_tokens_decoder"`
}

// tokenString is a token written as a string or as an AddedToken object {"content": ...}; null is "".
type tokenString string

func (t *tokenString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*t = ""
		return nil
	case len(b) > 0 && b[0] == '{':
		var o struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		*t = tokenString(o.Content)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("token must be a string or an object with content: %w", err)
	}
	*t = tokenString(s)
	return nil
}

// tokenIDs is an id or a list of ids (eos_token_id in generation_config.json and config.json).
type tokenIDs []int32

func (t *tokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*t = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var ids []int32
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int32
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token id must be an integer or a list of integers: %w", err)
	}
	*t = tokenIDs{id}
	return nil
}

type idConfigJSON struct {
	BOSTokenID tokenIDs `json:"bos_token_id"`
	EOSTokenID tokenIDs `json:"eos_token_id"`
}

func unmarshalOptional(name string, b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	return nil
}
