package wire

// This file reads the opening of a streamed reply (a 2xx text/event-stream)
// up to the first event that decides whether it is an answer or an error in
// disguise: providers answer 200 and then send an error as the first event.
// The events are framed by the Framer (sse.go) and their roles read from
// the shapes table (apis.go). The error events read, and where they come
// from:
//
//   - Anthropic Messages: "event: error" with {"type":"error","error":
//     {"type":"overloaded_error","message":"Overloaded"}} (the streaming
//     docs' "Error events"; anthropic-sdk-go packages/ssestream turns an
//     "error" event into an API error and skips "ping").
//   - OpenAI Chat Completions: a data line {"error":{"message":...,
//     "type":"server_error","param":null,"code":null}} with no event line,
//     often followed by "data: [DONE]" (sashabaranov/go-openai#396; openai-go
//     packages/ssestream ends a stream at [DONE] and fails it on any event
//     whose data has a top-level "error").
//   - OpenAI Responses: "event: error" with {"type":"error","code":
//     "server_is_overloaded","message":...,"param":null}, and
//     "event: response.failed" whose response.error holds code and message.
//   - Gemini (?alt=sse): a data line {"error":{"code":503,"message":...,
//     "status":"UNAVAILABLE"}}, with google.rpc details (RetryInfo,
//     QuotaFailure) that the error-body reader reads (errorbody.go).
//
// The scan allocates its read buffer and nothing else until an event looks
// like an error: a one-line data payload is read in place, and a JSON
// payload's top level is read by the lexer without copying (top.go). Only
// an error event is decoded with encoding/json.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"
)

// EventKind is what the first event that matters says; the zero
// EventKind is EventContent.
type EventKind int8

// The kinds of verdict.
const (
	// EventContent is a content event: the stream is an answer.
	EventContent EventKind = iota
	// EventOverloaded is an error event meaning overloaded (treat like
	// HTTP 529).
	EventOverloaded
	// EventServerError is an error event meaning a server or API error
	// (like HTTP 500).
	EventServerError
	// EventRateLimit is an error event meaning rate limited (like 429).
	EventRateLimit
	// EventOtherError is an error event no retry fixes (an invalid
	// request, authentication…): not retried.
	EventOtherError
	// EventEnd says the stream ended (EOF, or [DONE]) before any content
	// or error event.
	EventEnd
	// EventUndecided says maxBytes were read without reaching a deciding
	// event.
	EventUndecided
)

// FirstEvent is the verdict on a stream's opening. The zero FirstEvent is
// content. It is a plain value, safe to copy.
type FirstEvent struct {
	// Kind is what the first event that decides says.
	Kind EventKind
	// Wait is a wait the error event states: Gemini's RetryInfo, or "try
	// again in 1.2s" in an OpenAI message (the longer of the two); valid
	// when HasWait. A final verdict carries no wait.
	Wait    time.Duration
	HasWait bool
	// Final is set when the error says waiting will not help: a spent
	// quota (insufficient_quota), a spend cap, a per-day or zero Gemini
	// quota (as ReadSignal judges them), or an Anthropic billing_error.
	Final bool
	// What is the provider's own word for the error, for logs: its code,
	// type or status ("overloaded_error", "server_is_overloaded",
	// "UNAVAILABLE"), at most MaxWhat bytes of [A-Za-z0-9_.:/-]; "[DONE]"
	// for a stream that said [DONE] first; empty for content. It never
	// holds a message, so never a credential a message may quote.
	What string
}

// Failed reports whether the verdict makes the attempt a failure: an
// error event.
func (e *FirstEvent) Failed() bool {
	switch e.Kind {
	case EventOverloaded, EventServerError, EventRateLimit, EventOtherError:
		return true
	}
	return false
}

