package llmretry

// This file reads the opening of a streamed reply (a 2xx text/event-stream)
// up to the first event that decides whether it is an answer or an error in
// disguise: providers answer 200 and then send an error as the first event.
//
// The framing is server-sent events as the WHATWG HTML standard defines
// them (section 9.2, "Server-sent events"): lines end in \n, \r\n or \r; a
// line starting with ":" is a comment; "field: value" lines, one leading
// space dropped from the value; several data lines join with \n; an event is
// dispatched at a blank line, and only if it had a data line; a leading
// UTF-8 byte-order mark is skipped; an event cut by the end of the stream is
// discarded.
//
// The shapes read, and where they come from:
//
//   - Anthropic Messages: "event: error" with {"type":"error","error":
//     {"type":"overloaded_error","message":"Overloaded"}} (the streaming
//     docs' "Error events"; anthropic-sdk-go packages/ssestream turns an
//     "error" event into an API error and skips "ping"). Error types as in
//     the API's errors page: invalid_request_error, authentication_error,
//     billing_error, permission_error, not_found_error, request_too_large,
//     rate_limit_error, api_error, timeout_error, overloaded_error.
//   - OpenAI chat completions: a data line {"error":{"message":...,
//     "type":"server_error","param":null,"code":null}} with no event line,
//     often followed by "data: [DONE]" (sashabaranov/go-openai#396; openai-go
//     packages/ssestream ends a stream at [DONE] and fails it on any event
//     whose data has a top-level "error").
//   - OpenAI Responses: "event: error" with {"type":"error","code":
//     "server_is_overloaded","message":...,"param":null}, and
//     "event: response.failed" whose response.error holds code and message
//     (the Responses streaming events reference; codex-rs codex-api
//     src/sse/responses.rs reads response.error and parses "try again in
//     1.5s" / "872ms" from a rate_limit_exceeded message).
//   - Gemini (?alt=sse): a data line {"error":{"code":503,"message":...,
//     "status":"UNAVAILABLE"}}, with google.rpc details (RetryInfo,
//     QuotaFailure) that readErrorBody in signals.go already reads.
//
// The scan allocates its read buffer and nothing else until an event looks
// like an error: lines are found with bytes.IndexByte, a one-line data
// payload is read in place, and a JSON payload's top-level "type" and
// "error" are found by a small walk that copies nothing. Only an error event
// is decoded with encoding/json.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"time"
)

// eventKind is what the first event that matters says.
type eventKind int8

const (
	eventContent     eventKind = iota // a content event: the stream is an answer
	eventOverloaded                   // an error event meaning overloaded (treat like HTTP 529)
	eventServerError                  // an error event meaning a server/API error (like HTTP 500)
	eventRateLimit                    // an error event meaning rate limited (like HTTP 429)
	eventOtherError                   // an error event no retry fixes (invalid request, auth…): not retried
	eventEnd                          // the stream ended (EOF, or [DONE]) before any content or error event
	eventUndecided                    // maxBytes read without reaching a deciding event
)

// firstEvent is the verdict on a stream's opening.
type firstEvent struct {
	kind eventKind
	// wait is a wait the error event states: Gemini's RetryInfo, or "try
	// again in 1.2s" in an OpenAI message (the longer of the two); valid
	// when hasWait. A final verdict carries no wait.
	wait    time.Duration
	hasWait bool
	// final is set when the error says waiting will not help: a spent
	// quota (insufficient_quota), a spend cap, a per-day or zero Gemini
	// quota (as readSignal judges them), or an Anthropic billing_error.
	final bool
	// what is the provider's own word for the error, for logs: its code,
	// type or status ("overloaded_error", "server_is_overloaded",
	// "UNAVAILABLE"), at most maxWhat bytes of [A-Za-z0-9_.:/-]; "[DONE]"
	// for a stream that said [DONE] first; empty for content. It never
	// holds a message, so never a credential a message may quote.
	what string
}

