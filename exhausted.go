package llmretry

import (
	"context"
	"fmt"
	"net/http"
)

// Exhausted describes a call that gave up: the question put to an Asker,
// and the error RoundTrip returns when the last attempt got no response
// (Do returns it whenever its last attempt failed).
//
// When the last attempt did get a response, RoundTrip returns that response
// with a nil error instead, as a plain http.RoundTripper would; an Asker
// still sees it here, in Response.
type Exhausted struct {
	// Request is the caller's request (nil for Do).
	Request *http.Request
	// Attempts is the number of attempts made, across all rounds.
	Attempts int
	// Response is the last attempt's response, or nil. Its body is unread
	// and belongs to the caller of RoundTrip; an Asker must not read or
	// close it.
	Response *http.Response
	// Err is the last attempt's error, or nil.
	Err error
}

// Error says what was called, how many attempts were made and how the last
// one ended. It never includes the URL's query or any header.
func (e *Exhausted) Error() string {
	what := "call"
	if e.Request != nil {
		what = e.Request.Method + " " + redactURL(e.Request.URL)
	}
	last := "no result"
	switch {
	case e.Err != nil:
		last = redactErr(e.Err, e.Request)
	case e.Response != nil:
		last = e.Response.Status
	}
	return fmt.Sprintf("llmretry: %s: gave up after %d %s: %s", what, e.Attempts, plural(e.Attempts, "attempt"), last)
}

// Unwrap returns the last attempt's error, so that errors.Is and errors.As
// reach the cause.
func (e *Exhausted) Unwrap() error { return e.Err }

// Asker decides, once retries run out, whether to run another round of the
// policy's schedule. Ask is called once per round, from the goroutine that
// made the call, and must return promptly once ctx is done (the Transport
// treats a done context as no). Implementations must be safe for
// concurrent use when the policy is shared.
type Asker interface {
	Ask(ctx context.Context, e *Exhausted) bool
}

// AskFunc adapts a function to an Asker.
type AskFunc func(ctx context.Context, e *Exhausted) bool

// Ask calls f(ctx, e).
func (f AskFunc) Ask(ctx context.Context, e *Exhausted) bool { return f(ctx, e) }

// plural returns word with an "s" unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
