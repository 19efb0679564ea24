package llmretry

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/llmretry/llmretry/internal/credential"
)

// Attempt is the record of one attempt: each attempt is its own call, with
// its own ID, so anyone reading the record sees the failure, the wait and
// the next attempt.
//
// An Attempt is passed by value to Policy.OnAttempt; it holds pointers to
// the request and response that the attempt used, which the observer must
// treat as read-only. The observer must not read or close Response.Body:
// the body belongs to the caller (when this attempt's result is returned)
// or to the Transport (which drains and closes it before a retry).
type Attempt struct {
	// ID is unique per attempt: 16 random hex digits.
	ID string
	// N is the attempt number: 1 for the first try. Numbers continue across
	// rounds when OnExhausted says to try again.
	N int
	// Request is the request this attempt sent: a shallow copy of the
	// caller's, with the attempt's own context and, for a retry, a fresh
	// body. Nil for attempts made by Do.
	Request *http.Request
	// Response is the attempt's response; nil when Err is non-nil.
	Response *http.Response
	// Event is the provider's word for the error event a 2xx stream
	// opened with ("overloaded_error", "server_error", "UNAVAILABLE" …),
	// when that event failed the attempt although its status is 200 (see
	// Policy.RetryStreams); empty otherwise. It never holds a message.
	Event string
	// Err is the attempt's error; nil when a response arrived.
	Err error
	// RetryIn is the wait before the next attempt; 0 when it follows at
	// once, or when none follows (the last attempt of a round, or of the
	// call: see Stop). When Held, it is the least wait (the server's, or
	// 0).
	RetryIn time.Duration
	// Probe reports that the attempt was sent as its provider key's probe
	// (see package coordination).
	Probe bool
	// Stop is set on the attempt after which no retry follows, to say why:
	// one of ErrRetriesSpent, ErrNoTimeLeft, ErrWaitTooLong,
	// ErrProviderRefused and ErrNotRetryable, or the caller's context's
	// error. It is nil when a retry follows and on a success. When
	// Policy.OnExhausted is asked, Stop is ErrRetriesSpent and a yes
	// still starts another round. A stop that comes during the wait after
	// an attempt (the caller's context ends, the request body cannot be
	// read again) comes after that attempt was recorded with its RetryIn:
	// the Exhausted's Reason alone says it.
	Stop error
	// Route is the route the attempt took: 0 the primary (the request as
	// the caller made it), k the policy's Fallback[k-1] (see
	// Policy.Fallback), len(Fallback)+k its LongContext[k-1]. Request is
	// then the request the Route made, with its own URL and credentials.
	Route int
	// Continued says that the attempt continued a stream the caller was
	// reading, which broke (see Policy.ContinueStreams), and how: "resume"
	// (a Responses stream created in the background, read on from where
	// it broke), "prefill" (the delivered text sent as a last assistant
	// turn, which the reply continues) or "regenerate" (the request sent
	// again as it was, its reply matched against what was delivered);
	// empty for an attempt of the call's own.
	Continued string
	// From is how much of the answer's content (in bytes of its text) had
	// reached the caller when the stream broke, for a continuation.
	From int64
	// Moved says why the call moved to another route after this attempt,
	// at once: "provider down", "waiting cannot win", "FallbackAfter",
	// "context too long" or "credential refused" (see Policy.Fallback and
	// Policy.LongContext); empty when the next attempt, if any, asks the
	// same route first. A move to a fallback bills another account or
	// model: this is where to see it. "prefill refused, regenerating"
	// says that the route refused this continuation's prefill (a 400, see
	// Policy.ContinueStreams): the next attempt, at once, regenerates the
	// answer, on the same route, and Stop is nil.
	Moved string
	// Held reports that the next attempt is held, with the other calls to
	// the same provider key, until the key is back or the server's wait is
	// over (see package coordination and its Config.OnHold).
	Held bool
}

// String renders the attempt on one line without credentials: the URL
// loses its user information and its query (shown as "?…"), no header is
// shown, and an error's text is redacted (see Redact).
func (a Attempt) String() string {
	s := fmt.Sprintf("attempt %d %s", a.N, a.ID)
	if a.Request != nil {
		s += " " + a.Request.Method + " " + redactURL(a.Request.URL)
	}
	switch {
	case a.Err != nil:
		s += ": " + redactErr(a.Err, a.Request)
	case a.Response != nil:
		s += ": " + a.Response.Status
	}
	if a.Event != "" {
		s += " (stream error " + a.Event + ")"
	}
	if a.Route > 0 {
		s += fmt.Sprintf(" [route %d]", a.Route)
	}
	if a.Moved != "" {
		s += " (moved: " + a.Moved + ")"
	}
	if a.Continued != "" {
		s += fmt.Sprintf(" (continued by %s from %d bytes)", a.Continued, a.From)
	}
	if a.Probe {
		s += " [probe]"
	}
	if a.Stop != nil {
		s += " (stop: " + reasonText(a.Stop) + ")"
	}
	switch {
	case a.Held && a.RetryIn > 0:
		s += fmt.Sprintf(" (held: retry in %v or later, when the provider is back)", a.RetryIn)
	case a.Held:
		s += " (held: retry when the provider is back)"
	case a.RetryIn > 0:
		s += fmt.Sprintf(" (retry in %v)", a.RetryIn)
	}
	return s
}

