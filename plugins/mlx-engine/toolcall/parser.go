package toolcall

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// DeltaKind says what a Delta carries.
type DeltaKind uint8

const (
	// Content is ordinary text (delta.content).
	Content DeltaKind = iota + 1
	// Reasoning is thinking text (delta.reasoning_content).
	Reasoning
	// CallStart opens a tool call: Index, ID and Name (the first delta.tool_calls[] entry of the call, with
	// "type": "function"). It always comes before the call's arguments.
	CallStart
	// CallArguments is a fragment of a call's arguments (delta.tool_calls[].function.arguments); the fragments
	// of one call, concatenated, are its arguments.
	CallArguments
)

func (k DeltaKind) String() string {
	switch k {
	case Content:
		return "content"
	case Reasoning:
		return "reasoning"
	case CallStart:
		return "call_start"
	case CallArguments:
		return "call_arguments"
	}
	return "DeltaKind(?)"
}

// Delta is one piece of the parsed stream.
type Delta struct {
	Kind DeltaKind
	// Text is the text of Content and Reasoning deltas and the fragment of CallArguments deltas.
	Text string
	// Index is the call's index (CallStart, CallArguments).
	Index int
	// ID and Name are set on CallStart.
	ID   string
	Name string
}

// Call is a complete (or, after ErrTruncated, partial) tool call.
type Call struct {
	Index int
	ID    string
	Name  string
	// Arguments is the arguments object as JSON text: the concatenation of the call's CallArguments deltas.
	Arguments string
}

// Result is the whole parsed output: what the deltas of Feed and Finish add up to.
type Result struct {
	Content   string
	Reasoning string
	// Calls are the calls that started streaming, in order; a call that failed before its name was accepted
	// (malformed, unknown tool) is not among them, only in the error.
	Calls []Call
}

// Options configure a Parser for one request.
type Options struct {
	// Tools are the request's tools. With none, tool-call markers are ordinary content (as vLLM answers a
	// request without tools, and since the model was not offered any tool); reasoning is still parsed.
	Tools []Tool
	// StartInReasoning says the prompt opened a reasoning block (Format.OpensReasoning of the rendered prompt):
	// the output starts with reasoning text and closes it with the close marker. Ignored for a format without
	// reasoning.
	StartInReasoning bool
	// NewID returns the id of each call, in order, non-empty and unique within the response; nil draws random
	// ones (see NewIDs).
	NewID func() string
}

// Parser turns a model's streamed output into content, reasoning and tool calls. It is not safe for
// concurrent use: one request, one goroutine.
type Parser struct {
	f       Format
	tools   map[string]*compiledTool
	newID   func() string
	callsOn bool

	openR, closeR string   // reasoning markers
	marks         []string // markers recognized in content
	resync        []string // where parsing resumes after a malformed call

	buf      string // text not yet consumed
	eof      bool
	finished bool
	st       state
	boundary boundary
	held     string // whitespace held back in content or reasoning
	lead     string // whitespace before a tentative Llama 3 object, content if the object is
	rStart   bool   // at the start of a reasoning block: leading whitespace is dropped

	cur  *call    // the call being parsed
	body body     // <tool_call> body, or bare <function=
	js   jsonCall // a JSON call object outside a block
	arr  arrayPhase
	word strings.Builder // Mistral name or id, or a <|python_tag|> body
	val  valueScanner    // Mistral v11 arguments
	out  []byte          // compacted Mistral arguments not yet emitted
	hm   harmonyMessage  // the harmony message being read

	content   strings.Builder
	reasoning strings.Builder
	started   []*call
	errs      []error
	next      int // index of the next call
	deltas    []Delta
}

type state uint8

const (
	sContent       state = iota
	sReasoning           // inside a reasoning block
	sBlock               // inside <tool_call> … </tool_call>
	sBareXML             // Qwen3-Coder <function=…> without <tool_call>
	sJSONCall            // a JSON call object: Llama 3 at the start or after <|python_tag|>, Mistral [TOOL_CALLS]{
	sMistral             // after [TOOL_CALLS]
	sMistralArray        // in [TOOL_CALLS][ … ]
	sMistralName         // [TOOL_CALLS]NAME
	sMistralID           // [CALL_ID]ID
	sMistralArgs         // the JSON value after the name or [ARGS]
	sPythonTag           // after <|python_tag|>, before its first character
	sPythonBody          // a built-in call or code after <|python_tag|>
	sSkip                // the rest of a malformed call, up to where parsing can resume
	sHarmonyHeader       // a harmony message header, up to <|message|>
	sHarmonyBody         // a harmony message body, up to its end
	sHarmonyText         // harmony text outside a message
)

