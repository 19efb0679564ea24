package wire

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf8"
)

// This file turns a continuation's events into the rest of the original
// stream, so that the caller's SDK accumulates one whole answer: the
// original's id on every event that carries one, its indices continued,
// one preamble, one completion marker, and the continuation's text with
// what the caller already has cut off. What each API's SDK needs of a
// spliced stream:
//
//   - Chat Completions (openai-go's ChatCompletionAccumulator rejects a
//     chunk whose id differs from the first's): every chunk carries the
//     first chunk's id; the continuation's role chunk (and Azure's
//     prompt-filter chunk) is dropped; its finish_reason chunk, usage
//     chunk and [DONE] are handed on.
//   - Messages (anthropic-sdk-go's Message.Accumulate appends a block's
//     text_delta to the block at its index, and wants a block's start at
//     the next index): the continuation's message_start is dropped; its
//     first text block continues the original's open text block (its
//     content_block_start dropped, its text handed on as text_delta under
//     the original's index); later blocks are numbered after the
//     original's; message_delta (the stop reason and the continuation's
//     cumulative usage) and message_stop are handed on.
//   - Gemini (genai hands each chunk over; callers concatenate the first
//     candidate's parts' text): text parts carry the continuation's text
//     with what the caller has cut off; responseId is the original's.
//   - Responses, resumed: the events after starting_after are the
//     original's own and are handed on as they are (any the caller
//     already has, by sequence number, dropped).
//
// The splicer tells the Stream what it hands on (it observes each event it
// writes), so a second cut is continued from the right point.

// ErrDiverged says a regeneration (or a prefill an endpoint answered by
// starting over) does not begin with the text already delivered, or that
// the continuation's shape departs from what the caller has (a tool call
// or an end before the delivered text was covered, several choices).
var ErrDiverged = errors.New("the regenerated answer does not begin with what was delivered")

// The ways a continuation departs, each wrapping ErrDiverged.
var (
	errDivergedText    = ErrDiverged
	errDivergedEnd     = divergedError("the regenerated answer ended before it covered what was delivered")
	errDivergedTool    = divergedError("the regenerated answer calls a tool where the delivered text is")
	errDivergedChoices = divergedError("the continuation has several choices")
	errDivergedShape   = divergedError("the continuation's event belongs to no block it started")
	errNoSplice        = errors.New("no splicer continues this API's stream with this strategy")
)

// divergedError is a departure of a continuation, said more precisely.
type divergedError string

func (e divergedError) Error() string { return string(e) }
func (divergedError) Unwrap() error   { return ErrDiverged }

// spliceMode is what the splicer does with the continuation's next text.
type spliceMode uint8

const (
	modeContinue spliceMode = iota // hand it on
	modeDecide                     // hold it until it shows whether the reply continued the prefill or started over
	modeMatch                      // match it against the delivered text, which it must begin with
	modeResume                     // hand on every event after the last sequence number delivered
	modeNone                       // no splice for this API and strategy
)

// contBlock is one block of a Messages continuation: the index the caller
// sees it under, or unopened (-1: a text block nothing of which was handed
// on yet) or dropped (-2: a block of the regeneration's preamble).
type contBlock struct {
	out     int
	text    bool
	stopped bool
}

const (
	blockUnopened = -1
	blockDropped  = -2
)

// Splicer turns one continuation's events into the rest of the original
// stream. Make one per continuation attempt with Stream.Splice. It keeps
// the continuation's text it holds back to decide or match (at most the
// delivered text and one event's text more), one event's scratch, and the
// heldBack it was given (not a copy). It is owned by the one reader of its
// Stream and not safe for concurrent use; the zero Splicer continues
// nothing (its Next fails).
type Splicer struct {
	s       *Stream
	st      Strategy
	mode    spliceMode
	base    int // how much of the Stream's text was delivered when the continuation began
	matched int // modeMatch: how much of it the regeneration covered
	held    []byte
	ws      []byte // heldBack whitespace the continuation may repeat
	err     error

	w     walker
	ed    editor
	buf   []byte // an event's data as handed on
	text  []byte // a continuation text piece, decoded
	parts []geminiPart
	// Messages: the continuation's blocks by index, whether the caller's
	// open text block was claimed (continued or stopped), and the
	// continuation's last text block.
	blocks   []contBlock
	claimed  bool
	lastText int
	num      [20]byte // an index being written
}