// newID returns 16 random hex digits. math/rand/v2's global source is
// safe for concurrent use and needs no seeding.
func newID() string {
	var b [8]byte
	u := rand.Uint64()
	for i := range b {
		b[i] = byte(u >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// LogAttempts returns a Policy.OnAttempt that writes the record to l as a
// log: one line per attempt, with the message "llmretry attempt" and the
// fields
//
//	method, url   the request (absent for Do)
//	attempt_id    the attempt's own ID
//	attempt       its number: 1 for the first try, counting across rounds
//	status        the response's status code, or
//	error         the attempt's error
//	event         the error event a 2xx stream opened with, which failed
//	              the attempt (Attempt.Event), when there was one
//	retry_in      the wait before the next attempt, when one follows
//	              after a wait above zero
//	route         the route the attempt took (see Policy.Fallback), when
//	              it is not the primary (1 and above); absent for it
//	moved         why the call moved to another route after this attempt
//	              (Attempt.Moved), when it did
//	continued     how the attempt continued a cut stream (Attempt.Continued:
//	              "resume", "prefill", "regenerate"), when it did
//	from          the bytes of the answer's text the caller had when the
//	              stream was cut (Attempt.From), with continued
//	probe         true, when the attempt was its provider key's probe
//	held          true, when the next attempt is held until the provider
//	              is back (see package coordination)
//	stop          why no retry follows this attempt (the words of
//	              Attempt.Stop: "retries spent", "no time left …"), when
//	              none does; absent on a success
//
// A successful attempt is logged at slog.LevelInfo, a failed one (an error,
// a status of 400 or above, or a stream that opened with an error event)
// at slog.LevelWarn; nothing is built when the
// level is disabled. The request's context is passed to the handler.
//
// No credential is written: the url has no query or user information
// (Gemini's key= travels in the query), no header is logged
// (Authorization, x-api-key, api-key, x-goog-api-key, cookies), and the
// error text has the request's query and credential-like query values
// (key=, api_key=, token=, sig=, …) blanked.
//
// A nil l means slog.Default(), looked up at each attempt. The returned
// function is safe for concurrent use if l's handler is (slog's are); it
// keeps l and nothing else.
func LogAttempts(l *slog.Logger) func(Attempt) {
	return func(a Attempt) {
		level := slog.LevelInfo
		if a.Err != nil || a.Event != "" || (a.Response != nil && a.Response.StatusCode >= 400) {
			level = slog.LevelWarn
		}
		logger, ctx, ok := enabled(l, a.Request, level)
		if !ok {
			return
		}
		attrs := make([]slog.Attr, 0, 15)
		if a.Request != nil {
			attrs = append(attrs, slog.String("method", a.Request.Method), slog.String("url", redactURL(a.Request.URL)))
		}
		attrs = append(attrs, slog.String("attempt_id", a.ID), slog.Int("attempt", a.N))
		switch {
		case a.Err != nil:
			attrs = append(attrs, slog.String("error", redactErr(a.Err, a.Request)))
		case a.Response != nil:
			attrs = append(attrs, slog.Int("status", a.Response.StatusCode))
		}
		if a.Event != "" {
			attrs = append(attrs, slog.String("event", a.Event))
		}
		if a.RetryIn > 0 {
			attrs = append(attrs, slog.Duration("retry_in", a.RetryIn))
		}
		if a.Route > 0 {
			attrs = append(attrs, slog.Int("route", a.Route))
		}
		if a.Moved != "" {
			attrs = append(attrs, slog.String("moved", a.Moved))
		}
		if a.Continued != "" {
			attrs = append(attrs, slog.String("continued", a.Continued), slog.Int64("from", a.From))
		}
		if a.Probe {
			attrs = append(attrs, slog.Bool("probe", true))
		}
		if a.Held {
			attrs = append(attrs, slog.Bool("held", true))
		}
		if a.Stop != nil {
			attrs = append(attrs, slog.String("stop", reasonText(a.Stop)))
		}
		logger.LogAttrs(ctx, level, "llmretry attempt", attrs...)
	}
}

// enabled returns the logger to write to (l, or slog.Default() if nil) and
// the context to pass it (req's, if any), and whether it logs at level.
func enabled(l *slog.Logger, req *http.Request, level slog.Level) (*slog.Logger, context.Context, bool) {
	if l == nil {
		l = slog.Default()
	}
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	return l, ctx, l.Enabled(ctx, level)
}

// redactURL renders u as scheme://host/path: no user information, query or
// fragment, which is where credentials travel in URLs (Gemini's key=).
func redactURL(u *url.URL) string { return credential.RedactURL(u) }

// redactErr renders err without the credentials its text may carry (see
// Redact): an error from a nested http.Client quotes the whole URL, query
// included.
func redactErr(err error, req *http.Request) string {
	return Redact(err.Error(), req)
}

// Redact returns text with every credential of req that it may quote
// blanked ("…"): req's query (whole), its URL user information, the values
// of its credential headers (Authorization, Proxy-Authorization,
// x-api-key, api-key, x-goog-api-key, Cookie, X-Amz-Security-Token,
// Ocp-Apim-Subscription-Key; the token of "Bearer …" alone too), and,
// whatever req, the value of any credential-like name=value (key=,
// api_key=, token=, sig=, password=, X-Amz-Signature=, …: a name one of
// whose words is key, sig or auth, or ends in token, secret, password,
// signature or credential). req may be nil.
//
// Use it before logging an error a client returned: http.Client wraps a
// transport error in a *url.Error that quotes the whole URL, query
// included. It is what this package's own texts (Exhausted, Attempt,
// Question, LogAttempts) go through; coordination.HeldError blanks
// credential-like values the same way.
func Redact(text string, req *http.Request) string { return credential.Redact(text, req) }