const (
	// firstEventBuf is the read buffer's first size: a chat completion's
	// first chunk or Anthropic's opening three events fit in one read.
	firstEventBuf = 2048
	// maxWhat caps firstEvent.what.
	maxWhat = 128
	// maxEmptyReads is how many reads in a row may return nothing before
	// the scan gives up with io.ErrNoProgress (bufio's figure).
	maxEmptyReads = 100
	// utf8BOM is the byte-order mark a stream may start with.
	utf8BOM = "\xef\xbb\xbf"
)

// scanFirstEvent reads r until the first event that decides (content or
// error), EOF, an error, or maxBytes, whichever comes first. It returns
// every byte it read (the caller replays them to the user byte for byte)
// and the verdict. It never reads past the end of the deciding event's
// blank-line terminator (the bytes after it stay in r for the user), except
// what one underlying Read returns; it never reads more than maxBytes in
// all, so len(read) <= maxBytes. The scan decides at the \r of a \r\n
// that ends the deciding event, so the \n may stay in r: replayed, the
// bytes still make one line ending, as the standard reads them.
//
// Skipped, not deciding: comments, events without data, data that is only
// whitespace or {}, "ping" events, and the preamble events that carry no
// content (Anthropic message_start and content_block_start, OpenAI
// Responses response.created and response.in_progress). "[DONE]" before any
// content is eventEnd. An error event (see the file comment) is classified
// by its code, type or status; every other event with data is content,
// whatever its payload: when unsure, it is an answer.
//
// A read error is returned as err with the bytes read so far, and with the
// verdict of those bytes if they decided (eventUndecided if not); io.EOF is
// not an error but eventEnd. A reader that returns nothing maxEmptyReads
// times in a row ends the scan with io.ErrNoProgress.
func scanFirstEvent(r io.Reader, maxBytes int) (read []byte, ev firstEvent, err error) {
	if maxBytes <= 0 {
		return nil, firstEvent{kind: eventUndecided}, nil
	}
	s := sseScan{buf: make([]byte, 0, min(firstEventBuf, maxBytes))}
	empty := 0
	for {
		if len(s.buf) >= maxBytes {
			return s.buf, firstEvent{kind: eventUndecided}, nil
		}
		if len(s.buf) == cap(s.buf) {
			s.buf = slices.Grow(s.buf, min(2*cap(s.buf), maxBytes)-len(s.buf))
		}
		// p is never empty: some readers (iotest.DataErrReader) spin on one.
		p := s.buf[len(s.buf):min(cap(s.buf), maxBytes)]
		n, rerr := r.Read(p)
		if n < 0 || n > len(p) {
			return s.buf, firstEvent{kind: eventUndecided}, errors.New("llmretry: stream reader returned an invalid count")
		}
		s.buf = s.buf[:len(s.buf)+n]
		if ev, ok := s.scan(); ok {
			if rerr == io.EOF {
				rerr = nil
			}
			return s.buf, ev, rerr
		}
		switch {
		case rerr == io.EOF:
			return s.buf, firstEvent{kind: eventEnd}, nil
		case rerr != nil:
			return s.buf, firstEvent{kind: eventUndecided}, rerr
		case n > 0:
			empty = 0
		default:
			if empty++; empty >= maxEmptyReads {
				return s.buf, firstEvent{kind: eventUndecided}, io.ErrNoProgress
			}
		}
	}
}

// sseScan is the scanner between reads: the bytes read, where the next line
// starts, and the event being built. Field values are kept as offsets into
// buf, which stay valid as buf grows.
type sseScan struct {
	buf []byte
	pos int  // where the first line not yet read starts
	cr  bool // the last line ended with \r: a \n right after it ends that line too
	// nameFrom and nameTo bound the event's type (its event field).
	nameFrom, nameTo int
	// dataLines counts the event's data lines; dataFrom and dataTo bound
	// the first one's value.
	dataLines        int
	dataFrom, dataTo int
	// joined holds the data lines joined with \n once there are two or
	// more; it is allocated only then.
	joined []byte
}

