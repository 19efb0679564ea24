package wire

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
)

// This file follows a committed stream (a 2xx text/event-stream the caller
// reads) event by event, as the caller's SDK accumulates it, and keeps
// what continuing it after a cut needs: the answer's text so far, its id,
// its open block, its last sequence number, whether it is complete, and
// what forbids continuing it (a tool call, a thinking block, several
// choices). What each API's SDK accumulates, and so what is delivered:
//
//   - Chat Completions (openai-go's ChatCompletionAccumulator): the
//     chunks' choices[].delta.content, appended per choice; the first
//     chunk's id, which every later chunk must repeat; a choice ends at
//     its finish_reason; usage is summed over the chunks that carry it.
//   - Anthropic Messages (anthropic-sdk-go's Message.Accumulate):
//     message_start's message, then each content_block_start's block (a
//     text block may start with text) and its deltas (text_delta text,
//     thinking_delta, signature_delta, input_json_delta, citations_delta);
//     message_delta's stop reason and cumulative usage.
//   - OpenAI Responses: output_text.delta's delta, each event's
//     sequence_number, response.created's response id.
//   - Gemini (genai's GenerateContentResponse.Text): the first candidate's
//     parts' text, thought parts left out.
//
// Observe reads each event once with the checked walk (walk.go, events.go)
// and allocates nothing once the Stream's text buffer has grown.

// Step is what one event is to the stream that carries it; the zero Step
// is StepContent. It is a plain value.
type Step uint8

// The steps.
const (
	// StepContent is part of the answer, a preamble or a keep-alive: hand
	// it on.
	StepContent Step = iota
	// StepComplete is the completion marker: hand it on; the answer is
	// whole. Chat Completions: the chunk that gives every choice seen a
	// finish_reason; Messages: a
	// message_delta with a stop_reason, or message_stop if none came
	// before; Responses: response.completed or response.incomplete;
	// Gemini: the chunk whose first candidate has a finishReason. Only the
	// event that completes the answer is StepComplete: those after it
	// (message_stop, the usage chunk, [DONE]) are StepContent.
	StepComplete
	// StepError is an error event after the stream started (Anthropic's
	// and Responses' event: error, Responses' response.failed, a Chat
	// Completions or Gemini chunk with a top-level "error"): the stream
	// broke.
	StepError
	// StepMalformed is an event whose data the caller's SDK cannot read:
	// not one JSON value (and not [DONE] where the API sends it): the
	// stream broke. Anthropic's SDK skips untyped events and empty data,
	// so those are StepContent there.
	StepMalformed
	// StepEnd is the API's end-of-stream marker (data: [DONE]) before the
	// completion marker: the stream ended early. Do not hand it on: the
	// caller's SDK would take it for a clean end.
	StepEnd
)