// boundary: where content text stands, which decides what happens to whitespace and whether a Llama 3 JSON
// call may begin.
type boundary uint8

const (
	bNone       boundary = iota
	bStart               // start of the output: leading whitespace is kept if text follows
	bAfterThink          // right after a reasoning block, before any content: leading whitespace is dropped
	bAfterCall           // after a tool call: whitespace is dropped unless text follows earlier content
)

// call is the parser's record of one tool call.
type call struct {
	index   int
	name    string
	tool    *compiledTool
	started bool
	failed  bool
	err     *CallError
	id      string
	pending strings.Builder // argument text that came before the name
	args    strings.Builder // argument text emitted
	raw     strings.Builder // the call's text as written
}

// NewParser returns a parser for one generation. It fails only on bad tools: an empty or repeated name, or
// parameters that are not a JSON Schema object.
func NewParser(f Format, opts Options) (*Parser, error) {
	tools, err := compileTools(opts.Tools)
	if err != nil {
		return nil, err
	}
	p := &Parser{f: f, tools: tools, newID: opts.NewID, boundary: bStart}
	if p.newID == nil {
		p.newID = NewIDs(f.Calls, rand.Uint64())
	}
	p.callsOn = f.Calls != CallsNone && len(tools) > 0
	p.openR, p.closeR = f.Reasoning.markers()
	if p.openR != "" {
		p.marks = append(p.marks, p.openR, p.closeR)
	}
	if p.callsOn {
		switch f.Calls {
		case CallsHermes:
			p.marks = append(p.marks, markToolCall, markToolCallEnd)
			p.resync = []string{markToolCall}
		case CallsQwen3Coder:
			p.marks = append(p.marks, markToolCall, markToolCallEnd, markFunction)
			p.resync = []string{markToolCall, markFunction}
		case CallsMistral:
			p.marks = append(p.marks, markMistral)
			p.resync = []string{markMistral}
		case CallsLlama3:
			p.marks = append(p.marks, markPythonTag, markEOM, markEOT)
			p.resync = []string{markPythonTag}
		}
	}
	if opts.StartInReasoning && p.openR != "" {
		p.st, p.rStart = sReasoning, true
	}
	if f.Calls == CallsHarmony {
		// The prompt ends with <|start|>assistant: the output begins with the rest of a header.
		p.st = sHarmonyHeader
	}
	return p, nil
}

// Feed takes the next piece of generated text (any split: a marker may come in many pieces) and returns the
// deltas it completes. Text that may still turn out to be part of a marker is held back until it cannot.
func (p *Parser) Feed(text string) []Delta {
	if p.finished {
		return nil
	}
	p.buf += text
	p.run()
	return p.take()
}

// Finish ends the output: it releases what was held back, closes what is open, and returns the Result, the
// last deltas, and the calls' errors (a *CallError, or several joined with errors.Join; nil when every call was
// valid). A call cut off by the end of the output is reported with ErrTruncated and stays in the Result as
// streamed; a Llama 3 JSON object that had not shown itself to be a call yet is content.
func (p *Parser) Finish() (Result, []Delta, error) {
	if !p.finished {
		p.eof = true
		p.run()
		switch p.st {
		case sContent:
			if p.boundary == bNone || p.boundary == bStart {
				p.emitText(Content, p.held)
			}
		case sReasoning:
			// Trailing whitespace of reasoning is dropped, as at its close marker.
		default:
			// Every call state ends itself at the end of the output; this is a safety net.
			if p.cur != nil {
				p.fail(p.cur, ErrTruncated, "")
				p.endCall(p.cur)
			}
		}
		p.held = ""
		p.finished = true
	}
	return p.result(), p.take(), p.Err()
}

// Err returns the errors of the calls parsed so far, as Finish does; an engine may stop generating at the
// first one.
func (p *Parser) Err() error {
	switch len(p.errs) {
	case 0:
		return nil
	case 1:
		return p.errs[0]
	}
	return errors.Join(p.errs...)
}

func (p *Parser) result() Result {
	r := Result{Content: p.content.String(), Reasoning: p.reasoning.String()}
	for _, c := range p.started {
		r.Calls = append(r.Calls, Call{Index: c.index, ID: c.id, Name: c.name, Arguments: c.args.String()})
	}
	return r
}

