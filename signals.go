package llmretry

// This file reads what a model provider says about retrying in a failed
// reply: the x-should-retry header and the error object in the body.
//
// The body is a bounded prefix that may stop anywhere, even inside a string.
// A complete JSON object goes to json.Unmarshal with a small typed target
// (few allocations). Anything else (a cut prefix, a top-level array,
// trailing bytes) gets a json.Decoder token walk that stops at the first
// error and keeps what it saw before it. A string token exists only once its
// closing quote has arrived, so a cut can hide a verdict but never change
// one; a number is trusted only when a delimiter follows it, since "0" may be
// what is left of "0.5". Both readers hand the same fields to judge.

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"
)

// signal is what a provider's error reply says about retrying.
type signal struct {
	// final is set when the provider says waiting will not help: a spent
	// quota or spend cap, a per-day or zero quota, or x-should-retry: false.
	final bool
	// retry is set when the provider explicitly asks for a retry
	// (x-should-retry: true); it overrides a status that would not be
	// retried. It is never set together with final.
	retry bool
	// wait is a server-requested wait found in the body (Gemini's
	// RetryInfo.retryDelay); it is zero unless hasWait is set.
	wait time.Duration
	// hasWait tells a requested wait of zero ("0s") from no request.
	hasWait bool
}

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

const (
	// maxSignalDepth bounds the nesting the token walk follows; the deepest
	// field it reads sits at depth 6, or 7 inside a top-level array.
	maxSignalDepth = 16
	// maxProtoSeconds and maxProtoNanos are time.Duration's maximum.
	maxProtoSeconds = int64(math.MaxInt64 / int64(time.Second))
	maxProtoNanos   = int64(math.MaxInt64 % int64(time.Second))
)

// readSignal inspects status, headers and a bounded body prefix of a failed
// reply. A status below 400 says nothing and yields the zero signal.
//
// x-should-retry: false makes the signal final whatever the body says.
// Evidence in the body that waiting will not help is final too, and wins
// over x-should-retry: true, which providers send on plain 429s. A final
// signal carries no wait. The body is read only when the Content-Type is
// absent, JSON-ish or text/event-stream.
func readSignal(status int, h http.Header, body []byte) signal {
	if status < 400 {
		return signal{}
	}
	var s signal
	switch v := strings.TrimSpace(h.Get("X-Should-Retry")); {
	case strings.EqualFold(v, "false"):
		return signal{final: true}
	case strings.EqualFold(v, "true"):
		s.retry = true
	}
	if readableBody(h.Get("Content-Type")) {
		readErrorBody(ssePayload(body), &s)
	}
	if s.final {
		return signal{final: true}
	}
	return s
}

// readableBody reports whether a reply of Content-Type ct may carry a JSON
// error object: ct is absent, names JSON or is text/event-stream.
func readableBody(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	return ct == "" || strings.EqualFold(ct, "text/event-stream") || containsFold(ct, "json")
}

// ssePayload returns b without a leading byte-order mark and, when b is
// framed as server-sent events, without the field lines before the first
// data field and without that field's name. A JSON value split over several
// data lines is cut at the second "data:" and read as a truncated prefix.
func ssePayload(b []byte) []byte {
	if hasPrefix(b, "\xef\xbb\xbf") {
		b = b[3:]
	}
	for {
		b = bytes.TrimLeft(b, " \t\r\n")
		switch {
		case hasPrefix(b, "data:"):
			b = b[len("data:"):]
			if hasPrefix(b, " ") {
				b = b[1:]
			}
			return b
		case hasPrefix(b, "event:"), hasPrefix(b, "id:"), hasPrefix(b, "retry:"), hasPrefix(b, ":"):
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return nil
			}
			b = b[i+1:]
		default:
			return b
		}
	}
}

