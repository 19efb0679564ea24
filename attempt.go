package llmretry

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
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
	// rounds when an Asker says to try again.
	N int
	// Request is the request this attempt sent: a shallow copy of the
	// caller's, with the attempt's own context and, for a retry, a fresh
	// body. Nil for attempts made by Do.
	Request *http.Request
	// Response is the attempt's response; nil when Err is non-nil.
	Response *http.Response
	// Err is the attempt's error; nil when a response arrived.
	Err error
	// RetryIn is the wait before the next attempt; 0 when it follows at
	// once, or when none follows (the last attempt of a round, or of the
	// call: see Stop). When Held, it is the least wait (the server's, or
	// 0).
	RetryIn time.Duration
	// Probe reports that the attempt was sent as its provider key's probe
	// (see Coordination).
	Probe bool
	// Stop is set on the attempt after which no retry follows, to say why:
	// one of ErrRetriesSpent, ErrNoTimeLeft, ErrWaitTooLong,
	// ErrProviderRefused and ErrNotRetryable, or the caller's context's
	// error. It is nil when a retry follows and on a success. When an
	// Asker is asked, Stop is ErrRetriesSpent and a yes still starts
	// another round.
	Stop error
	// Route is the route the attempt took: 0 the primary (the request as
	// the caller made it), k the policy's Fallback[k-1] (see
	// Policy.Fallback). Request is then the request the Route made, with
	// its own URL and credentials.
	Route int
	// Held reports that the next attempt is held, with the other calls to
	// the same provider key, until the key is back or the server's wait is
	// over (see Coordination and Policy.OnHold).
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
	if a.Route > 0 {
		s += fmt.Sprintf(" [route %d]", a.Route)
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
