package wire

import (
	"io"
	"net/http"
	"strings"
)

// IsStream reports whether req asks for a streamed response, by the marks
// each API's clients put on a stream request:
//
//   - an Accept header that names text/event-stream (MediaSSE), or
//     Bedrock's application/vnd.amazon.eventstream (MediaEventStream);
//   - Gemini's ?alt=sse query or a :streamGenerateContent path;
//   - Bedrock's streaming operations: a path ending in /converse-stream or
//     /invoke-with-response-stream;
//   - a JSON body with a top-level "stream": true anywhere in it (Chat
//     Completions, Responses, Anthropic Messages: the SDKs send it last,
//     go-openai and langchaingo in the middle of the body).
//
// The body comes from getBody (nil: none), never from req.Body. An
// in-memory body (one with io.WriterTo) hands over its bytes at once,
// without a copy; any other is read to its end, through a scanner that
// keeps a few bytes of state whatever the body's size (see StreamBody).
// What getBody returned is closed. IsStream is safe for concurrent use
// when getBody is.
func IsStream(req *http.Request, getBody func() (io.ReadCloser, error)) bool {
	if req == nil {
		return false
	}
	for _, v := range req.Header.Values("Accept") {
		if containsFold(v, MediaSSE) || containsFold(v, MediaEventStream) {
			return true
		}
	}
	if u := req.URL; u != nil {
		if strings.Contains(u.Path, ":streamGenerateContent") || strings.Contains(u.RawPath, ":streamGenerateContent") {
			return true
		}
		if strings.HasSuffix(u.Path, "/converse-stream") || strings.HasSuffix(u.Path, "/invoke-with-response-stream") {
			return true
		}
		if strings.Contains(u.RawQuery, "alt=sse") && u.Query().Get("alt") == "sse" {
			return true
		}
	}
	if getBody == nil {
		return false
	}
	body, err := getBody()
	if err != nil || body == nil {
		return false
	}
	defer body.Close()
	var s StreamBody
	if wt, ok := body.(io.WriterTo); ok {
		_, _ = wt.WriteTo(&s)
	} else {
		_, _ = io.Copy(&s, body)
	}
	return s.Stream()
}

// StreamBody finds a top-level "stream": true in a JSON object written to
// it in pieces of any size, as encoding/json reads the object: of
// duplicate "stream" keys the last counts, and a key may spell "stream"
// with escapes. Once the object has ended, or the input is not an object
// (a leading byte-order mark aside), it stops looking; Write still takes
// everything, so copies run to their end. The input is not validated: a
// malformed body reads as whatever members it seems to have, the same
// however it is cut into writes.
//
// The zero StreamBody is ready for a body's first byte. It keeps a fixed
// state whatever the body (the current top-level key, up to MaxKeyBytes of
// it, and up to five bytes of a "stream" member's value), is owned by one
// writer, and is not safe for concurrent use.
type StreamBody struct {
	lex      Lexer
	state    bodyState
	wantKey  bool // at depth 1, the next string is a member's key
	key      [MaxKeyBytes]byte
	keyLen   int  // bytes of key; MaxKeyBytes+1 once it is too long
	keyEsc   bool // the key holds an escape
	isStream bool // the current top-level member's key is "stream"
	value    bool // the token that starts the "stream" member's value is next, or runs on
	lit      [len("true") + 1]byte
	litLen   int  // bytes of lit; len(lit) once the value is too long to be true
	lastTrue bool // a "stream" value true waits for the delimiter after it
	found    bool // the latest "stream" member's value is true
}

// MaxKeyBytes is the longest raw key StreamBody reads: the longest that may
// still spell "stream" (every letter as a \u escape: 6 × 6 bytes).
const MaxKeyBytes = 36

// bodyState is where a StreamBody is in the body.
type bodyState uint8

const (
	bodyStart  bodyState = iota // before the object
	bodyObject                  // inside the object
	bodyDone                    // the object ended, or the body is not one
)