// scan reads the complete lines of s.buf from s.pos and reports the verdict
// of the first event that decides, if one has ended.
func (s *sseScan) scan() (firstEvent, bool) {
	for {
		if s.cr {
			if s.pos == len(s.buf) {
				return firstEvent{}, false
			}
			s.cr = false
			if s.buf[s.pos] == '\n' {
				s.pos++
			}
		}
		from := s.pos
		rest := s.buf[from:]
		i := bytes.IndexByte(rest, '\n')
		if j := bytes.IndexByte(rest, '\r'); j >= 0 && (i < 0 || j < i) {
			i, s.cr = j, true
		}
		if i < 0 {
			return firstEvent{}, false
		}
		to := from + i
		s.pos = to + 1
		if from == 0 && hasPrefix(s.buf[:to], utf8BOM) {
			from += len(utf8BOM)
		}
		line := s.buf[from:to]
		if len(line) == 0 {
			if ev, ok := s.dispatch(); ok {
				return ev, true
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: ": keep-alive", ": OPENROUTER PROCESSING"
		}
		name, valueFrom := line, to
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name, valueFrom = line[:c], from+c+1
			if valueFrom < to && s.buf[valueFrom] == ' ' {
				valueFrom++
			}
		}
		switch string(name) {
		case "event":
			s.nameFrom, s.nameTo = valueFrom, to
		case "data":
			s.addData(valueFrom, to)
		}
	}
}

// addData adds the data line s.buf[from:to] to the event being built.
func (s *sseScan) addData(from, to int) {
	switch s.dataLines {
	case 0:
		s.dataFrom, s.dataTo = from, to
	case 1:
		s.joined = append(append(append(s.joined[:0], s.buf[s.dataFrom:s.dataTo]...), '\n'), s.buf[from:to]...)
	default:
		s.joined = append(append(s.joined, '\n'), s.buf[from:to]...)
	}
	s.dataLines++
}

// dispatch ends the event being built, clears it, and judges it.
func (s *sseScan) dispatch() (firstEvent, bool) {
	lines, name := s.dataLines, s.buf[s.nameFrom:s.nameTo]
	s.dataLines, s.nameFrom, s.nameTo = 0, 0, 0
	switch lines {
	case 0:
		return firstEvent{}, false // no data: not an event
	case 1:
		return judgeEvent(name, s.buf[s.dataFrom:s.dataTo])
	}
	return judgeEvent(name, s.joined)
}

// judgeEvent judges an event of type name (empty if it had no event
// field) and data, and reports whether it decides.
func judgeEvent(name, data []byte) (firstEvent, bool) {
	data = bytes.Trim(data, " \t\r\n")
	if len(data) == 0 {
		return firstEvent{}, false
	}
	if string(data) == "[DONE]" {
		return firstEvent{kind: eventEnd, what: "[DONE]"}, true
	}
	var top jsonTop
	if data[0] != '{' || !top.scan(data) {
		top = jsonTop{} // not an object: only the event's type can say error
	} else if top.keys == 0 {
		return firstEvent{}, false // {}
	}
	label := name
	if len(label) == 0 || string(label) == "message" { // "message" is SSE's default type
		label = top.typ
	}
	switch {
	case string(name) == "response.failed", string(top.typ) == "response.failed":
		return errorEvent(data, "response.failed"), true
	case string(name) == "error", string(top.typ) == "error", top.err:
		return errorEvent(data, "error"), true
	}
	if top.noChoices && top.promptFilter {
		return firstEvent{}, false // Azure OpenAI's prompt-filter chunk
	}
	if roleChunk(data) {
		return firstEvent{}, false // OpenAI's opening chunk: a role, no content
	}
	switch string(label) {
	case "ping", // Anthropic's keep-alive event
		"message_start", "content_block_start", // Anthropic's preamble
		"response.created", "response.in_progress": // OpenAI Responses' preamble
		return firstEvent{}, false
	}
	return firstEvent{kind: eventContent}, true
}

