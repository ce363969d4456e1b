package tokenizer

import (
	"encoding/json"
	"fmt"
)

// A postProcessor adds the special tokens a model expects around an encoded text (BOS for Llama 2, say).
type postProcessor interface {
	process(ids []int32) []int32
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typeJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var c struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("post_processor Sequence: %w", err)
		}
		var seq postProcessorSequence
		for i, r := range c.Processors {
			p, err := parsePostProcessor(r)
			if err != nil {
				return nil, fmt.Errorf("post_processor Sequence[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "ByteLevel":
		// Only adjusts offsets, which this package does not report.
		return nil, nil
	case "TemplateProcessing":
		return parseTemplateProcessing(raw)
	case "BertProcessing", "RobertaProcessing":
		var c struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", t.Type, err)
		}
		var cls, sep int32
		if err := json.Unmarshal(c.Cls[1], &cls); err != nil {
			return nil, fmt.Errorf("post_processor %s cls: %w", t.Type, err)
		}
		if err := json.Unmarshal(c.Sep[1], &sep); err != nil {
			return nil, fmt.Errorf("post_processor %s sep: %w", t.Type, err)
		}
		return templateProcessing{prefix: []int32{cls}, suffix: []int32{sep}}, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q", t.Type)
}

type postProcessorSequence []postProcessor

func (seq postProcessorSequence) process(ids []int32) []int32 {
	for _, p := range seq {
		ids = p.process(ids)
	}
	return ids
}

// templateProcessing is the "single" template of TemplateProcessing: special tokens around sequence A.
type templateProcessing struct {
	prefix, suffix []int32
}

func parseTemplateProcessing(raw json.RawMessage) (postProcessor, error) {
	var c struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("post_processor TemplateProcessing: %w", err)
	}
	var p templateProcessing
	seen := false
	for _, item := range c.Single {
		switch {
		case item.SpecialToken != nil:
			st, ok := c.SpecialTokens[item.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q is not in special_tokens", item.SpecialToken.ID)
			}
			if seen {
				p.suffix = append(p.suffix, st.IDs...)
			} else {
				p.prefix = append(p.prefix, st.IDs...)
			}
		case item.Sequence != nil:
			if item.Sequence.ID != "A" || seen {
				return nil, fmt.Errorf("post_processor TemplateProcessing: the single template must hold sequence A once, got %q", item.Sequence.ID)
			}
			seen = true
		default:
			return nil, fmt.Errorf("post_processor TemplateProcessing: template item is neither SpecialToken nor Sequence")
		}
	}
	if !seen {
		return nil, fmt.Errorf("post_processor TemplateProcessing: the single template has no sequence A")
	}
	return p, nil
}

func (p templateProcessing) process(ids []int32) []int32 {
	if len(p.prefix) == 0 && len(p.suffix) == 0 {
		return ids
	}
	out := make([]int32, 0, len(p.prefix)+len(ids)+len(p.suffix))
	out = append(out, p.prefix...)
	out = append(out, ids...)
	return append(out, p.suffix...)
}
