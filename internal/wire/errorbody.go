package wire

// This file reads the error object of a provider's error body, whole or a
// bounded prefix that may stop anywhere, even inside a string. A complete
// JSON object goes to json.Unmarshal with a small typed target (few
// allocations). Anything else (a cut prefix, a top-level array, trailing
// bytes) is walked token by token with the package's lexer, as
// encoding/json's Decoder.Token would walk it: the walk stops at the first
// syntax error or cut and keeps what it saw before it. A string counts only
// once its closing quote has arrived, so a cut can hide a verdict but never
// change one; a number only once a delimiter follows it, since "0" may be
// what is left of "0.5". Both readers hand the same fields to judge.

import (
	"bytes"
	"encoding/json"
)

// field names a value in a provider's error body that judge reads.
type field int

// The fields judge reads; arrays on their paths are not named.
const (
	errorCode    field = iota + 1 // error.code or error.type (OpenAI)
	detailCode                    // error.details.error_code (Anthropic)
	quotaID                       // error.details.violations.quotaId (Gemini)
	quotaValue                    // error.details.violations.quotaValue (Gemini)
	retryDelay                    // error.details.retryDelay (Gemini RetryInfo)
	errorMessage                  // error.message: "Please try again in 1.2s." (OpenAI), "retry after 33 seconds" (Azure)
)

// maxSignalDepth bounds the nesting the walk follows; the deepest field it
// reads sits at depth 6, or 7 inside a top-level array.
const maxSignalDepth = 16

// judge records in s what value v of field f says about retrying.
func judge(f field, v string, s *Signal) {
	switch f {
	case errorCode: // OpenAI: a spent quota or an unpaid bill.
		s.Final = s.Final || v == spentQuota
	case detailCode: // Anthropic: the monthly spend cap.
		s.Final = s.Final || v == spendCap
	case quotaID: // Gemini: a per-day quota resets at midnight.
		s.Final = s.Final || containsFold(v, perDay)
	case quotaValue: // Gemini: a limit of 0 (an int64: "0" in JSON) never frees up.
		s.Final = s.Final || v == "0"
	case retryDelay: // Gemini RetryInfo: keep the longest wait asked for.
		if d, ok := ParseProtoDuration(v); ok && (!s.HasWait || d > s.Wait) {
			s.Wait, s.HasWait = d, true
		}
	case errorMessage: // a wait stated in words: the longest, too
		if d, ok := MessageWait(v); ok && (!s.HasWait || d > s.Wait) {
			s.Wait, s.HasWait = d, true
		}
	}
}

// errorReply is the part of a complete error body that judge reads. A value
// of another JSON type than declared is skipped (Gemini's numeric
// error.code), and the rest is still read.
type errorReply struct {
	Error struct {
		Code    string     `json:"code"`    // OpenAI's code; Gemini's is a number
		Type    string     `json:"type"`    // OpenAI's and Anthropic's error type
		Message string     `json:"message"` // may state a wait in words
		Details detailList `json:"details"` // Anthropic's and Gemini's details
	} `json:"error"` // the top-level error object
}

// detailList is error.details: an object (Anthropic) or an array (Gemini).
type detailList []errorDetail

// errorDetail is one entry of error.details.
type errorDetail struct {
	ErrorCode  string `json:"error_code"` // Anthropic's reason code
	RetryDelay string `json:"retryDelay"` // Gemini RetryInfo's Duration
	Violations []struct {
		QuotaID    string     `json:"quotaId"`    // Gemini's quota name
		QuotaValue quotaLimit `json:"quotaValue"` // Gemini's quota limit
	} `json:"violations"` // Gemini QuotaFailure's violations
}

// quotaLimit is a quotaValue as written: an int64 in a JSON string, or a
// number.
type quotaLimit string

// UnmarshalJSON keeps a string's text or any other value's literal, so that
// a number reads as the walk reads it; it never fails.
func (q *quotaLimit) UnmarshalJSON(b []byte) error {
	if json.Unmarshal(b, (*string)(q)) != nil {
		*q = quotaLimit(b)
	}
	return nil
}

// UnmarshalJSON reads an object as a list of one. It ignores type errors
// inside b, which the outer json.Unmarshal has already found valid.
func (l *detailList) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var d errorDetail
		_ = json.Unmarshal(b, &d)
		*l = append(*l, d)
		return nil
	}
	_ = json.Unmarshal(b, (*[]errorDetail)(l))
	return nil
}

// readErrorBody records in s what the error object at the start of data
// says: with json.Unmarshal if data is one complete JSON object, else with
// walkErrorBody.
func readErrorBody(data []byte, s *Signal) {
	var r errorReply
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if !hasPrefix(trimmed, "{") {
		walkErrorBody(data, s)
		return
	}
	if err := json.Unmarshal(trimmed, &r); err != nil {
		if _, typeErr := err.(*json.UnmarshalTypeError); !typeErr {
			walkErrorBody(data, s)
			return
		}
	}
	judge(errorCode, r.Error.Code, s)
	judge(errorCode, r.Error.Type, s)
	judge(errorMessage, r.Error.Message, s)
	for _, d := range r.Error.Details {
		judge(detailCode, d.ErrorCode, s)
		judge(retryDelay, d.RetryDelay, s)
		for _, v := range d.Violations {
			judge(quotaID, v.QuotaID, s)
			judge(quotaValue, string(v.QuotaValue), s)
		}
	}
}