// The types of the Messages events a splice writes.
var (
	typBlockStart = []byte("content_block_start")
	typBlockDelta = []byte("content_block_delta")
	typBlockStop  = []byte("content_block_stop")
)

// Splice returns a Splicer for one continuation of st, from what s has
// delivered so far. heldBack is what PrefillBody returned with the body
// sent (nil for the other strategies); the Splicer keeps it, not a copy.
// The Splicer uses s (it tells s each event it hands on): use them from
// one goroutine, and make a new Splicer for each continuation.
func (s *Stream) Splice(st Strategy, heldBack []byte) *Splicer {
	sp := &Splicer{s: s, st: st, base: len(s.text), ws: heldBack, lastText: -1}
	switch {
	case !s.keep:
		sp.mode = modeNone
	case s.api == Responses && st == Resume:
		sp.mode = modeResume
	case s.api != ChatCompletions && s.api != Messages && s.api != Gemini,
		st != Prefill && st != PrefillPrefix && st != Regenerate:
		sp.mode = modeNone
	case sp.base == 0:
		sp.mode = modeContinue
	case st == Regenerate:
		sp.mode = modeMatch
	default:
		sp.mode = modeDecide
	}
	return sp
}

// Next is given each complete event of the continuation in order (typ
// and data as the Framer gives them) and appends to dst what to hand the
// caller in its place, framed as server-sent events ("event: T\ndata:
// D\n\n", or "data: D\n\n" for the untyped APIs): nothing (a preamble the
// original already sent, text still being matched or held), the event
// rewritten (the original's id, indices continuing the original's, the
// text with what the caller has cut off), or more than one event (a text
// block to open, held text to hand on first).
//
// Its Step is the continuation's own: StepError, StepMalformed or StepEnd
// (the continuation broke too; nothing appended), StepComplete (the
// answer is whole), StepContent otherwise. It returns ErrDiverged (or an
// error wrapping it), and appends nothing of the event, when the
// continuation departs from the delivered text: it never hands on a byte
// that differs from what the caller has. An error is final: every later
// call returns it. The Splicer has told its Stream each event it appended
// (do not Observe them again): Delivered, Complete and Stuck read the
// spliced stream, and a second cut is continued from there.
func (sp *Splicer) Next(dst []byte, typ, data []byte) ([]byte, Step, error) {
	if sp.err != nil {
		return dst, StepContent, sp.err
	}
	if sp.s == nil {
		return dst, StepContent, errNoSplice
	}
	var out []byte
	var step Step
	var err error
	switch sp.mode {
	case modeNone:
		err = errNoSplice
	case modeResume:
		out, step = sp.resume(dst, typ, data)
	default:
		switch sp.s.api {
		case ChatCompletions:
			out, step, err = sp.chat(dst, data)
		case Messages:
			out, step, err = sp.messages(dst, typ, data)
		case Gemini:
			out, step, err = sp.gemini(dst, data)
		}
	}
	if err != nil {
		sp.err = err
		return dst, StepContent, err
	}
	return out, step, nil
}

// take returns what of the continuation's next text piece t to hand on:
// a view of t or of the held text, valid until the next take; nothing
// while it is matched or held; ErrDiverged when it departs.
func (sp *Splicer) take(t []byte) ([]byte, error) {
	delivered := sp.s.text[:sp.base]
	switch sp.mode {
	case modeMatch:
		rest := delivered[sp.matched:]
		if len(t) <= len(rest) {
			if !bytes.Equal(t, rest[:len(t)]) {
				return nil, errDivergedText
			}
			if sp.matched += len(t); sp.matched == sp.base {
				sp.mode = modeContinue
			}
			return nil, nil
		}
		if !bytes.Equal(t[:len(rest)], rest) {
			return nil, errDivergedText
		}
		sp.matched, sp.mode = sp.base, modeContinue
		return t[len(rest):], nil
	case modeDecide:
		sp.held = append(sp.held, t...)
		n := min(len(sp.held), sp.base)
		if !bytes.Equal(sp.held[:n], delivered[:n]) {
			sp.mode = modeContinue // a continuation of the prefill
			return sp.skipSpace(sp.held), nil
		}
		if len(sp.held) < sp.base {
			return nil, nil
		}
		sp.mode, sp.ws = modeContinue, nil // the reply started over: it covered the delivered text
		return sp.held[sp.base:], nil
	}
	return sp.skipSpace(t), nil
}