// jsonTop is what a JSON object's top level says, found without decoding.
type jsonTop struct {
	typ  []byte // the raw text of a top-level "type" string
	err  bool   // a top-level "error" that is an object or a non-empty string
	keys int    // the number of top-level members
	// noChoices ("choices": []) and promptFilter (a
	// "prompt_filter_results" member) mark Azure OpenAI's first chunk,
	// which carries no content.
	noChoices, promptFilter bool
}

// scan reads the object that data starts with, and reports whether it is
// one (well formed enough to read: values are skipped, not validated).
// Keys are compared as written: an escaped "type" is not seen.
func (t *jsonTop) scan(data []byte) bool {
	i := skipJSONSpace(data, 1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) {
		if data[i] != '"' {
			return false
		}
		end := skipJSONString(data, i)
		if end < 0 {
			return false
		}
		key := data[i+1 : end-1]
		i = skipJSONSpace(data, end)
		if i == len(data) || data[i] != ':' {
			return false
		}
		i = skipJSONSpace(data, i+1)
		end = skipJSONValue(data, i)
		if end < 0 {
			return false
		}
		value := data[i:end]
		t.keys++
		switch string(key) {
		case "type":
			t.typ = nil
			if value[0] == '"' {
				t.typ = value[1 : len(value)-1]
			}
		case "error":
			t.err = (value[0] == '{' || value[0] == '"') && len(bytes.Trim(value[1:len(value)-1], " \t\r\n")) > 0
		case "choices":
			t.noChoices = value[0] == '[' && len(bytes.Trim(value[1:len(value)-1], " \t\r\n")) == 0
		case "prompt_filter_results":
			t.promptFilter = true
		}
		i = skipJSONSpace(data, end)
		if i == len(data) {
			return false
		}
		switch data[i] {
		case '}':
			return true
		case ',':
			i = skipJSONSpace(data, i+1)
		default:
			return false
		}
	}
	return false
}

// skipJSONSpace returns the index of the first byte of data at or after i
// that is not JSON whitespace.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// skipJSONString returns the index just past the string that starts at
// data[i] (a quote), or -1 if it does not end.
func skipJSONString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipJSONValue returns the index just past the value that starts at
// data[i], or -1 if there is none or it does not end. Objects and arrays
// are skipped by counting brackets outside strings.
func skipJSONValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipJSONString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				end := skipJSONString(data, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	case ',', '}', ']', ':':
		return -1
	}
	start := i
	for i < len(data) && !isSpace(data[i]) && data[i] != ',' && data[i] != '}' && data[i] != ']' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// sseError is an error event's payload, in any of the shapes read: the
// error object at "error" (Anthropic, OpenAI chat, Gemini, the nested form
// of OpenAI Responses' error event), at "response.error" (Responses'
// response.failed), or flat at the top (Responses' error event).
type sseError struct {
	Code     errWord      `json:"code"`    // Responses' flat error event
	Message  string       `json:"message"` // Responses' flat error event
	Error    *sseErrorObj `json:"error"`
	Response *struct {
		Error *sseErrorObj `json:"error"`
	} `json:"response"` // Responses' response.failed
}

// sseErrorObj is an error object, or an error given as a bare string.
type sseErrorObj struct {
	Type    errWord `json:"type"`   // Anthropic's and OpenAI's error type
	Code    errWord `json:"code"`   // OpenAI's code (a string), Gemini's (a number)
	Status  errWord `json:"status"` // Gemini's status ("UNAVAILABLE")
	Message string  `json:"message"`
}

// UnmarshalJSON reads an object, or a string as its message; it never
// fails, so that the rest of the payload is still read.
func (o *sseErrorObj) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		_ = json.Unmarshal(b, &o.Message)
		return nil
	}
	type plain sseErrorObj
	_ = json.Unmarshal(b, (*plain)(o))
	return nil
}