// Status returns the HTTP status an error event stands for (overloaded
// 529, server error 500, rate limit 429, other 400); 200 for a verdict
// that is not an error.
func (e *FirstEvent) Status() int {
	switch e.Kind {
	case EventOverloaded:
		return 529
	case EventServerError:
		return http.StatusInternalServerError
	case EventRateLimit:
		return http.StatusTooManyRequests
	case EventOtherError:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// Describe names the failure for a shared fact and a log: "stream error"
// and the provider's word.
func (e *FirstEvent) Describe() string {
	s := "stream error"
	if e.What != "" {
		s += " " + e.What
	}
	return s
}

const (
	// firstEventBuf is the read buffer's first size: a chat completion's
	// first chunk or Anthropic's opening three events fit in one read.
	firstEventBuf = 2048
	// MaxWhat caps FirstEvent.What.
	MaxWhat = 128
	// maxEmptyReads is how many reads in a row may return nothing before
	// the scan gives up with io.ErrNoProgress (bufio's figure).
	maxEmptyReads = 100
)

// ScanFirstEvent reads r until the first event that decides (content or
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
// whitespace or {}, and the events the shapes table gives the roles
// preamble and keep-alive (Anthropic's message_start, content_block_start
// and ping; Responses' response.created, response.queued (a background
// response's) and response.in_progress; Chat Completions' role-only first
// chunk and Azure's prompt-filter chunk).
// "[DONE]" before any content is EventEnd. An error event is classified by
// its code, type or status; every other event with data is content,
// whatever its payload: when unsure, it is an answer.
//
// A read error is returned as err with the bytes read so far, and with the
// verdict of those bytes if they decided (EventUndecided if not); io.EOF is
// not an error but EventEnd. A reader that returns nothing maxEmptyReads
// times in a row ends the scan with io.ErrNoProgress.
func ScanFirstEvent(r io.Reader, maxBytes int) (read []byte, ev FirstEvent, err error) {
	undecided := FirstEvent{Kind: EventUndecided}
	if maxBytes <= 0 {
		return nil, undecided, nil
	}
	buf := make([]byte, 0, min(firstEventBuf, maxBytes))
	var f Framer
	empty := 0
	for {
		if len(buf) >= maxBytes {
			return buf, undecided, nil
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(2*cap(buf), maxBytes)-len(buf))
		}
		// p is never empty: some readers (iotest.DataErrReader) spin on one.
		p := buf[len(buf):min(cap(buf), maxBytes)]
		n, rerr := r.Read(p)
		if n < 0 || n > len(p) {
			return buf, undecided, errors.New("stream reader returned an invalid count")
		}
		buf = buf[:len(buf)+n]
		for {
			e, ok := f.Next(buf)
			if !ok {
				break
			}
			if ev, ok := judgeEvent(e.Type, e.Data); ok {
				if rerr == io.EOF {
					rerr = nil
				}
				return buf, ev, rerr
			}
		}
		switch {
		case rerr == io.EOF:
			return buf, FirstEvent{Kind: EventEnd}, nil
		case rerr != nil:
			return buf, undecided, rerr
		case n > 0:
			empty = 0
		default:
			if empty++; empty >= maxEmptyReads {
				return buf, undecided, io.ErrNoProgress
			}
		}
	}
}

// judgeEvent judges an event of type name (empty if it had no event
// field) and data, and reports whether it decides.
func judgeEvent(name, data []byte) (FirstEvent, bool) {
	data = bytes.Trim(data, " \t\r\n")
	if len(data) == 0 {
		return FirstEvent{}, false
	}
	if string(data) == chatDone {
		return FirstEvent{Kind: EventEnd, What: chatDone}, true
	}
	var top topLevel
	if data[0] != '{' || !top.read(data) {
		top = topLevel{} // not an object: only the event's type can say error
	} else if top.keys == 0 {
		return FirstEvent{}, false // {}
	}
	// The roles of the event's type and of its JSON type (Anthropic's and
	// Responses' agree); of two error types the table's first
	// ("response.failed" before "error").
	nameRole, nameAt, _ := roleOf(name)
	typRole, typAt := nameRole, nameAt
	if string(top.typ) != string(name) {
		typRole, typAt, _ = roleOf(top.typ)
	}
	switch {
	case nameRole == RoleError && (typRole != RoleError || nameAt <= typAt):
		return errorEvent(data, shapes[nameAt].Type), true
	case typRole == RoleError:
		return errorEvent(data, shapes[typAt].Type), true
	case top.err:
		return errorEvent(data, "error"), true // Chat Completions' and Gemini's error member
	}
	if top.noChoices && top.promptFilter {
		return FirstEvent{}, false // Azure OpenAI's prompt-filter chunk
	}
	if roleChunk(data) {
		return FirstEvent{}, false // Chat Completions' opening chunk: a role, no content
	}
	role := nameRole                                 // the event's type, or its JSON type if it has none
	if len(name) == 0 || string(name) == "message" { // "message" is SSE's default type
		role = typRole
	}
	if role == RolePreamble || role == RoleKeepAlive {
		return FirstEvent{}, false
	}
	return FirstEvent{Kind: EventContent}, true
}

// sseError is an error event's payload, in any of the shapes read: the
// error object at "error" (Anthropic, Chat Completions, Gemini, the nested
// form of Responses' error event), at "response.error" (Responses'
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
// EventOtherError: it is not an answer, and no retry is known to fix it.
//
// What falls back to the first word not known, then to label.
func errorEvent(data []byte, label string) FirstEvent {
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

	ev := FirstEvent{Kind: EventOtherError}
	var s Signal
	readErrorBody(data, &s) // spent quotas, spend caps, Gemini quotas and RetryInfo
	for _, w := range words {
		judge(errorCode, string(w), &s) // the codes readErrorBody does not see
		s.Final = s.Final || w == unpaid
	}
	first := true
	for _, w := range words {
		if w == "" {
			continue
		}
		if k, ok := errorWordKind(string(w)); ok {
			ev.Kind, ev.What = k, safeWord(w)
			break
		}
		if first {
			ev.What, first = safeWord(w), false
		}
	}
	if ev.What == "" {
		ev.What = label
	}
	if s.Final {
		ev.Final = true
		return ev
	}
	if ev.Kind == EventOtherError {
		return ev
	}
	ev.Wait, ev.HasWait = s.Wait, s.HasWait
	if d, ok := MessageWait(message); ok && (!ev.HasWait || d > ev.Wait) {
		ev.Wait, ev.HasWait = d, true
	}
	return ev
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
// MaxWhat bytes: a word for logs, never a sentence.
func safeWord(w errWord) string {
	n := 0
	for n < len(w) && n < MaxWhat {
		c := w[n]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == ':' || c == '/' || c == '-') {
			break
		}
		n++
	}
	return string(w[:n])
}

// roleChunks are the deltas of the chunk every Chat Completions stream
// opens with: the assistant's role and no content yet.
var roleChunks = [...][]byte{
	[]byte(`"delta":{"role":"assistant","content":""}`),
	[]byte(`"delta":{"role":"assistant","content":"","refusal":null}`),
	[]byte(`"delta":{"role":"assistant","content":null}`),
	[]byte(`"delta":{"role":"assistant","content":null,"refusal":null}`),
	[]byte(`"delta":{"role":"assistant"}`),
}

// roleChunk reports whether data is the opening Chat Completions chunk
// (chatRoleChunk), which carries no content: one choice whose delta is
// only the assistant's role (as OpenAI writes it, byte for byte), no
// finish reason and no tool call. Anything else, or any doubt, is content.
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