func (p *Parser) take() []Delta {
	d := p.deltas
	p.deltas = nil
	return d
}

func (p *Parser) run() {
	for p.step() {
	}
}

// step advances the state machine; it reports false when it needs more text (or has none left).
func (p *Parser) step() bool {
	switch p.st {
	case sContent:
		return p.stepContent()
	case sReasoning:
		return p.stepReasoning()
	case sBlock, sBareXML:
		return p.stepBlock()
	case sJSONCall:
		return p.stepJSONCall()
	case sMistral:
		return p.stepMistral()
	case sMistralArray:
		return p.stepMistralArray()
	case sMistralName:
		return p.stepMistralName()
	case sMistralID:
		return p.stepMistralID()
	case sMistralArgs:
		return p.stepMistralArgs()
	case sPythonTag:
		return p.stepPythonTag()
	case sPythonBody:
		return p.stepPythonBody()
	case sSkip:
		return p.stepSkip()
	case sHarmonyHeader:
		return p.stepHarmonyHeader()
	case sHarmonyBody:
		return p.stepHarmonyBody()
	case sHarmonyText:
		return p.stepHarmonyText()
	}
	panic("toolcall: unknown state")
}

// emit appends a delta, merging it into the previous one when both continue the same text.
func (p *Parser) emit(d Delta) {
	if n := len(p.deltas); n > 0 && d.Kind != CallStart {
		if last := &p.deltas[n-1]; last.Kind == d.Kind && last.Index == d.Index {
			last.Text += d.Text
			return
		}
	}
	p.deltas = append(p.deltas, d)
}

// emitText emits content or reasoning text as it is.
func (p *Parser) emitText(k DeltaKind, s string) {
	if s == "" {
		return
	}
	if k == Content {
		p.content.WriteString(s)
	} else {
		p.reasoning.WriteString(s)
	}
	p.emit(Delta{Kind: k, Text: s})
}

// emitHeld emits the held whitespace and s, holding back the whitespace s ends with: whitespace right before a
// tool call or the end of a reasoning block is dropped.
func (p *Parser) emitHeld(k DeltaKind, s string) {
	t := p.held + s
	end := len(t)
	for end > 0 && isSpace(t[end-1]) {
		end--
	}
	p.emitText(k, t[:end])
	p.held = t[end:]
}

// eat consumes n bytes of the buffer as part of the current call's text.
func (p *Parser) eat(n int) {
	if p.cur != nil {
		p.cur.raw.WriteString(p.buf[:n])
	}
	p.buf = p.buf[n:]
}

func (p *Parser) toContent(b boundary) {
	p.st, p.boundary, p.held = sContent, b, ""
}

func (p *Parser) stepContent() bool {
	if p.buf == "" {
		return false
	}
	if p.boundary != bNone {
		n := 0
		for n < len(p.buf) && (isSpace(p.buf[n]) || p.boundary == bAfterCall && p.f.Calls == CallsLlama3 && p.buf[n] == ';') {
			n++
		}
		p.held += p.buf[:n]
		p.buf = p.buf[n:]
		if p.buf == "" {
			return false
		}
		at, partial := markerAt(p.buf, p.marks)
		switch {
		case at != "":
			// A marker right at the boundary: the whitespace before it goes with it.
			p.held, p.boundary = "", bNone
		case partial && !p.eof:
			return false
		case p.buf[0] == '{' && p.callsOn && p.f.Calls == CallsLlama3:
			// The whitespace goes with the call, or with the content if the object is not one.
			p.lead = ""
			if p.boundary == bStart {
				p.lead = p.held
			}
			p.held = ""
			p.beginJSONCall("", p.boundary != bAfterCall)
			return true
		default:
			// Text: whitespace that only separates it from a reasoning block or a call goes.
			if p.boundary == bAfterThink || p.boundary == bAfterCall && p.content.Len() == 0 {
				p.held = ""
			}
			p.boundary = bNone
		}
	}
	if i, m := findMarker(p.buf, p.marks); i >= 0 {
		p.emitHeld(Content, p.buf[:i])
		p.buf = p.buf[i+len(m):]
		p.contentMarker(m)
		return true
	}
	keep := 0
	if !p.eof {
		keep = holdLen(p.buf, p.marks)
	}
	p.emitHeld(Content, p.buf[:len(p.buf)-keep])
	p.buf = p.buf[len(p.buf)-keep:]
	return false
}