// errWord is a code, type or status as written: a string's text or a
// number's literal; any other value is empty.
type errWord string

// UnmarshalJSON keeps a string or a number; it never fails.
func (w *errWord) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		_ = json.Unmarshal(b, (*string)(w))
	case len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9'):
		*w = errWord(b)
	}
	return nil
}

// errorEvent classifies the data of an error event. Its words are tried in
// turn, the first one known deciding: a string code, the type, Gemini's
// status, a numeric code. An error no word of which is known is
// eventOtherError: it is not an answer, and no retry is known to fix it.
//
// what falls back to the first word not known, then to label.
func errorEvent(data []byte, label string) firstEvent {
	var e sseError
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&e); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			e = sseError{} // not JSON: an error event we cannot read
		}
	}
	obj := e.Error
	if obj == nil && e.Response != nil {
		obj = e.Response.Error
	}
	var words [4]errWord
	message := e.Message
	if obj != nil {
		words = [4]errWord{obj.Code, obj.Type, obj.Status, obj.Code}
		message = obj.Message
	} else {
		words[0], words[3] = e.Code, e.Code
	}
	if isNumber(words[0]) {
		words[0] = "" // a numeric code comes last: Gemini's status says more
	} else {
		words[3] = ""
	}

	ev := firstEvent{kind: eventOtherError}
	var s signal
	readErrorBody(data, &s) // insufficient_quota, spend caps, Gemini quotas and RetryInfo
	for _, w := range words {
		judge(errorCode, string(w), &s) // the codes readErrorBody does not see
		s.final = s.final || w == "billing_error"
	}
	first := true
	for _, w := range words {
		if w == "" {
			continue
		}
		if k, ok := errorWordKind(w); ok {
			ev.kind, ev.what = k, safeWord(w)
			break
		}
		if first {
			ev.what, first = safeWord(w), false
		}
	}
	if ev.what == "" {
		ev.what = label
	}
	if s.final {
		ev.final = true
		return ev
	}
	if ev.kind == eventOtherError {
		return ev
	}
	ev.wait, ev.hasWait = s.wait, s.hasWait
	if d, ok := messageWait(message); ok && (!ev.hasWait || d > ev.wait) {
		ev.wait, ev.hasWait = d, true
	}
	return ev
}

// errorWordKind reports what an error's code, type or status means, if it
// is a word this package knows.
func errorWordKind(w errWord) (eventKind, bool) {
	switch w {
	case "overloaded_error", // Anthropic (529)
		"server_is_overloaded", "slow_down", // OpenAI Responses
		"overloaded", "service_unavailable_error",
		"UNAVAILABLE", "503", "529": // Gemini's status and codes
		return eventOverloaded, true
	case "api_error", "timeout_error", // Anthropic (500, 504)
		"server_error", "internal_error", "internal_server_error", // OpenAI
		"INTERNAL", "DEADLINE_EXCEEDED", "500", "502", "504": // Gemini
		return eventServerError, true
	case "rate_limit_error", // Anthropic (429)
		"rate_limit_exceeded", "requests", "tokens", "insufficient_quota", // OpenAI
		"RESOURCE_EXHAUSTED", "429": // Gemini
		return eventRateLimit, true
	case "invalid_request_error", "authentication_error", "permission_error",
		"not_found_error", "request_too_large", "billing_error", // Anthropic
		"invalid_prompt", "context_length_exceeded", // OpenAI
		"INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED",
		"UNAUTHENTICATED", "NOT_FOUND": // Gemini
		return eventOtherError, true
	}
	return 0, false
}

