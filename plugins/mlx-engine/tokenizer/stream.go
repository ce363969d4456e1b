package tokenizer

// Stream decodes tokens one at a time for streaming output. Add returns the text that the new token completes;
// it never splits a UTF-8 character, and it holds back only what the next token may still change (an unfinished
// character, a run of bytes, a space the decoder may strip). The concatenation of everything Add and Flush
// return equals Decode of all the ids. Each Add costs time proportional to the token, not to the text so far.
//
// A Stream is not safe for concurrent use; use one per generated sequence.
type Stream struct {
	t    *Tokenizer
	skip bool
	keep map[int32]bool // special tokens produced even when skipping the others
	p    *pipeline
}

// NewStream starts an incremental decode. With skipSpecial, special tokens produce no text.
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skip: skipSpecial, p: newPipeline(t.decoder)}
}

// NewStreamKeeping starts an incremental decode in which special tokens produce no text, except those in keep
// (the markers an output parser reads, e.g. <|python_tag|>).
func (t *Tokenizer) NewStreamKeeping(keep map[int32]bool) *Stream {
	return &Stream{t: t, skip: true, keep: keep, p: newPipeline(t.decoder)}
}

// Add decodes one more token and returns the text it completes, possibly "".
func (s *Stream) Add(id int32) string {
	s.feed(id)
	return s.p.take()
}

// Flush ends the text and returns what was held back: an unfinished character comes out as U+FFFD. A later
// Add starts a new text, as if the Stream were new.
func (s *Stream) Flush() string {
	s.p.flush()
	out := s.p.take()
	s.p = newPipeline(s.t.decoder)
	return out
}

func (s *Stream) feed(id int32) {
	t := s.t
	if s.skip && t.special[id] && !s.keep[id] {
		return
	}
	if i, ok := t.addedByID[id]; ok {
		s.p.push(piece{text: t.added[i].Content, begin: true, end: true, added: true})
		return
	}
	if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
		s.p.push(piece{text: t.model.tokens[id], begin: true, end: true})
	}
}