// decide settles a continuation that is to hand on something other than
// text (a tool call, an end) before its text settled it: held text makes
// it a continuation of the prefill, and is returned to hand on first; a
// regeneration has departed (the caller's text is not covered).
func (sp *Splicer) decide(end bool) ([]byte, error) {
	switch sp.mode {
	case modeDecide:
		sp.mode = modeContinue
		return sp.skipSpace(sp.held), nil
	case modeMatch:
		if end {
			return nil, errDivergedEnd
		}
		return nil, errDivergedTool
	}
	return nil, nil
}

// skipSpace drops from t what it repeats of the held-back whitespace: the
// caller has that whitespace already.
func (sp *Splicer) skipSpace(t []byte) []byte {
	if len(sp.ws) == 0 {
		return t
	}
	k := 0
	for k < len(sp.ws) && k < len(t) && sp.ws[k] == t[k] {
		k++
	}
	// Whole characters only: a held-back U+00A0 (C2 A0) shares its first
	// byte with "»" (C2 BB).
	for k > 0 && (k < len(t) && !utf8.RuneStart(t[k]) || k < len(sp.ws) && !utf8.RuneStart(sp.ws[k])) {
		k--
	}
	sp.ws, t = sp.ws[k:], t[k:]
	if len(t) > 0 {
		sp.ws = nil
	}
	return t
}

// emit appends the event typ/data to dst and tells the Stream it was
// handed on.
func (sp *Splicer) emit(dst, typ, data []byte) ([]byte, Step) {
	return appendEvent(dst, typ, data), sp.s.Observe(typ, data)
}

// resume hands on a resumed Responses stream's events after the last one
// delivered.
func (sp *Splicer) resume(dst, typ, data []byte) ([]byte, Step) {
	var f responsesFacts
	switch step := responsesStep(&sp.w, typ, data, &f, sp.s.complete); {
	case step != StepContent:
		return dst, step
	case f.done:
		return sp.emit(dst, typ, data)
	case f.hasSeq && sp.s.hasSeq && f.seq <= sp.s.seq:
		return dst, StepContent // the caller has it
	}
	return sp.emit(dst, typ, data)
}

// chat splices a Chat Completions chunk.
func (sp *Splicer) chat(dst, data []byte) ([]byte, Step, error) {
	s := sp.s
	var f chatFacts
	switch {
	case !sp.w.chat(data, &f):
		return dst, StepMalformed, nil
	case f.done && s.complete:
		out, step := sp.emit(dst, nil, data)
		return out, step, nil
	case f.done:
		return dst, StepEnd, nil
	case f.err:
		return dst, StepError, nil
	case f.several:
		return dst, StepContent, errDivergedChoices
	case f.noChoices && f.promptFilter:
		return dst, StepContent, nil // Azure's prompt filter results: the original had them
	}
	var emit []byte
	var err error
	if f.hasContent {
		sp.text, _ = unquote(sp.text[:0], data[f.content.From:f.content.To])
		if emit, err = sp.take(sp.text); err != nil {
			return dst, StepContent, err
		}
	}
	more := f.tool || f.refusal || f.finish // what is more than text
	if more {
		var held []byte
		if held, err = sp.decide(f.finish && !f.tool && !f.refusal); err != nil {
			return dst, StepContent, err
		}
		if held != nil {
			emit = held // it holds this chunk's text too
		}
	}
	switch {
	case more || len(emit) > 0:
	case !s.hasID:
		// Nothing reached the caller yet: the continuation is the stream.
	case f.noChoices && sp.mode == modeContinue:
		// The usage chunk, or another without choices: hand it on.
	case f.hasContent || f.role || f.reasoning || sp.mode != modeContinue:
		// Text matched or held, the continuation's role chunk, its
		// reasoning (the caller has the original's), or a chunk with
		// nothing of the answer before the continuation settled.
		return dst, StepContent, nil
	}
	sp.ed.reset()
	if s.hasID && f.id.set() {
		sp.ed.replaceBytes(f.id, s.id)
	}
	switch {
	case f.hasContent:
		if !bytes.Equal(emit, sp.text) {
			sp.ed.replaceString(span{f.content.From - 1, f.content.To + 1}, emit)
		}
	case len(emit) > 0 && f.nullContent.set():
		// Held text, handed on in place of this chunk's "content": null
		// (a second "content" member would be read instead of it).
		sp.ed.replaceString(f.nullContent, emit)
	case len(emit) > 0 && f.delta.set():
		// Held text, handed on in this chunk's delta.
		at := f.delta.From + 1
		from := len(sp.ed.scratch)
		sp.ed.scratch = appendQuoted(append(sp.ed.scratch, `"content":`...), emit)
		if !blank(data[at : f.delta.To-1]) {
			sp.ed.scratch = append(sp.ed.scratch, ',')
		}
		sp.ed.edits = append(sp.ed.edits, edit{span{at, at}, span{from, len(sp.ed.scratch)}})
	case len(emit) > 0:
		// A chunk without a delta: the held text in a chunk of its own.
		sp.buf = append(sp.buf[:0], `{"id":`...)
		sp.buf = append(append(append(sp.buf, '"'), s.id...), '"')
		sp.buf = append(sp.buf, `,"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":`...)
		sp.buf = append(appendQuoted(sp.buf, emit), `},"finish_reason":null}]}`...)
		dst, _ = sp.emit(dst, nil, sp.buf)
	}
	sp.buf = sp.ed.apply(sp.buf[:0], data)
	out, step := sp.emit(dst, nil, sp.buf)
	return out, step, nil
}