// isNumber reports whether w is a number's literal, such as Gemini's 503.
func isNumber(w errWord) bool {
	if w == "" {
		return false
	}
	for i := 0; i < len(w); i++ {
		if c := w[i]; (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// safeWord returns the leading part of w made of [A-Za-z0-9_.:/-], at most
// maxWhat bytes: a word for logs, never a sentence.
func safeWord(w errWord) string {
	n := 0
	for n < len(w) && n < maxWhat {
		c := w[n]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == ':' || c == '/' || c == '-') {
			break
		}
		n++
	}
	return string(w[:n])
}

// messageWait reads the wait an error message states in words: OpenAI's
// "Please try again in 1.868s.", "in 20ms", "in 1m30s", "in 20 seconds"
// (the forms codex-rs's try_parse_retry_after reads, and Go durations), and
// Azure OpenAI's "retry after 33 seconds". It rejects a sign and values
// time.ParseDuration cannot hold.
func messageWait(msg string) (time.Duration, bool) {
	phrase := "try again in"
	i := indexFold(msg, phrase)
	if i < 0 {
		phrase = "retry after"
		if i = indexFold(msg, phrase); i < 0 {
			return 0, false
		}
	}
	rest := msg[i+len(phrase):]
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	n := 0
	for n < len(rest) && (rest[n] >= '0' && rest[n] <= '9' || rest[n] == '.' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] == 0xc2 || rest[n] == 0xb5) {
		n++
	}
	tok := rest[:n]
	for len(tok) > 0 && tok[len(tok)-1] == '.' {
		tok = tok[:len(tok)-1] // the sentence's full stop
	}
	if tok == "" || tok[0] < '0' || tok[0] > '9' {
		return 0, false
	}
	if last := tok[len(tok)-1]; last >= '0' && last <= '9' {
		// A bare number: its unit is the next word.
		unit := rest[n:]
		for len(unit) > 0 && unit[0] == ' ' {
			unit = unit[1:]
		}
		m := 0
		for m < len(unit) && (unit[m] >= 'a' && unit[m] <= 'z' || unit[m] >= 'A' && unit[m] <= 'Z') {
			m++
		}
		switch unit = unit[:m]; {
		case eqFoldAny(unit, "s", "sec", "secs", "second", "seconds"):
			tok += "s"
		case eqFoldAny(unit, "ms", "millisecond", "milliseconds"):
			tok += "ms"
		case eqFoldAny(unit, "m", "min", "mins", "minute", "minutes"):
			tok += "m"
		case eqFoldAny(unit, "h", "hour", "hours"):
			tok += "h"
		default:
			return 0, false
		}
	}
	d, err := time.ParseDuration(tok)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// indexFold returns the index of the first instance of the ASCII string
// sub in s, ignoring case, or -1.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if eqFoldAny(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// eqFoldAny reports whether s equals one of words, ignoring case.
func eqFoldAny(s string, words ...string) bool {
	for _, w := range words {
		if strings.EqualFold(s, w) {
			return true
		}
	}
	return false
}

// roleChunks are the deltas of the chunk every OpenAI chat stream opens
// with: the assistant's role and no content yet.
var roleChunks = [...][]byte{
	[]byte(`"delta":{"role":"assistant","content":""}`),
	[]byte(`"delta":{"role":"assistant","content":"","refusal":null}`),
	[]byte(`"delta":{"role":"assistant","content":null}`),
	[]byte(`"delta":{"role":"assistant","content":null,"refusal":null}`),
	[]byte(`"delta":{"role":"assistant"}`),
}

// roleChunk reports whether data is OpenAI's opening chat chunk, which
// carries no content: one choice whose delta is only the assistant's role
// (as OpenAI writes it, byte for byte), no finish reason and no tool call.
// Anything else, or any doubt, is content.
func roleChunk(data []byte) bool {
	if !bytes.Contains(data, []byte(`"object":"chat.completion.chunk"`)) ||
		bytes.Count(data, []byte(`"delta":`)) != 1 ||
		bytes.Contains(data, []byte(`"finish_reason":"`)) ||
		bytes.Contains(data, []byte(`"tool_calls"`)) {
		return false
	}
	for _, d := range roleChunks {
		if bytes.Contains(data, d) {
			return true
		}
	}
	return false
}