// Write scans p. It never fails.
func (s *StreamBody) Write(p []byte) (int, error) {
	for i := 0; i < len(p) && s.state != bodyDone; {
		depth := s.lex.Depth()
		if depth > 1 && !s.lastTrue {
			// Nothing nested in a member's value matters (the bulk of a
			// body: its messages).
			i = s.lex.Skip(p, i, 1)
			continue
		}
		var t Token
		t, i = s.lex.Next(p, i)
		if t.Kind != None {
			s.token(p, t, depth)
		}
	}
	return len(p), nil
}

// Stream reports whether the body written so far has a top-level
// "stream": true. A body cut right after the literal (no closing brace)
// counts.
func (s *StreamBody) Stream() bool {
	if (s.lastTrue || s.value && string(s.lit[:s.litLen]) == "true") && s.lex.Depth() == 1 {
		return true
	}
	return s.found
}

// token handles token t of p, read at depth.
func (s *StreamBody) token(p []byte, t Token, depth int) {
	if s.state == bodyStart {
		switch {
		case t.Kind == BeginObject:
			s.state, s.wantKey = bodyObject, true
		case t.Kind == Scalar && onlyBOM(p[t.From:t.To]):
			// A byte-order mark (its bytes in any order) before the object.
		default:
			s.state = bodyDone
		}
		return
	}
	if s.lastTrue {
		// "stream": true counts once a delimiter ends the literal.
		s.lastTrue = false
		s.found = depth == 1 && (t.Kind == Comma || t.Kind == EndObject)
	}
	if s.value {
		if t.Kind == Scalar {
			s.literal(p[t.From:t.To], t.Open())
			return
		}
		s.value, s.found = false, false
	}
	switch t.Kind {
	case String:
		if depth == 1 && s.wantKey {
			s.keyPiece(p, t)
		}
	case EndObject, EndArray:
		if s.lex.Depth() == 0 {
			s.state = bodyDone
		}
	case Comma:
		if depth == 1 {
			s.wantKey, s.isStream = true, false
		}
	case Colon:
		if depth == 1 && s.isStream {
			s.isStream, s.value, s.litLen = false, true, 0
		}
	}
}

// keyPiece adds the piece t of a top-level key to the key (wantKey holds
// until the key's string ends), and judges the key once it has.
func (s *StreamBody) keyPiece(p []byte, t Token) {
	from, to := t.From, t.To
	if !t.Cont() {
		from++ // the opening quote
		s.keyLen, s.keyEsc = 0, false
	}
	if !t.Open() {
		to-- // the closing quote
	}
	s.keyEsc = s.keyEsc || t.Escaped()
	for _, c := range p[from:to] {
		if s.keyLen < MaxKeyBytes {
			s.key[s.keyLen] = c
		}
		if s.keyLen <= MaxKeyBytes {
			s.keyLen++
		}
	}
	if !t.Open() {
		s.isStream, s.wantKey = s.keyIsStream(), false
	}
}

// keyIsStream reports whether the key just read is "stream".
func (s *StreamBody) keyIsStream() bool {
	if s.keyLen > MaxKeyBytes {
		return false
	}
	raw := s.key[:s.keyLen]
	if !s.keyEsc {
		return string(raw) == "stream"
	}
	var buf [MaxKeyBytes]byte
	k, ok := unquote(buf[:0], raw)
	return ok && string(k) == "stream"
}

// literal adds b, a piece of the "stream" member's value, and judges the
// value once it has ended.
func (s *StreamBody) literal(b []byte, open bool) {
	for _, c := range b {
		if s.litLen < len(s.lit) {
			s.lit[s.litLen] = c
			s.litLen++
		}
	}
	if open {
		return
	}
	s.value = false
	if string(s.lit[:s.litLen]) == "true" {
		s.lastTrue = true
	} else {
		s.found = false
	}
}

// onlyBOM reports whether b is made of a byte-order mark's bytes.
func onlyBOM(b []byte) bool {
	for _, c := range b {
		if c != 0xEF && c != 0xBB && c != 0xBF {
			return false
		}
	}
	return true
}

// containsFold reports whether s contains the ASCII string sub, ignoring
// case, without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