// gemini splices a Gemini GenerateContentResponse.
func (sp *Splicer) gemini(dst, data []byte) ([]byte, Step, error) {
	s := sp.s
	var f geminiFacts
	var ok bool
	if sp.parts, ok = sp.w.gemini(data, &f, sp.parts, true); !ok {
		return dst, StepMalformed, nil
	}
	switch {
	case f.err:
		return dst, StepError, nil
	case f.several:
		return dst, StepContent, errDivergedChoices
	}
	// First what may depart, so that nothing is written before it.
	sp.ed.reset()
	var held []byte
	handed := false // the chunk hands on something of the answer
	for _, p := range sp.parts {
		switch {
		case p.kind != partText:
			if sp.mode != modeContinue {
				h, err := sp.decide(false)
				if err != nil {
					return dst, StepContent, err
				}
				held = append(held, h...)
			}
			handed = true
		case p.thought:
			if sp.mode != modeContinue {
				sp.ed.replaceString(span{p.text.From - 1, p.text.To + 1}, nil) // the continuation's thoughts: the caller has the original's
			} else {
				handed = true
			}
		case p.hasText:
			sp.text, _ = unquote(sp.text[:0], data[p.text.From:p.text.To])
			emit, err := sp.take(sp.text)
			if err != nil {
				return dst, StepContent, err
			}
			if !bytes.Equal(emit, sp.text) {
				sp.ed.replaceString(span{p.text.From - 1, p.text.To + 1}, emit)
			}
			handed = handed || len(emit) > 0
		}
	}
	if f.finish {
		h, err := sp.decide(true)
		if err != nil {
			return dst, StepContent, err
		}
		held = append(held, h...)
		handed = true
	}
	if !handed && (f.content || sp.mode != modeContinue) {
		return dst, StepContent, nil
	}
	if s.hasID && f.id.set() {
		sp.ed.replaceBytes(f.id, s.id)
	}
	if len(held) > 0 {
		// Held text goes first, in a chunk of its own.
		sp.buf = appendQuoted(append(sp.buf[:0], `{"candidates":[{"content":{"parts":[{"text":`...), held)
		sp.buf = append(sp.buf, `}],"role":"model"},"index":0}]`...)
		if s.hasID {
			sp.buf = append(append(append(sp.buf, `,"responseId":"`...), s.id...), '"')
		}
		sp.buf = append(sp.buf, '}')
		dst, _ = sp.emit(dst, nil, sp.buf)
	}
	sp.buf = sp.ed.apply(sp.buf[:0], data)
	out, step := sp.emit(dst, nil, sp.buf)
	return out, step, nil
}