// contentMarker acts on a marker found in content; the text before it has been emitted and its trailing
// whitespace is held.
func (p *Parser) contentMarker(m string) {
	switch m {
	case p.openR:
		if p.content.Len() > 0 {
			p.emitText(Content, p.held)
		}
		p.held = ""
		p.st, p.rStart = sReasoning, true
	case p.closeR:
		// A close marker without its open one: the prompt opened the block (Options.StartInReasoning was not
		// set) or the model wrote it; it is dropped either way.
		if p.content.Len() == 0 {
			p.toContent(bAfterThink)
		}
	case markToolCallEnd, markEOM, markEOT:
		// End markers outside a call say nothing more.
		p.toContent(bAfterCall)
	case markToolCall:
		p.beginBlock(markToolCall, false)
	case markFunction:
		p.beginBlock(markFunction, true)
	case markMistral:
		p.held, p.st = "", sMistral
	case markPythonTag:
		p.held = ""
		p.newCall(markPythonTag)
		p.st = sPythonTag
	}
}

func (p *Parser) stepReasoning() bool {
	if p.rStart {
		n := 0
		for n < len(p.buf) && isSpace(p.buf[n]) {
			n++
		}
		p.buf = p.buf[n:]
		if p.buf == "" {
			return false
		}
		p.rStart = false
	}
	if i := strings.Index(p.buf, p.closeR); i >= 0 {
		p.emitHeld(Reasoning, p.buf[:i])
		p.buf = p.buf[i+len(p.closeR):]
		if p.content.Len() == 0 {
			p.toContent(bAfterThink)
		} else {
			p.toContent(bNone)
		}
		return true
	}
	keep := 0
	if !p.eof {
		keep = holdLen(p.buf, []string{p.closeR})
	}
	p.emitHeld(Reasoning, p.buf[:len(p.buf)-keep])
	p.buf = p.buf[len(p.buf)-keep:]
	return false
}

// newCall starts the record of a call at its opening marker.
func (p *Parser) newCall(marker string) *call {
	c := &call{index: p.next}
	p.next++
	c.raw.WriteString(marker)
	p.cur = c
	return c
}

// callName accepts the function name: the call starts streaming if the name is one of the tools.
func (p *Parser) callName(c *call, name string) {
	c.name = name
	if c.failed || c.started {
		return
	}
	t := p.tools[name]
	if t == nil {
		names := make([]string, 0, len(p.tools))
		for n := range p.tools {
			names = append(names, fmt.Sprintf("%q", n))
		}
		sort.Strings(names)
		p.fail(c, ErrUnknownTool, fmt.Sprintf("%q is not one of %s", name, strings.Join(names, ", ")))
		return
	}
	c.tool, c.started, c.id = t, true, p.newID()
	p.started = append(p.started, c)
	p.emit(Delta{Kind: CallStart, Index: c.index, ID: c.id, Name: name})
	if c.pending.Len() > 0 {
		s := c.pending.String()
		c.pending.Reset()
		p.callArgs(c, s)
	}
}

// callArgs streams a fragment of the call's arguments, or keeps it until the name is known.
func (p *Parser) callArgs(c *call, s string) {
	if c.failed || s == "" {
		return
	}
	if !c.started {
		c.pending.WriteString(s)
		return
	}
	c.args.WriteString(s)
	p.emit(Delta{Kind: CallArguments, Index: c.index, Text: s})
}

// fail records the call's first error; the call emits nothing more.
func (p *Parser) fail(c *call, kind error, detail string) {
	if c.failed {
		return
	}
	c.failed = true
	c.err = &CallError{Index: c.index, Name: c.name, Kind: kind, Detail: detail}
	p.errs = append(p.errs, c.err)
}

// endCall closes the call: one that has not failed must have started and have arguments its tool accepts.
func (p *Parser) endCall(c *call) {
	if !c.failed {
		if !c.started {
			p.fail(c, ErrMalformed, "no function name")
		} else if detail, kind := c.tool.check(c.args.String()); kind != nil {
			p.fail(c, kind, detail)
		}
	}
	if c.err != nil {
		c.err.Name = c.name
		c.err.Text = c.raw.String()
	}
	p.cur = nil
}

// dropCall forgets a call that turned out not to be one (a Llama 3 JSON object that is content).
func (p *Parser) dropCall(c *call) {
	p.next = c.index
	p.cur = nil
}