// frame is one open object or array during the walk, with the key (its
// text, decoded) of the value being read in an object.
type frame struct {
	object bool
	keyLen int // bytes of key; -1 for a key too long to be one judge reads
	key    [maxKeyText]byte
}

// maxKeyText bounds the decoded keys the walk keeps: longer than any key
// on judge's paths in any spelling that folds to it.
const maxKeyText = 32

// walkState is what the grammar allows next during the walk, as
// encoding/json's Decoder.Token allows it.
type walkState uint8

const (
	wantValue        walkState = iota // a value: at the top, after a colon, or after a comma in an array
	wantValueOrClose                  // after [: a value or ]
	wantKeyOrClose                    // after {: a key or }
	wantKey                           // after a comma in an object
	wantColon                         // after a key
	wantCommaOrClose                  // after a value in an object or array
)

// walkErrorBody walks the first JSON value in data token by token and
// judges the fields it finds. It stops at the end of that value, at the
// first syntax error or cut, at a final verdict, or past maxSignalDepth.
// Arrays are transparent: [{"error":...}] (a Gemini stream) reads like
// {"error":...}.
func walkErrorBody(data []byte, s *Signal) {
	var l Lexer
	var buf [maxSignalDepth]frame
	stack := buf[:0]
	want := wantValue
	for i := 0; !s.Final; {
		var t Token
		t, i = l.Next(data, i)
		if t.Kind == None || t.Open() {
			return // the end, or a token it cuts
		}
		switch t.Kind {
		case BeginObject, BeginArray:
			if want != wantValue && want != wantValueOrClose || len(stack) == maxSignalDepth {
				return
			}
			stack = append(stack, frame{object: t.Kind == BeginObject})
			want = wantValueOrClose
			if t.Kind == BeginObject {
				want = wantKeyOrClose
			}
			continue
		case EndObject, EndArray:
			n := len(stack)
			if n == 0 || stack[n-1].object != (t.Kind == EndObject) ||
				want != wantCommaOrClose && want != wantKeyOrClose && want != wantValueOrClose {
				return
			}
			stack = stack[:n-1]
		case Colon:
			if want != wantColon {
				return
			}
			want = wantValue
			continue
		case Comma:
			if want != wantCommaOrClose {
				return
			}
			want = wantValue
			if stack[len(stack)-1].object {
				want = wantKey
			}
			continue
		case String:
			raw := data[t.From+1 : t.To-1]
			if want == wantKeyOrClose || want == wantKey {
				if !stack[len(stack)-1].setKey(raw) {
					return
				}
				want = wantColon
				continue
			}
			if want != wantValue && want != wantValueOrClose || !validString(raw) {
				return
			}
			if f := fieldAt(stack); f != 0 {
				judge(f, text(raw), s)
			}
		case Scalar:
			raw := data[t.From:t.To]
			if want != wantValue && want != wantValueOrClose || !validScalar(raw) {
				return
			}
			if c := raw[0]; (c == '-' || c >= '0' && c <= '9') && delimited(data, t.To) {
				if f := fieldAt(stack); f != 0 {
					judge(f, string(raw), s)
				}
			}
		}
		// A value ended.
		if len(stack) == 0 {
			return
		}
		want = wantCommaOrClose
	}
}

// setKey decodes raw, the bytes of a key between its quotes, into f; it
// reports false for a string encoding/json refuses.
func (f *frame) setKey(raw []byte) bool {
	if !validString(raw) {
		return false
	}
	f.keyLen = -1
	if len(raw) <= maxKeyText*6 { // \uXXXX: six bytes for at most three
		if k, _ := unquote(f.key[:0], raw); len(k) <= maxKeyText {
			f.keyLen = copy(f.key[:], k)
		}
	}
	return true
}

// text returns the text of a valid string whose bytes between the quotes
// are raw.
func text(raw []byte) string {
	for _, c := range raw {
		if c == '\\' || c >= 0x80 {
			v, _ := unquote(make([]byte, 0, len(raw)), raw)
			return string(v)
		}
	}
	return string(raw)
}

// fieldAt names the field at the key path of stack, arrays skipped, or
// returns 0.
func fieldAt(stack []frame) field {
	switch {
	case atPath(stack, "error", "code"), atPath(stack, "error", "type"):
		return errorCode
	case atPath(stack, "error", "details", "error_code"):
		return detailCode
	case atPath(stack, "error", "details", "violations", "quotaId"):
		return quotaID
	case atPath(stack, "error", "details", "violations", "quotaValue"):
		return quotaValue
	case atPath(stack, "error", "details", "retryDelay"):
		return retryDelay
	case atPath(stack, "error", "message"):
		return errorMessage
	}
	return 0
}

// atPath reports whether the object keys along stack, arrays skipped, are
// keys, ignoring case as json.Unmarshal does.
func atPath(stack []frame, keys ...string) bool {
	i := 0
	for j := range stack {
		f := &stack[j]
		if !f.object {
			continue
		}
		if i == len(keys) || f.keyLen < 0 || !bytes.EqualFold(f.key[:f.keyLen], []byte(keys[i])) {
			return false
		}
		i++
	}
	return i == len(keys)
}

// delimited reports whether the number that ends at data[off] is followed
// by a delimiter, so that it is neither what is left of a longer number
// ("0" of "0.5") nor the start of invalid input ("00").
func delimited(data []byte, off int) bool {
	rest := bytes.TrimLeft(data[off:], " \t\r\n")
	return len(rest) > 0 && (rest[0] == ',' || rest[0] == '}' || rest[0] == ']')
}