// messages splices an Anthropic Messages event.
func (sp *Splicer) messages(dst, typ, data []byte) ([]byte, Step, error) {
	s := sp.s
	switch string(typ) {
	case "error":
		return dst, StepError, nil
	case "ping":
		if sp.mode != modeContinue {
			return dst, StepContent, nil // nothing is handed on before the continuation settles
		}
		out, step := sp.emit(dst, typ, data)
		return out, step, nil
	case "":
		return dst, StepContent, nil // the SDK skips it
	}
	if blank(data) {
		return dst, StepContent, nil
	}
	var f messagesFacts
	if !sp.w.messages(data, &f) {
		return dst, StepMalformed, nil
	}
	jsonType := string(data[f.typ.From:f.typ.To])
	if role, _, _ := roleOf(data[f.typ.From:f.typ.To]); role == RoleError || f.err {
		return dst, StepError, nil
	}
	c := f.index
	switch jsonType {
	case "message_start":
		if s.hasID {
			return dst, StepContent, nil // the original's stands
		}
	case "content_block_start":
		if c < 0 || c > len(sp.blocks)+1024 {
			return dst, StepContent, errDivergedShape
		}
		for len(sp.blocks) <= c {
			sp.blocks = append(sp.blocks, contBlock{out: blockDropped})
		}
		b := &sp.blocks[c]
		switch bt := string(data[f.blockType.From:f.blockType.To]); {
		case bt == "text":
			*b, sp.lastText = contBlock{out: blockUnopened, text: true}, c
			if !f.hasBlockText {
				return dst, StepContent, nil
			}
			sp.text, _ = unquote(sp.text[:0], data[f.blockText.From:f.blockText.To])
			emit, err := sp.take(sp.text)
			if err != nil || len(emit) == 0 {
				return dst, StepContent, err
			}
			return sp.textDelta(dst, c, emit, nil, f)
		case sp.mode != modeContinue && (bt == "thinking" || bt == "redacted_thinking"):
			*b = contBlock{out: blockDropped} // the caller has the original's thinking
			return dst, StepContent, nil
		default:
			held, err := sp.decide(false)
			if err != nil {
				return dst, StepContent, err
			}
			if len(held) > 0 {
				dst, _ = sp.heldText(dst, held)
			}
			dst = sp.claim(dst)
			*b = contBlock{out: s.blocks}
			return sp.rewrite(dst, typ, data, f, b.out)
		}
	case "content_block_delta", "content_block_stop":
		if c < 0 || c >= len(sp.blocks) {
			return dst, StepContent, errDivergedShape
		}
		b := &sp.blocks[c]
		switch {
		case b.out == blockDropped:
			return dst, StepContent, nil
		case jsonType == "content_block_stop":
			b.stopped = true
			if b.out == blockUnopened {
				if sp.mode != modeContinue || s.openText < 0 || sp.claimed {
					return dst, StepContent, nil // an empty block, or one still matched
				}
				b.out, sp.claimed = s.openText, true
			}
			return sp.rewrite(dst, typ, data, f, b.out)
		case string(data[f.deltaType.From:f.deltaType.To]) == "text_delta" && f.hasDeltaText:
			sp.text, _ = unquote(sp.text[:0], data[f.deltaText.From:f.deltaText.To])
			emit, err := sp.take(sp.text)
			if err != nil || len(emit) == 0 {
				return dst, StepContent, err
			}
			return sp.textDelta(dst, c, emit, data, f)
		case b.out == blockUnopened:
			if sp.mode != modeContinue {
				return dst, StepContent, nil // a citation of text still matched
			}
			dst = sp.openBlock(dst, c)
		}
		return sp.rewrite(dst, typ, data, f, b.out)
	case "message_delta", "message_stop":
		if jsonType == "message_stop" && s.complete {
			break
		}
		held, err := sp.decide(true)
		if err != nil {
			return dst, StepContent, err
		}
		if len(held) > 0 {
			dst, _ = sp.heldText(dst, held)
		}
		if s.openText >= 0 && !sp.claimed {
			dst = sp.claim(dst) // the caller's open text block ends here
		}
	default:
		if sp.mode != modeContinue {
			return dst, StepContent, nil
		}
	}
	out, step := sp.emit(dst, typ, data)
	return out, step, nil
}