func (p *Parser) beginBlock(marker string, bare bool) {
	p.held = ""
	p.newCall(marker)
	p.body = body{}
	p.st = sBlock
	if bare {
		p.st = sBareXML
		p.body.phase, p.body.bare = phXML, true
	}
}

// stepBlock parses a <tool_call> block, whose body is cut at </tool_call> wherever it comes (as vLLM's regular
// expressions cut it), or a bare <function=…> call, which ends itself at </function>.
func (p *Parser) stepBlock() bool {
	c := p.cur
	bare := p.st == sBareXML
	i := -1
	var safe string
	final := p.eof
	if !bare {
		i = strings.Index(p.buf, markToolCallEnd)
	}
	switch {
	case i >= 0:
		safe, final = p.buf[:i], true
	case p.eof || bare:
		safe = p.buf
	default:
		safe = p.buf[:len(p.buf)-holdLen(p.buf, []string{markToolCallEnd})]
	}
	n := p.body.feed(p, c, safe, final)
	p.eat(n)
	if bare {
		switch {
		case p.body.phase == phSkip:
			p.st = sSkip
			return true
		case p.body.phase == phTrail:
			p.endCall(c)
			p.toContent(bAfterCall)
			return true
		case p.eof:
			p.body.close(p, c, true)
			p.endCall(c)
			p.toContent(bAfterCall)
			return true
		}
		return n > 0
	}
	if !final || n < len(safe) {
		return n > 0
	}
	p.body.close(p, c, i < 0)
	if i >= 0 {
		p.eat(len(markToolCallEnd))
	}
	p.endCall(c)
	p.toContent(bAfterCall)
	return true
}

// beginJSONCall starts a JSON call object; tentative: a Llama 3 object that is content unless its first member
// shows it is a call.
func (p *Parser) beginJSONCall(marker string, tentative bool) {
	if p.cur == nil {
		p.newCall(marker)
	}
	p.js = jsonCall{tentative: tentative}
	p.st = sJSONCall
}

func (p *Parser) stepJSONCall() bool {
	c := p.cur
	n := p.js.write(p, c, p.buf)
	p.eat(n)
	switch {
	case p.js.rejected || p.eof && p.js.tentative && !p.js.complete:
		text := p.lead + c.raw.String()
		p.dropCall(c)
		p.toContent(bNone)
		p.emitHeld(Content, text)
		return true
	case p.js.failed:
		p.st = sSkip
		return true
	case p.js.complete:
		p.endCall(c)
		p.toContent(bAfterCall)
		return true
	case p.eof:
		p.fail(c, ErrTruncated, "")
		p.endCall(c)
		p.toContent(bAfterCall)
		return true
	}
	return false
}

// stepSkip consumes the rest of a malformed call up to where the next call may start.
func (p *Parser) stepSkip() bool {
	c := p.cur
	i, _ := findMarker(p.buf, p.resync)
	if i >= 0 {
		p.eat(i)
		p.endCall(c)
		p.toContent(bAfterCall)
		return true
	}
	keep := 0
	if !p.eof {
		keep = holdLen(p.buf, p.resync)
	}
	p.eat(len(p.buf) - keep)
	if p.eof {
		p.endCall(c)
		p.toContent(bAfterCall)
		return true
	}
	return false
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// findMarker returns the first position of any marker in s and the marker there (the longest, if several
// start there). No marker of a set is part of another, so the first complete one is the one that counts.
func findMarker(s string, marks []string) (int, string) {
	best, bm := -1, ""
	for _, m := range marks {
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best || i == best && len(m) > len(bm)) {
			best, bm = i, m
		}
	}
	return best, bm
}

// holdLen returns the length of the longest suffix of s that is a proper prefix of a marker: the text that
// must wait for more before it can be released.
func holdLen(s string, marks []string) int {
	keep := 0
	for _, m := range marks {
		for n := min(len(m)-1, len(s)); n > keep; n-- {
			if strings.HasSuffix(s, m[:n]) {
				keep = n
				break
			}
		}
	}
	return keep
}

// markerAt reports the marker s starts with, or whether s is a proper prefix of one.
func markerAt(s string, marks []string) (string, bool) {
	partial := false
	best := ""
	for _, m := range marks {
		if strings.HasPrefix(s, m) {
			if len(m) > len(best) {
				best = m
			}
		} else if len(s) < len(m) && strings.HasPrefix(m, s) {
			partial = true
		}
	}
	return best, partial
}
