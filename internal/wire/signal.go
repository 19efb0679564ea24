package wire

import (
	"bytes"
	"net/http"
	"strings"
	"time"
)

// Signal is what a provider's error reply says about retrying. The zero
// Signal says nothing. It is a plain value, safe to copy and compare.
type Signal struct {
	// Final is set when the provider says waiting will not help: a spent
	// quota or spend cap, a per-day or zero quota, or x-should-retry: false.
	Final bool
	// Retry is set when the provider explicitly asks for a retry
	// (x-should-retry: true); it overrides a status that would not be
	// retried. It is never set together with Final.
	Retry bool
	// Wait is a server-requested wait found in the body (Gemini's
	// RetryInfo.retryDelay, or a wait in words); it is zero unless
	// HasWait is set.
	Wait time.Duration
	// HasWait tells a requested wait of zero ("0s") from no request.
	HasWait bool
}

// ReadSignal reads status, headers and a bounded body prefix of a failed
// reply. A status below 400 says nothing and yields the zero Signal.
//
// x-should-retry: false makes the signal final whatever the body says.
// Evidence in the body that waiting will not help is final too, and wins
// over x-should-retry: true, which providers send on plain 429s. A final
// signal carries no wait. The body is read only when ReadableBody accepts
// its Content-Type; a body framed as server-sent events is read from its
// first event's data (see errorPayload). body may stop anywhere: a cut
// can hide a verdict but never change one (see readErrorBody). It is
// HeaderSignal and BodySignal together, for a caller that has both at
// once.
func ReadSignal(status int, h http.Header, body []byte) Signal {
	if status < 400 {
		return Signal{}
	}
	s := HeaderSignal(status, h)
	if s.Final {
		return s
	}
	b := BodySignal(h, body)
	if b.Final {
		return b
	}
	b.Retry = s.Retry
	return b
}

// HeaderSignal is what a failed reply's status and headers say about
// retrying, without its body: x-should-retry (false is final, true asks
// for a retry). A status below 400 says nothing.
func HeaderSignal(status int, h http.Header) Signal {
	if status < 400 {
		return Signal{}
	}
	switch v := strings.TrimSpace(h.Get("X-Should-Retry")); {
	case strings.EqualFold(v, "false"):
		return Signal{Final: true}
	case strings.EqualFold(v, "true"):
		return Signal{Retry: true}
	}
	return Signal{}
}

// BodySignal is what a failed reply's bounded body prefix says about
// retrying (a spent quota or spend cap, a per-day or zero quota are final;
// Gemini's RetryInfo and a wait in words are waits), read only when the
// reply's Content-Type may carry a JSON error object (see ReadableBody). A
// final signal carries no wait.
func BodySignal(h http.Header, body []byte) Signal {
	var s Signal
	if ReadableBody(h.Get("Content-Type")) {
		readErrorBody(errorPayload(body), &s)
	}
	if s.Final {
		return Signal{Final: true}
	}
	return s
}

// ReadableBody reports whether a reply of Content-Type ct may carry a JSON
// error object: ct is absent, names JSON or is text/event-stream.
func ReadableBody(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	return ct == "" || strings.EqualFold(ct, MediaSSE) || containsFold(ct, "json")
}

// errorPayload returns the JSON an error reply's body b carries: b itself
// (without a byte-order mark), or, when b is framed as server-sent events
// (it starts, after blank space, with a data, event, id or retry field or
// a comment, whatever its Content-Type: Gemini labels an error reply to a
// stream text/event-stream and frames it), the data of its first event,
// or of the event b is cut in (see Framer.Pending); nil if it has none.
func errorPayload(b []byte) []byte {
	if hasPrefix(b, utf8BOM) {
		b = b[len(utf8BOM):]
	}
	rest := bytes.TrimLeft(b, " \t\r\n")
	if !hasPrefix(rest, "data:") && !hasPrefix(rest, "event:") && !hasPrefix(rest, "id:") &&
		!hasPrefix(rest, "retry:") && !hasPrefix(rest, ":") {
		return b
	}
	var f Framer
	ev, ok := f.Next(rest)
	if !ok {
		ev, _ = f.Pending(rest)
	}
	return ev.Data
}

// hasPrefix reports whether b begins with p, without allocating.
func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}
