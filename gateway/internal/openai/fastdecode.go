package openai

import (
	"strconv"
	"unicode/utf8"
)

// decodePlainChat decodes the common shape of a chat body into b without reflection: an object of the usual
// scalar fields and messages of a role and a string content, every string without escapes, every key in
// its own spelling and once. It reports false for anything else (b is then undefined), which the caller
// decodes with encoding/json; where it reports true, b is what encoding/json makes of body.
func decodePlainChat(body []byte, b *chatBody) bool {
	if !utf8.Valid(body) {
		return false
	}
	d := plainDecoder{buf: body}
	if !d.consume('{') {
		return false
	}
	var seen uint32
	if !d.consume('}') {
		for {
			key, ok := d.str()
			if !ok || !d.consume(':') {
				return false
			}
			bit, ok := d.field(key, b)
			if !ok || seen&bit != 0 {
				return false
			}
			seen |= bit
			if d.consume(',') {
				continue
			}
			if !d.consume('}') {
				return false
			}
			break
		}
	}
	d.space()
	return d.i == len(d.buf)
}

type plainDecoder struct {
	buf []byte
	i   int
}

func (d *plainDecoder) space() {
	for d.i < len(d.buf) {
		switch d.buf[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// consume skips white space and c, if c is next.
func (d *plainDecoder) consume(c byte) bool {
	d.space()
	if d.i < len(d.buf) && d.buf[d.i] == c {
		d.i++
		return true
	}
	return false
}

// rawStr reads a string without escapes or control characters, quotes included.
func (d *plainDecoder) rawStr() ([]byte, bool) {
	d.space()
	if d.i >= len(d.buf) || d.buf[d.i] != '"' {
		return nil, false
	}
	for j := d.i + 1; j < len(d.buf); j++ {
		switch c := d.buf[j]; {
		case c == '"':
			s := d.buf[d.i : j+1]
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (d *plainDecoder) str() (string, bool) {
	s, ok := d.rawStr()
	if !ok {
		return "", false
	}
	return string(s[1 : len(s)-1]), true
}

// number reads a JSON number; integer tells whether it has neither fraction nor exponent.
func (d *plainDecoder) number() (lit string, integer, ok bool) {
	d.space()
	start, j := d.i, d.i
	digits := func() bool {
		k := j
		for j < len(d.buf) && d.buf[j] >= '0' && d.buf[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(d.buf) && d.buf[j] == '-' {
		j++
	}
	if j < len(d.buf) && d.buf[j] == '0' {
		j++
	} else if !digits() {
		return "", false, false
	}
	integer = true
	if j < len(d.buf) && d.buf[j] == '.' {
		j++
		if !digits() {
			return "", false, false
		}
		integer = false
	}
	if j < len(d.buf) && (d.buf[j] == 'e' || d.buf[j] == 'E') {
		j++
		if j < len(d.buf) && (d.buf[j] == '+' || d.buf[j] == '-') {
			j++
		}
		if !digits() {
			return "", false, false
		}
		integer = false
	}
	d.i = j
	return string(d.buf[start:j]), integer, true
}

func (d *plainDecoder) integer() (*int, bool) {
	lit, integer, ok := d.number()
	if !ok || !integer {
		return nil, false
	}
	n, err := strconv.ParseInt(lit, 10, strconv.IntSize)
	if err != nil {
		return nil, false
	}
	v := int(n)
	return &v, true
}

func (d *plainDecoder) float() (*float64, bool) {
	lit, _, ok := d.number()
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, false
	}
	return &f, true
}

func (d *plainDecoder) boolean() (*bool, bool) {
	d.space()
	var v bool
	switch {
	case len(d.buf)-d.i >= 4 && string(d.buf[d.i:d.i+4]) == "true":
		v, d.i = true, d.i+4
	case len(d.buf)-d.i >= 5 && string(d.buf[d.i:d.i+5]) == "false":
		d.i += 5
	default:
		return nil, false
	}
	return &v, true
}

// field reads the value of key into b; bit is the key's own, for telling a repeated key.
func (d *plainDecoder) field(key string, b *chatBody) (bit uint32, ok bool) {
	switch key {
	case "model":
		var s string
		s, ok = d.str()
		b.Model = &s
		return 1 << 0, ok
	case "messages":
		b.Messages, ok = d.messages()
		return 1 << 1, ok
	case "max_tokens":
		b.MaxTokens, ok = d.integer()
		return 1 << 2, ok
	case "max_completion_tokens":
		b.MaxCompletionTokens, ok = d.integer()
		return 1 << 3, ok
	case "n":
		b.N, ok = d.integer()
		return 1 << 4, ok
	case "top_k":
		b.TopK, ok = d.integer()
		return 1 << 5, ok
	case "stream":
		b.Stream, ok = d.boolean()
		return 1 << 6, ok
	case "temperature":
		b.Temperature, ok = d.float()
		return 1 << 7, ok
	case "top_p":
		b.TopP, ok = d.float()
		return 1 << 8, ok
	case "min_p":
		b.MinP, ok = d.float()
		return 1 << 9, ok
	case "presence_penalty":
		b.PresencePenalty, ok = d.float()
		return 1 << 10, ok
	case "frequency_penalty":
		b.FrequencyPenalty, ok = d.float()
		return 1 << 11, ok
	case "repetition_penalty":
		b.RepetitionPenalty, ok = d.float()
		return 1 << 12, ok
	case "ignore_eos":
		b.IgnoreEOS, ok = d.boolean()
		return 1 << 13, ok
	case "logprobs":
		b.Logprobs, ok = d.boolean()
		return 1 << 14, ok
	case "stream_options":
		b.StreamOptions, ok = d.streamOptions()
		return 1 << 16, ok
	case "user":
		var s string
		s, ok = d.str()
		b.User = &s
		return 1 << 15, ok
	}
	return 0, false
}

// messages reads an array of objects of a role and a string content.
func (d *plainDecoder) messages() ([]messageBody, bool) {
	if !d.consume('[') {
		return nil, false
	}
	ms := []messageBody{}
	if d.consume(']') {
		return ms, true
	}
	for {
		if !d.consume('{') {
			return nil, false
		}
		var m messageBody
		var seen uint8
		if !d.consume('}') {
			for {
				key, ok := d.rawStr()
				if !ok || !d.consume(':') {
					return nil, false
				}
				switch string(key) {
				case `"role"`:
					s, ok := d.role()
					if !ok || seen&1 != 0 {
						return nil, false
					}
					m.Role, seen = s, seen|1
				case `"content"`:
					s, ok := d.rawStr()
					if !ok || seen&2 != 0 {
						return nil, false
					}
					m.Content, seen = s, seen|2
				default:
					return nil, false
				}
				if d.consume(',') {
					continue
				}
				if !d.consume('}') {
					return nil, false
				}
				break
			}
		}
		ms = append(ms, m)
		if d.consume(',') {
			continue
		}
		if d.consume(']') {
			return ms, true
		}
		return nil, false
	}
}

// streamOptions reads {} or {"include_usage": a boolean}.
func (d *plainDecoder) streamOptions() (*streamOptions, bool) {
	if !d.consume('{') {
		return nil, false
	}
	o := new(streamOptions)
	if d.consume('}') {
		return o, true
	}
	key, ok := d.rawStr()
	if !ok || string(key) != `"include_usage"` || !d.consume(':') {
		return nil, false
	}
	if o.IncludeUsage, ok = d.boolean(); !ok || !d.consume('}') {
		return nil, false
	}
	return o, true
}

// The common roles, which a message points to instead of a copy of its own.
var (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
)

// role reads a message's role. Its value is never changed through the pointer, so messages share the
// common ones.
func (d *plainDecoder) role() (*string, bool) {
	raw, ok := d.rawStr()
	if !ok {
		return nil, false
	}
	switch string(raw) {
	case `"user"`:
		return &roleUser, true
	case `"system"`:
		return &roleSystem, true
	case `"assistant"`:
		return &roleAssistant, true
	}
	s := string(raw[1 : len(raw)-1])
	return &s, true
}
