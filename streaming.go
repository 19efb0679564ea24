package llmretry

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// IsStream reports whether req asks for a streamed response, from what
// clients really send:
//
//   - an Accept header that names text/event-stream, or AWS's
//     application/vnd.amazon.eventstream;
//   - Gemini's ?alt=sse query or a :streamGenerateContent path;
//   - Bedrock's streaming operations: a path ending in /converse-stream or
//     /invoke-with-response-stream;
//   - a JSON body with a top-level "stream": true anywhere in it: openai-go
//     and anthropic-sdk-go send it as the last key (with Accept:
//     application/json), go-openai and langchaingo in the middle of the
//     body, after the prompt.
//
// The body is read through req.GetBody, never req.Body, by a small scanner
// that keeps a few bytes of state whatever the body's size. An in-memory
// body (one with io.WriterTo, such as the bytes.Reader and strings.Reader
// http.NewRequest keeps) hands over its bytes at once, without a copy; any
// other body is read to its end. The scanner stops looking at the first
// byte that shows the body is not a JSON object, or once the object ends,
// but the read goes on: a 1 MiB body that is not JSON, from a GetBody that
// returns a file or a pipe, is read in full. Duplicate "stream" keys count
// as encoding/json counts them: the last one wins.
//
// It never consumes req.Body and is safe for concurrent use. The Transport
// calls it only after a failed attempt, so successful requests never pay
// for it.
func IsStream(req *http.Request) bool {
	if req == nil {
		return false
	}
	return isStream(req, req.GetBody)
}

// isStream is IsStream with the body source given separately (the
// Transport's own replayable copy when req has no GetBody).
func isStream(req *http.Request, getBody func() (io.ReadCloser, error)) bool {
	if req == nil {
		return false
	}
	for _, v := range req.Header.Values("Accept") {
		if containsFold(v, "text/event-stream") || containsFold(v, "application/vnd.amazon.eventstream") {
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
	var s streamScanner
	if wt, ok := body.(io.WriterTo); ok {
		_, _ = wt.WriteTo(&s)
	} else {
		_, _ = io.Copy(&s, body)
	}
	return s.stream()
}

// streamScanner finds a top-level "stream": true in a JSON object written
// to it in pieces of any size. It tracks the nesting depth and whether it
// is inside a string; it keeps only the key of the current top-level member
// (up to maxKeyBytes of it) and how much of a literal true it has matched.
// Once the object has ended, or the input is not an object, it stops
// looking (Write still accepts everything, so copies run to their end).
//
// The input is not validated: a malformed body reads as whatever members it
// seems to have.
type streamScanner struct {
	state    scanState
	depth    int  // nesting of objects and arrays; the top object is 1
	wantKey  bool // at depth 1, the next string is a member's key
	escaped  bool // inside a string, the previous byte was a backslash
	key      [maxKeyBytes]byte
	keyLen   int  // bytes of key; maxKeyBytes+1 once it is too long
	keyEsc   bool // the key has an escape sequence
	isStream bool // the current top-level member's key is "stream"
	matched  int  // bytes of "true" matched as the stream member's value
	found    bool // the latest "stream" member's value is true
	lastTrue bool // a "stream" value true waits for a delimiter
}

// maxKeyBytes is the longest raw key that may still spell "stream" (every
// letter as a \u escape: 6 × 6 bytes).
const maxKeyBytes = 36

// scanState is where the scanner is in the JSON text.
type scanState uint8

const (
	scanStart  scanState = iota // before the first byte of the value
	scanValue                   // between tokens
	scanString                  // inside a string that is not a top-level key
	scanKey                     // inside a top-level key
	scanLit                     // matching true after "stream":
	scanDone                    // the object ended, or the input is not an object
)

// Write scans p. It never fails.
func (s *streamScanner) Write(p []byte) (int, error) {
	n := len(p)
	for i := 0; i < len(p) && s.state != scanDone; i++ {
		c := p[i]
		switch s.state {
		case scanStart:
			switch {
			case isSpace(c):
			case c == 0xEF || c == 0xBB || c == 0xBF: // a byte-order mark
			case c == '{':
				s.state, s.depth, s.wantKey = scanValue, 1, true
			default:
				s.state = scanDone
			}
		case scanString:
			// Skip to the next quote or backslash at once: prompts are
			// long strings.
			if s.escaped {
				s.escaped = false
				continue
			}
			j := bytes.IndexAny(p[i:], `"\`)
			if j < 0 {
				i = len(p)
				continue
			}
			i += j
			if p[i] == '\\' {
				s.escaped = true
			} else {
				s.state = scanValue
			}
		case scanKey:
			switch {
			case s.escaped:
				s.escaped = false
				s.keyByte(c)
			case c == '\\':
				s.escaped, s.keyEsc = true, true
				s.keyByte(c)
			case c == '"':
				s.isStream, s.wantKey, s.state = s.keyIsStream(), false, scanValue
			default:
				s.keyByte(c)
			}
		case scanLit:
			if s.matched == 0 && isSpace(c) {
				continue
			}
			if c == "true"[s.matched] {
				if s.matched++; s.matched == len("true") {
					s.lastTrue, s.state = true, scanValue
				}
				continue
			}
			s.found, s.state = false, scanValue
			i-- // scan c again as a token
		case scanValue:
			s.token(c)
		}
	}
	return n, nil
}

// token handles byte c between tokens.
func (s *streamScanner) token(c byte) {
	if isSpace(c) {
		return
	}
	if s.lastTrue {
		// "stream": true counts once a delimiter ends the literal.
		s.lastTrue = false
		s.found = s.depth == 1 && (c == ',' || c == '}')
	}
	switch c {
	case '"':
		if s.depth == 1 && s.wantKey {
			s.state, s.keyLen, s.keyEsc = scanKey, 0, false
		} else {
			s.state = scanString
		}
	case '{', '[':
		s.depth++
	case '}', ']':
		if s.depth--; s.depth == 0 {
			s.state = scanDone
		}
	case ',':
		if s.depth == 1 {
			s.wantKey, s.isStream = true, false
		}
	case ':':
		if s.depth == 1 && s.isStream {
			s.isStream, s.matched = false, 0
			s.state = scanLit
		}
	}
}

// keyByte adds c to the current key.
func (s *streamScanner) keyByte(c byte) {
	if s.keyLen < maxKeyBytes {
		s.key[s.keyLen] = c
	}
	if s.keyLen <= maxKeyBytes {
		s.keyLen++
	}
}

// keyIsStream reports whether the key just read is "stream".
func (s *streamScanner) keyIsStream() bool {
	if s.keyLen > maxKeyBytes {
		return false
	}
	raw := s.key[:s.keyLen]
	if !s.keyEsc {
		return string(raw) == "stream"
	}
	var k string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	return json.Unmarshal(quoted, &k) == nil && k == "stream"
}

// stream reports whether the body written has a top-level "stream": true.
// A body cut right after the literal (no closing brace) counts.
func (s *streamScanner) stream() bool {
	if s.lastTrue && s.depth == 1 {
		return true
	}
	return s.found
}

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n'
}