// judge records in s what value v of field f says about retrying.
func judge(f field, v string, s *signal) {
	switch f {
	case errorCode: // OpenAI: a spent quota or an unpaid bill.
		s.final = s.final || v == "insufficient_quota"
	case detailCode: // Anthropic: the monthly spend cap.
		s.final = s.final || v == "enforced_spend_limit_reached"
	case quotaID: // Gemini: a per-day quota resets at midnight.
		s.final = s.final || containsFold(v, "perday")
	case quotaValue: // Gemini: a limit of 0 (an int64: "0" in JSON) never frees up.
		s.final = s.final || v == "0"
	case retryDelay: // Gemini RetryInfo: keep the longest wait asked for.
		if d, ok := parseProtoDuration(v); ok && (!s.hasWait || d > s.wait) {
			s.wait, s.hasWait = d, true
		}
	case errorMessage: // a wait stated in words: the longest, too
		if d, ok := messageWait(v); ok && (!s.hasWait || d > s.wait) {
			s.wait, s.hasWait = d, true
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
// a number reads as the token walk reads it; it never fails.
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
func readErrorBody(data []byte, s *signal) {
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

// frame is one open JSON object or array during the token walk.
type frame struct {
	object  bool   // an object, not an array
	wantKey bool   // the next string token is a key of this object
	key     string // the key of the value being read in this object
}

// walkErrorBody walks the first JSON value in data token by token and
// judges the fields it finds. It stops at the end of that value, at the
// first syntax error or cut, at a final verdict, or past maxSignalDepth.
// Arrays are transparent: [{"error":...}] (a Gemini stream) reads like
// {"error":...}.
func walkErrorBody(data []byte, s *signal) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf [maxSignalDepth]frame
	stack := buf[:0]
	for !s.final {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				if len(stack) == maxSignalDepth {
					return
				}
				stack = append(stack, frame{object: t == '{', wantKey: t == '{'})
				continue
			}
			if len(stack) == 0 {
				return
			}
			stack = stack[:len(stack)-1]
		case string:
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				stack[n-1].key, stack[n-1].wantKey = t, false
				continue
			}
			judge(fieldAt(stack), t, s)
		case json.Number:
			if numberEnded(data, dec.InputOffset()) {
				judge(fieldAt(stack), t.String(), s)
			}
		}
		if len(stack) == 0 {
			return
		}
		if top := &stack[len(stack)-1]; top.object {
			top.wantKey = true
		}
	}
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
	for _, f := range stack {
		if !f.object {
			continue
		}
		if i == len(keys) || !strings.EqualFold(f.key, keys[i]) {
			return false
		}
		i++
	}
	return i == len(keys)
}

// numberEnded reports whether the number token ending at offset off of data
// is followed by a delimiter, so that it is neither what is left of a longer
// number ("0" of "0.5") nor the start of invalid input ("00").
func numberEnded(data []byte, off int64) bool {
	if off < 0 || off > int64(len(data)) {
		return false
	}
	rest := bytes.TrimLeft(data[off:], " \t\r\n")
	return len(rest) > 0 && (rest[0] == ',' || rest[0] == '}' || rest[0] == ']')
}

// parseProtoDuration parses the JSON form of a google.protobuf.Duration:
// decimal seconds with up to nine fractional digits and a trailing "s",
// such as "26s", "0.5s" or "38.804097346s". It rejects signs, exponents,
// spaces, a missing "s" and values beyond time.Duration's range (about 292
// years); it does not cap large values, the caller does.
func parseProtoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(s, "s")
	whole, frac, dot := strings.Cut(num, ".")
	if !ok || whole == "" || (dot && (frac == "" || len(frac) > 9)) {
		return 0, false
	}
	var secs, nanos int64
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if secs = secs*10 + int64(c-'0'); secs > maxProtoSeconds {
			return 0, false
		}
	}
	for i := 0; i < 9; i++ {
		nanos *= 10
		if i < len(frac) {
			if c := frac[i]; c >= '0' && c <= '9' {
				nanos += int64(c - '0')
			} else {
				return 0, false
			}
		}
	}
	if secs == maxProtoSeconds && nanos > maxProtoNanos {
		return 0, false
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), true
}

// hasPrefix reports whether b begins with p, without allocating.
func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// containsFold reports whether s contains the ASCII string sub, ignoring
// case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
