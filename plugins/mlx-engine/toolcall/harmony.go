package toolcall

import (
	"strings"
)

// The special tokens of OpenAI's harmony format (gpt-oss), as the parser reads them.
const (
	markStart     = "<|start|>"
	markChannel   = "<|channel|>"
	markMessage   = "<|message|>"
	markEnd       = "<|end|>"
	markCall      = "<|call|>"
	markReturn    = "<|return|>"
	markConstrain = "<|constrain|>"
)

// harmonyMarks are the markers of the format.
var harmonyMarks = []string{markStart, markChannel, markMessage, markEnd, markCall, markReturn, markConstrain}

// maxHarmonyHeader bounds a message header (`<|channel|>commentary to=functions.NAME <|constrain|>json`), so
// that text that never reaches <|message|> is released as content instead of held forever.
const maxHarmonyHeader = 64 + maxName

// harmonyMessage is the parser's record of the message being read.
type harmonyMessage struct {
	header strings.Builder // the header's text, markers included
	kind   DeltaKind       // where the body goes: Content, Reasoning, or CallArguments for a call
	rStart bool            // at the start of a reasoning body: leading whitespace is dropped

	// A call's body: one JSON value, streamed compact when it is an object, decoded at the end otherwise.
	val     valueScanner
	started bool   // the value's first byte came
	done    bool   // the value is complete
	object  bool   // the value is an object (streamed)
	raw     []byte // a value that is not an object
	out     []byte // compact object bytes not yet emitted
	bad     string // why the body is malformed, once known
}

// stepHarmonyHeader reads a header up to <|message|>. The output starts in a header, since the prompt ends
// with <|start|>assistant; further headers follow <|start|>. A header that cannot be one (text where a header
// goes, a message end before <|message|>, or too long) is released as content, less its markers.
func (p *Parser) stepHarmonyHeader() bool {
	h := &p.hm
	i, m := findMarker(p.buf, harmonyMarks)
	if i < 0 {
		keep := 0
		if !p.eof {
			keep = holdLen(p.buf, harmonyMarks)
		}
		h.header.WriteString(p.buf[:len(p.buf)-keep])
		p.buf = p.buf[len(p.buf)-keep:]
		switch {
		case !harmonyHeaderValid(h.header.String()) || h.header.Len() > maxHarmonyHeader:
			p.harmonyFallback()
			return true
		case p.eof:
			if strings.TrimSpace(h.header.String()) != "" {
				p.harmonyFallback()
			}
			return false
		}
		return false
	}
	h.header.WriteString(p.buf[:i])
	p.buf = p.buf[i+len(m):]
	if !harmonyHeaderValid(h.header.String()) {
		p.buf = m + p.buf
		p.harmonyFallback()
		return true
	}
	switch m {
	case markMessage:
		p.harmonyBody()
	case markChannel, markConstrain:
		h.header.WriteString(m)
		if h.header.Len() > maxHarmonyHeader {
			p.harmonyFallback()
		}
	case markStart:
		// <|start|> re-opens a header; what came before it was not one.
		if strings.TrimSpace(h.header.String()) != "" {
			p.buf = m + p.buf
			p.harmonyFallback()
			return true
		}
		h.header.Reset()
	default: // a message end before <|message|>
		if strings.TrimSpace(h.header.String()) != "" {
			p.harmonyFallback()
			return true
		}
		h.header.Reset()
		p.st = sHarmonyText
	}
	return true
}

// harmonyHeaderValid reports whether s can begin a header: an optional role ("assistant"), then the channel
// or the recipient (`<|channel|>analysis`, ` to=functions.NAME<|channel|>commentary json`).
func harmonyHeaderValid(s string) bool {
	if strings.HasPrefix("assistant", s) {
		return true
	}
	s = strings.TrimPrefix(s, "assistant")
	s = strings.TrimLeft(s, " ")
	for _, open := range []string{markChannel, "to="} {
		if strings.HasPrefix(s, open) || strings.HasPrefix(open, s) {
			return true
		}
	}
	return false
}

// harmonyFallback releases the text of the header read so far as content (its markers are dropped) and reads
// on as text.
func (p *Parser) harmonyFallback() {
	text := p.hm.header.String()
	for _, m := range harmonyMarks {
		text = strings.ReplaceAll(text, m, "")
	}
	p.emitHeld(Content, text)
	p.hm = harmonyMessage{}
	p.st = sHarmonyText
}

// harmonyBody starts the body of the message whose header is complete: analysis is reasoning, a message to
// a recipient is a tool call, anything else (final, a commentary preamble) is content.
func (p *Parser) harmonyBody() {
	h := &p.hm
	header := h.header.String()
	channel := harmonyField(header, markChannel)
	recipient := harmonyField(header, "to=")
	p.st = sHarmonyBody
	switch {
	case recipient != "" && p.callsOn:
		h.kind = CallArguments
		c := p.newCall("")
		c.raw.WriteString(header)
		c.raw.WriteString(markMessage)
		name, ok := strings.CutPrefix(recipient, "functions.")
		if !ok {
			c.name = recipient
			p.fail(c, ErrUnknownTool, "the recipient "+jsonString(recipient)+" is not a function (functions.NAME)")
			return
		}
		p.callName(c, name)
	case recipient == "" && channel == "analysis":
		h.kind, h.rStart = Reasoning, true
	default:
		h.kind = Content
	}
}

// harmonyField returns the word after key in a header: up to a space, a marker or the end.
func harmonyField(header, key string) string {
	i := strings.Index(header, key)
	if i < 0 {
		return ""
	}
	s := header[i+len(key):]
	if j := strings.IndexAny(s, " <"); j >= 0 {
		s = s[:j]
	}
	return s
}