// openBlock opens the continuation's text block c for the caller: it
// continues the caller's open text block if that is not claimed yet, or
// starts a new one after the caller's blocks.
func (sp *Splicer) openBlock(dst []byte, c int) []byte {
	s, b := sp.s, &sp.blocks[c]
	if s.openText >= 0 && !sp.claimed {
		b.out, sp.claimed = s.openText, true
		return dst
	}
	b.out = s.blocks
	sp.buf = strconv.AppendInt(append(sp.buf[:0], `{"type":"content_block_start","index":`...), int64(b.out), 10)
	sp.buf = append(sp.buf, `,"content_block":{"type":"text","text":""}}`...)
	dst, _ = sp.emit(dst, typBlockStart, sp.buf)
	return dst
}

// claim stops the caller's open text block if the continuation has not
// continued it (a block of another kind starts, or the message ends).
func (sp *Splicer) claim(dst []byte) []byte {
	s := sp.s
	if s.openText < 0 || sp.claimed {
		return dst
	}
	sp.claimed = true
	sp.buf = strconv.AppendInt(append(sp.buf[:0], `{"type":"content_block_stop","index":`...), int64(s.openText), 10)
	sp.buf = append(sp.buf, '}')
	dst, _ = sp.emit(dst, typBlockStop, sp.buf)
	return dst
}

// heldText hands on held text in the continuation's last text block (and
// stops that block again if its stop already went by).
func (sp *Splicer) heldText(dst, held []byte) ([]byte, Step) {
	c := sp.lastText
	if c < 0 {
		// No text block: the held text came from none (it cannot); keep
		// the stream whole all the same.
		sp.blocks = append(sp.blocks, contBlock{out: blockUnopened, text: true})
		c = len(sp.blocks) - 1
	}
	dst = sp.openBlockFor(dst, c)
	b := &sp.blocks[c]
	dst, step := sp.synthDelta(dst, b.out, held)
	if b.stopped {
		sp.buf = strconv.AppendInt(append(sp.buf[:0], `{"type":"content_block_stop","index":`...), int64(b.out), 10)
		sp.buf = append(sp.buf, '}')
		dst, _ = sp.emit(dst, typBlockStop, sp.buf)
	}
	return dst, step
}

// openBlockFor opens block c for the caller unless it is open.
func (sp *Splicer) openBlockFor(dst []byte, c int) []byte {
	if sp.blocks[c].out < 0 {
		return sp.openBlock(dst, c)
	}
	return dst
}

// textDelta hands on emit, the text of the continuation's block c: in
// the event data rewritten (its index and text), or, for a
// content_block_start (data nil), in a text_delta of its own.
func (sp *Splicer) textDelta(dst []byte, c int, emit, data []byte, f messagesFacts) ([]byte, Step, error) {
	dst = sp.openBlockFor(dst, c)
	out := sp.blocks[c].out
	if data == nil {
		dst, step := sp.synthDelta(dst, out, emit)
		return dst, step, nil
	}
	sp.ed.reset()
	sp.ed.replaceBytes(f.indexAt, strconv.AppendInt(sp.num[:0], int64(out), 10))
	if !bytes.Equal(emit, sp.text) {
		sp.ed.replaceString(span{f.deltaText.From - 1, f.deltaText.To + 1}, emit)
	}
	sp.buf = sp.ed.apply(sp.buf[:0], data)
	dst, step := sp.emit(dst, typBlockDelta, sp.buf)
	return dst, step, nil
}

// synthDelta hands on text in a text_delta of block out.
func (sp *Splicer) synthDelta(dst []byte, out int, text []byte) ([]byte, Step) {
	sp.buf = strconv.AppendInt(append(sp.buf[:0], `{"type":"content_block_delta","index":`...), int64(out), 10)
	sp.buf = append(appendQuoted(append(sp.buf, `,"delta":{"type":"text_delta","text":`...), text), "}}"...)
	return sp.emit(dst, typBlockDelta, sp.buf)
}

// rewrite hands on a block event with its index made out.
func (sp *Splicer) rewrite(dst, typ, data []byte, f messagesFacts, out int) ([]byte, Step, error) {
	sp.ed.reset()
	if f.indexAt.set() {
		sp.ed.replaceBytes(f.indexAt, strconv.AppendInt(sp.num[:0], int64(out), 10))
	}
	sp.buf = sp.ed.apply(sp.buf[:0], data)
	dst, step := sp.emit(dst, typ, sp.buf)
	return dst, step, nil
}