// String names the step.
func (s Step) String() string {
	switch s {
	case StepContent:
		return "content"
	case StepComplete:
		return "complete"
	case StepError:
		return "error"
	case StepMalformed:
		return "malformed"
	case StepEnd:
		return "end"
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// Stream follows one committed stream as its events reach the caller, and
// keeps what continuing it needs: the message's or response's id, the
// open text block's index, the last sequence number, whether the answer
// is complete, whether a tool call or a thinking block is open or was
// delivered, whether it has several choices, and the text delivered so
// far (for a prefill and for matching a regeneration). It keeps no event
// bytes: its memory is the delivered text, its id, the scratch of one
// event's walk and O(1) more (TestStreamKeepsTheTextOnly states the
// bound). A Stream that does not keep its text (Reset's keep false) keeps
// O(1) and allocates nothing at all: it says only whether the answer is
// complete and whether an event broke the stream.
//
// The zero Stream follows nothing (its API is none, so Stuck says "an
// unknown API"); set it up with Reset. A Stream is owned by one reader and
// is not safe for concurrent use; a Splicer made from it uses it too.
type Stream struct {
	api     API
	keep    bool // keep the delivered text (and the id, the parts)
	sniffed bool // the events said which API they speak

	w    walker
	text []byte // the delivered text
	id   []byte // the message's or response's id, as written between its quotes

	hasID    bool
	complete bool
	// What forbids continuing.
	tool, thinking, refusal, other, tangled, several bool
	sawThinking                                      bool // Messages: a thinking block was delivered
	// Chat Completions: the choices seen and finished, and whether the
	// reasoning streamed last (reasoning_content before any content).
	seen, finished [2]uint64
	reasoning      bool
	// Messages: how many blocks started, the open text block (-1: none),
	// the thinking block being streamed (-1) and whether it is signed.
	blocks, openText, thinkAt int
	signed                    bool
	// Responses: the last sequence number; whether the response runs in
	// the background (response.background).
	seq        int64
	hasSeq     bool
	background bool
	// Gemini: one event's parts.
	parts []geminiPart
}

// requestFacts is what a request body says that continuing its stream
// needs (read by PrefillBody).
type requestFacts struct {
	n        int  // Chat Completions' n, Gemini's generationConfig.candidateCount
	thinking bool // Messages' thinking.type is "enabled" or "adaptive"
}

// Reset starts following a stream of api (APIOf the request; the events
// correct it, see Observe). keep says whether to keep what continuing
// the stream needs (the delivered text, the id: Policy.ContinueStreams);
// without it the Stream only says whether the answer is complete and
// whether an event broke the stream, and allocates nothing. Reset keeps
// the Stream's buffers.
func (s *Stream) Reset(api API, keep bool) {
	*s = Stream{
		api: api, keep: keep,
		w:    s.w,
		text: s.text[:0], id: s.id[:0], parts: s.parts[:0],
		openText: -1, thinkAt: -1,
	}
}

// Observe is told each complete event of the stream in the order the
// caller receives it (typ and data as the Framer gives them; Observe
// copies what it keeps) and says what the event is to the stream. An
// event that is not StepContent or StepComplete changes nothing the Stream
// keeps.
//
// The API Reset named comes from the request's URL, which a proxy may not
// spell as the provider does: until an event says which API it speaks (a
// type only Messages or only Responses sends, an untyped
// chat.completion.chunk, a GenerateContentResponse's candidates), the
// first one that does sets the API the Stream follows.
func (s *Stream) Observe(typ, data []byte) Step {
	if !s.sniffed {
		s.sniff(typ, data)
	}
	switch s.api {
	case ChatCompletions:
		return s.observeChat(data)
	case Messages:
		return s.observeMessages(typ, data)
	case Responses:
		return s.observeResponses(typ, data)
	case Gemini:
		return s.observeGemini(data)
	}
	return StepContent
}

// observeChat follows a Chat Completions chunk.
func (s *Stream) observeChat(data []byte) Step {
	var f chatFacts
	if !s.w.chat(data, &f) {
		return StepMalformed
	}
	switch {
	case f.done && s.complete:
		return StepContent
	case f.done:
		return StepEnd
	case f.err:
		return StepError
	}
	s.setID(data, f.id)
	s.several = s.several || f.several
	s.tool = s.tool || f.tool
	s.refusal = s.refusal || f.refusal
	s.reasoning = s.reasoning || f.reasoning
	if f.hasContent && f.content.To > f.content.From {
		s.add(data[f.content.From:f.content.To])
		s.reasoning = false // the answer began: its reasoning is whole
	}
	for i := range s.seen {
		s.seen[i] |= f.seen[i]
		s.finished[i] |= f.finished[i]
	}
	if !s.complete && f.finished != [2]uint64{} && s.finished == s.seen {
		s.complete = true
		return StepComplete
	}
	return StepContent
}

// observeMessages follows an Anthropic Messages event.
func (s *Stream) observeMessages(typ, data []byte) Step {
	switch string(typ) {
	case "error":
		return StepError // anthropic-sdk-go fails the stream on it, whatever its data
	case "", "ping":
		return StepContent // the SDK skips these
	}
	if blank(data) {
		return StepContent // and empty data
	}
	var f messagesFacts
	if !s.w.messages(data, &f) {
		return StepMalformed
	}
	jsonType := s.w.text(f.typ)
	if role, _, _ := roleOf(jsonType); role == RoleError || f.err {
		return StepError
	}
	switch string(jsonType) {
	case "message_start":
		s.setID(data, f.id)
	case "content_block_start":
		s.blocks = max(s.blocks, f.index+1)
		switch bt := string(data[f.blockType.From:f.blockType.To]); {
		case bt == "text":
			s.openText = f.index
			if f.hasBlockText {
				s.add(data[f.blockText.From:f.blockText.To])
			}
		case bt == "thinking", bt == "redacted_thinking":
			s.thinkAt, s.signed = f.index, bt == "redacted_thinking"
			s.thinking, s.sawThinking = true, true
		case strings.Contains(bt, "tool"):
			s.tool = true
		default:
			s.other = true
		}
	case "content_block_delta":
		switch string(data[f.deltaType.From:f.deltaType.To]) {
		case "text_delta":
			if f.index != s.openText {
				s.tangled = true
			}
			if f.hasDeltaText {
				s.add(data[f.deltaText.From:f.deltaText.To])
			}
		case "signature_delta":
			s.signed = s.signed || f.index == s.thinkAt
		case "input_json_delta":
			s.tool = true
		}
	case "content_block_stop":
		if f.index == s.openText {
			s.openText = -1
		}
		if f.index == s.thinkAt {
			s.thinkAt = -1
			s.thinking = !s.signed
		}
	case "message_delta":
		if f.stop && !s.complete {
			s.complete = true
			return StepComplete
		}
	case "message_stop":
		if !s.complete {
			s.complete = true
			return StepComplete
		}
	}
	return StepContent
}

// observeResponses follows an OpenAI Responses event.
func (s *Stream) observeResponses(typ, data []byte) Step {
	var f responsesFacts
	if step := responsesStep(&s.w, typ, data, &f, s.complete); step != StepContent || f.done {
		return step
	}
	jsonType := data[f.typ.From:f.typ.To]
	if len(jsonType) == 0 {
		jsonType = typ
	}
	role, _, _ := roleOf(jsonType)
	if f.hasSeq {
		s.seq, s.hasSeq = f.seq, true
	}
	s.background = s.background || f.background
	s.setID(data, f.id)
	switch string(jsonType) {
	case "response.output_text.delta":
		if f.hasDelta {
			s.add(data[f.delta.From:f.delta.To])
		}
	case "response.refusal.delta":
		s.refusal = true
	case "response.output_item.added":
		switch it := string(data[f.itemType.From:f.itemType.To]); {
		case it == "message":
		case it == "reasoning":
			s.thinking = true
		case strings.HasSuffix(it, "_call"):
			s.tool = true
		default:
			s.other = true
		}
	case "response.output_item.done":
		if string(data[f.itemType.From:f.itemType.To]) == "reasoning" {
			s.thinking = false
		}
	}
	if role == RoleCompletion && !s.complete {
		s.complete = true
		return StepComplete
	}
	return StepContent
}

// responsesStep reads a Responses event into f and says whether it broke
// the stream (StepError, StepMalformed, StepEnd) or not (StepContent);
// complete says whether the answer is.
func responsesStep(w *walker, typ, data []byte, f *responsesFacts, complete bool) Step {
	switch {
	case !w.responses(data, f):
		return StepMalformed
	case f.done && complete:
		return StepContent
	case f.done:
		return StepEnd
	}
	jsonType := data[f.typ.From:f.typ.To]
	if len(jsonType) == 0 {
		jsonType = typ
	}
	role, _, _ := roleOf(jsonType)
	if nameRole, _, _ := roleOf(typ); role == RoleError || nameRole == RoleError || f.err {
		return StepError
	}
	return StepContent
}

// The words by which an untyped event says its API.
var (
	chatObject      = []byte(`"chat.completion.chunk"`)
	geminiCandidate = []byte(`"candidates"`)
)

// sniff sets the API the events speak, once one says it.
func (s *Stream) sniff(typ, data []byte) {
	var api API
	switch {
	case s.api == Bedrock:
		s.sniffed = true // no server-sent events
		return
	case hasPrefix(typ, "response."):
		api = Responses
	case len(typ) > 0:
		switch string(typ) {
		case "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop", "ping":
			api = Messages
		}
	case bytes.Contains(data, chatObject):
		// Not [DONE]: legacy completions and others end with it too.
		api = ChatCompletions
	case bytes.Contains(data, geminiCandidate):
		api = Gemini
	}
	if api != 0 {
		s.api, s.sniffed = api, true
	}
}

// observeGemini follows a Gemini GenerateContentResponse.
func (s *Stream) observeGemini(data []byte) Step {
	var f geminiFacts
	var ok bool
	if s.parts, ok = s.w.gemini(data, &f, s.parts, s.keep); !ok {
		return StepMalformed
	}
	if f.err {
		return StepError
	}
	s.setID(data, f.id)
	s.several = s.several || f.several
	for _, p := range s.parts {
		switch {
		case p.kind == partTool:
			s.tool = true
		case p.kind == partOther:
			s.other = true
		case p.thought:
			s.thinking = true
		case p.hasText && p.text.To > p.text.From:
			s.add(data[p.text.From:p.text.To])
			s.thinking = false // the answer began: its thoughts are whole
		}
	}
	if f.finish && !s.complete {
		s.complete = true
		return StepComplete
	}
	return StepContent
}

// setID keeps the id at p in data, the first one seen.
func (s *Stream) setID(data []byte, p span) {
	if s.keep && !s.hasID && p.To > p.From { // an empty id (Azure's prompt-filter chunk) is none
		s.id, s.hasID = append(s.id[:0], data[p.From:p.To]...), true
	}
}

// add adds the text of a JSON string whose bytes between the quotes are
// raw to the delivered text, if the Stream keeps it.
func (s *Stream) add(raw []byte) {
	if s.keep {
		s.text, _ = unquote(s.text, raw)
	}
}

// Complete reports whether the completion marker has been observed.
func (s *Stream) Complete() bool { return s.complete }

// Knows reports whether the Stream knows the API its events speak (from
// the URL Reset was given, or from the events so far), and so the API's
// completion marker: Chat Completions, Messages, Responses or Gemini.
// A stream of another API (a legacy completions stream, Bedrock's event
// stream) has no end the Stream can see: Complete stays false.
func (s *Stream) Knows() bool {
	switch s.api {
	case ChatCompletions, Messages, Responses, Gemini:
		return true
	}
	return false
}

// Delivered is the text delivered so far, as the caller's SDK accumulates
// it: the answer's text blocks (Messages), the single choice's content
// (Chat Completions), the output text (Responses), the first candidate's
// parts' text (Gemini), decoded from JSON. It is a view into the Stream's
// buffer, valid until the next Observe or Reset; the caller must not
// change it.
func (s *Stream) Delivered() []byte { return s.text }

// Stuck says why the stream cannot be continued at this point, or "" if it
// can:
//
//   - "an unknown API", "Bedrock's event stream": no continuation is
//     built for these;
//   - "its text was not kept": Reset was told not to keep it;
//   - "several choices": the stream carried a second choice (a request
//     for n > 1, Gemini's candidateCount > 1: PrefillBody reads the
//     request and refuses too);
//   - "a tool call": a tool call, function call or tool_use block (or
//     another tool block: server tools, their results) was delivered,
//     whole or in part;
//   - "a thinking block": a thinking, redacted_thinking or reasoning block
//     is open, or ended without its signature; or the reasoning streamed
//     last (Chat Completions' reasoning_content, Gemini's thought parts);
//   - "a refusal": the answer is a refusal (Chat Completions' and
//     Responses' refusal);
//   - "a non-text block": a block or part that is not text (a Messages
//     block of another kind, a Gemini inline or file part);
//   - "interleaved text blocks": text arrived for a block other than the
//     open text block;
//   - Responses: "a Responses stream not created with background: true"
//     (its response.created says background: true when it was), or "no
//     response id yet"; a background one is resumable whatever it carries
//     (Resume replays the provider's own events).
//
// No content yet is no reason: an empty delivered text is continued as a
// regeneration.
func (s *Stream) Stuck() string {
	switch s.api {
	case ChatCompletions, Messages, Gemini, Responses:
	case Bedrock:
		return StuckBedrock
	default:
		return "an unknown API"
	}
	switch {
	case !s.keep:
		return "its text was not kept"
	case s.api != Responses:
	case !s.background:
		return "a Responses stream not created with background: true"
	case !s.hasID || !s.hasSeq:
		return "no response id yet"
	default:
		return ""
	}
	switch {
	case s.several:
		return "several choices"
	case s.tool:
		return "a tool call"
	case s.thinking || s.reasoning:
		return "a thinking block"
	case s.refusal:
		return "a refusal"
	case s.other:
		return "a non-text block"
	case s.tangled:
		return "interleaved text blocks"
	}
	return ""
}

// ResumeURL returns the URL that resumes, with method GET, a Responses
// stream created with background: true after the last sequence number
// delivered: orig (the request's URL) with the response id added to its
// path and stream=true&starting_after=N to its query (any stream or
// starting_after there replaced). It reports false when the stream is not
// resumable: not Responses, not in the background (as its
// response.created says), its text not kept, or no response id or
// sequence number seen yet. The URL is new; orig is not changed.
func (s *Stream) ResumeURL(orig *url.URL) (*url.URL, bool) {
	if s.api != Responses || orig == nil || !s.hasID || !s.hasSeq || !s.background {
		return nil, false
	}
	id, ok := unquote(nil, s.id)
	if !ok || len(id) == 0 {
		return nil, false
	}
	u := orig.JoinPath(string(id))
	var q []string
	for _, kv := range strings.Split(orig.RawQuery, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if kv != "" && k != "stream" && k != "starting_after" {
			q = append(q, kv)
		}
	}
	q = append(q, "stream=true", "starting_after="+strconv.FormatInt(s.seq, 10))
	u.RawQuery = strings.Join(q, "&")
	return u, true
}

// SeveralChoices reports whether request, a request body of api, asks
// for more than one choice ("n" above 1 in Chat Completions,
// generationConfig.candidateCount in Gemini, or its proto name
// generation_config.candidate_count): its stream is never continued,
// whatever the strategy.
func SeveralChoices(api API, request []byte) bool {
	return readRequest(api, request).n > 1
}

// readRequest reads what continuing a stream needs from its request body:
// top-level members only (and generationConfig's, thinking's), values
// skipped with the lexer.
func readRequest(api API, body []byte) requestFacts {
	f := requestFacts{n: 1}
	members(body, 0, func(key span, first Token, end int) bool {
		v := body[first.From:end]
		switch string(body[key.From:key.To]) {
		case "n":
			if api == ChatCompletions && first.Kind == Scalar {
				f.n = max(1, parseIndex(v))
			}
		case "generationConfig", "generation_config": // the REST API takes proto JSON's either name
			if api == Gemini && first.Kind == BeginObject {
				members(body, first.From, func(key span, first Token, end int) bool {
					if k := string(body[key.From:key.To]); (k == "candidateCount" || k == "candidate_count") && first.Kind == Scalar {
						f.n = max(1, parseIndex(body[first.From:end]))
					}
					return true
				})
			}
		case "thinking":
			if api == Messages && first.Kind == BeginObject {
				members(body, first.From, func(key span, first Token, end int) bool {
					if string(body[key.From:key.To]) == "type" && first.Kind == String {
						t := string(body[first.From+1 : end-1])
						f.thinking = t == "enabled" || t == "adaptive"
					}
					return true
				})
			}
		}
		return true
	})
	return f
}

// members calls visit for each member of the object that starts at
// data[from:] (whitespace first allowed), in order, with its key (between
// its quotes), its value's first token and the index just past the
// value, until visit reports false. Values are skipped with the lexer,
// not checked; it reports false for text that is not an object of
// members.
func members(data []byte, from int, visit func(key span, first Token, end int) bool) bool {
	var l Lexer
	t, i := l.Next(data, from)
	if t.Kind != BeginObject {
		return false
	}
	if t, i = l.Next(data, i); t.Kind == EndObject {
		return true
	}
	for {
		if t.Kind != String || t.Open() {
			return false
		}
		key := raw(t)
		if t, i = l.Next(data, i); t.Kind != Colon {
			return false
		}
		first, end := l.Next(data, i)
		switch {
		case first.Open():
			return false
		case first.Kind == BeginObject, first.Kind == BeginArray:
			if end = l.Skip(data, end, 1); l.Depth() > 1 {
				return false
			}
		case first.Kind != String && first.Kind != Scalar:
			return false
		}
		if !visit(key, first, end) {
			return true
		}
		switch t, i = l.Next(data, end); t.Kind {
		case EndObject:
			return true
		case Comma:
			t, i = l.Next(data, i)
		default:
			return false
		}
	}
}

// elements calls visit for each element of the array that starts at
// data[from:], in order, with its first token and the index just past
// it, until visit reports false; it returns the index of the array's
// closing bracket, or -1 for text that is not an array.
func elements(data []byte, from int, visit func(first Token, end int) bool) int {
	var l Lexer
	t, i := l.Next(data, from)
	if t.Kind != BeginArray {
		return -1
	}
	if t, i = l.Next(data, i); t.Kind == EndArray {
		return t.From
	}
	for {
		first, end := t, i
		switch {
		case first.Open():
			return -1
		case first.Kind == BeginObject, first.Kind == BeginArray:
			if end = l.Skip(data, end, 1); l.Depth() > 1 {
				return -1
			}
		case first.Kind != String && first.Kind != Scalar:
			return -1
		}
		if !visit(first, end) {
			return -1
		}
		switch t, i = l.Next(data, end); t.Kind {
		case EndArray:
			return t.From
		case Comma:
			t, i = l.Next(data, i)
		default:
			return -1
		}
	}
}