// stepHarmonyBody routes a message body up to its end: <|end|> (more messages follow), <|call|>, <|return|>, or
// a new header begun without an end (<|start|>, <|channel|>). <|message|> and <|constrain|> have no place in a
// body: they are dropped from text and make a call's arguments malformed.
func (p *Parser) stepHarmonyBody() bool {
	i, m := findMarker(p.buf, harmonyMarks)
	var text string
	switch {
	case i >= 0:
		text, p.buf = p.buf[:i], p.buf[i+len(m):]
	case p.eof:
		text, p.buf = p.buf, ""
	default:
		keep := holdLen(p.buf, harmonyMarks)
		text, p.buf = p.buf[:len(p.buf)-keep], p.buf[len(p.buf)-keep:]
	}
	p.harmonyText(text)
	if i < 0 && !p.eof {
		return false
	}
	switch m {
	case markMessage, markConstrain:
		if p.hm.kind == CallArguments && p.cur != nil {
			p.cur.raw.WriteString(m)
			if p.hm.bad == "" {
				p.hm.bad = "the arguments hold " + m
			}
		}
		return true
	}
	p.harmonyEnd(m)
	switch m {
	case markStart:
		p.st = sHarmonyHeader
	case markChannel:
		p.st = sHarmonyHeader
		p.hm.header.WriteString(markChannel)
	default:
		p.st = sHarmonyText
	}
	return i >= 0
}

// harmonyText routes body text.
func (p *Parser) harmonyText(s string) {
	h := &p.hm
	if s == "" {
		return
	}
	switch h.kind {
	case Content:
		p.emitText(Content, s)
	case Reasoning:
		if h.rStart {
			s = strings.TrimLeft(s, " \t\r\n")
			if s == "" {
				return
			}
			h.rStart = false
		}
		p.emitHeld(Reasoning, s)
	case CallArguments:
		if p.cur == nil {
			return
		}
		p.cur.raw.WriteString(s)
		p.harmonyArgs(s)
	}
}

// harmonyArgs scans a call's body: one JSON value, whitespace around it. An object streams as compact JSON as
// it arrives; another value (a JSON string holding the object, as some models write) is decoded at the end.
func (p *Parser) harmonyArgs(s string) {
	h := &p.hm
	h.scan(s)
	if h.object && len(h.out) > 0 {
		p.callArgs(p.cur, string(h.out))
		h.out = h.out[:0]
	}
}

// scan takes body text of a call: the compact bytes of an object go to out, another value's to raw; bad says
// what is wrong, once something is.
func (h *harmonyMessage) scan(s string) {
	for k := 0; k < len(s) && h.bad == ""; k++ {
		b := s[k]
		if h.done || !h.started {
			if isSpace(b) {
				continue
			}
			if h.done {
				h.bad = "text after the arguments"
				return
			}
		}
		wasInStr := h.val.inStr
		took, done, err := h.val.feed(b)
		if err != nil {
			h.bad = "the arguments are not JSON: " + err.Error()
			return
		}
		if !h.started {
			h.started, h.object = true, b == '{'
		}
		if took {
			if h.object {
				if significant(b, wasInStr) {
					h.out = append(h.out, b)
				}
			} else {
				h.raw = append(h.raw, b)
			}
		}
		if done {
			h.done = true
			if !took { // a scalar ends at the byte after it, which is not part of the value
				k--
			}
		}
	}
}

// harmonyEnd closes the message at marker m ("" at the end of the output).
func (p *Parser) harmonyEnd(m string) {
	h := &p.hm
	switch h.kind {
	case Reasoning:
		p.held = "" // whitespace at the end of reasoning is the template's layout
	case CallArguments:
		if c := p.cur; c != nil {
			c.raw.WriteString(m)
			switch {
			case c.failed:
			case h.bad != "":
				p.fail(c, ErrMalformed, h.bad)
			case !h.started:
				p.callArgs(c, "{}")
			case !h.done && h.val.endsAtEOF():
				p.harmonyScalar(c)
			case !h.done && m == "":
				p.fail(c, ErrTruncated, "")
			case !h.done:
				p.fail(c, ErrMalformed, "the arguments end before their JSON does")
			case !h.object:
				p.harmonyScalar(c)
			}
			p.endCall(c)
		}
	}
	p.hm = harmonyMessage{}
}

// harmonyScalar emits arguments written as a value other than an object.
func (p *Parser) harmonyScalar(c *call) {
	args, bad := textArguments(p.hm.raw)
	if bad != "" {
		p.fail(c, ErrMalformed, bad)
		return
	}
	p.callArgs(c, args)
}

// stepHarmonyText reads between messages, and text that is not in a message: it is content as written (but
// for whitespace before the next header), up to a marker that opens a header (<|start|>, <|channel|>); the
// other markers there say nothing and are dropped, so no marker ever reaches content.
func (p *Parser) stepHarmonyText() bool {
	if p.buf == "" {
		return false
	}
	i, m := findMarker(p.buf, harmonyMarks)
	if i < 0 {
		keep := 0
		if !p.eof {
			keep = holdLen(p.buf, harmonyMarks)
		}
		p.emitHeld(Content, p.buf[:len(p.buf)-keep])
		p.buf = p.buf[len(p.buf)-keep:]
		return false
	}
	p.emitHeld(Content, p.buf[:i])
	p.buf = p.buf[i+len(m):]
	switch m {
	case markStart:
		p.held, p.st = "", sHarmonyHeader // whitespace between messages is layout
	case markChannel:
		p.held, p.st = "", sHarmonyHeader
		p.hm.header.WriteString(markChannel)
	}
	return true
}
