package llmretry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Exhausted is the record of a call that sent no further attempt: the
// question put to an Asker, the error RoundTrip returns when the last
// attempt got no response or the caller's context ended during a wait (Do
// returns it whenever its last attempt failed), and, through GaveUp, the
// record of a failed response RoundTrip returns.
//
// When the last attempt did get a response, RoundTrip returns that response
// with a nil error instead, as a plain http.RoundTripper would; GaveUp finds
// this record on it, and an Asker sees the response here, in Response.
type Exhausted struct {
	// Request is the caller's request (nil for Do).
	Request *http.Request
	// Attempts is the number of attempts made, across all rounds.
	Attempts int
	// Reason says why no further attempt was sent: one of ErrRetriesSpent,
	// ErrNoTimeLeft, ErrWaitTooLong, ErrProviderRefused and
	// ErrNotRetryable, or the context's error when the caller's context
	// ended. An Asker is shown ErrRetriesSpent.
	Reason error
	// Response is the last attempt's response, or nil. Its body belongs to
	// the caller of RoundTrip; an Asker must not read or close it.
	Response *http.Response
	// Err is the last attempt's error, or nil; the context's error when
	// the caller's context ended during a wait. It also carries the error
	// of a Route the call passed over (see Policy.Fallback), joined,
	// even when the last attempt got a response.
	Err error
	// Routes are the routes the call's attempts took, each once, in the
	// order first taken: 0 the primary, k the policy's Fallback[k-1] (see
	// Policy.Fallback). Nil when the policy has no Fallback.
	Routes []int
}

// Error says why the call stopped, after how many attempts, and how the
// last one ended. It names neither the method nor the URL (net/http's
// *url.Error, which wraps it for an http.Client's caller, already does) and
// never includes a header or a credential-like query value.
func (e *Exhausted) Error() string {
	last := "no result"
	switch {
	case e.Response != nil && e.Err != nil:
		last = e.Response.Status + " (" + redactErr(e.Err, e.Request) + ")"
	case e.Err != nil:
		last = redactErr(e.Err, e.Request)
	case e.Response != nil:
		last = e.Response.Status
	}
	if len(e.Routes) > 1 {
		last = "on routes " + routeList(e.Routes) + ", the last: " + last
	}
	switch {
	case e.Reason == ErrNotRetryable && e.Attempts <= 1:
		return "llmretry: not retryable: " + last
	case e.Reason == ErrNotRetryable:
		return fmt.Sprintf("llmretry: not retryable, after %d attempts: %s", e.Attempts, last)
	case e.Reason == nil || e.Reason == e.Err:
		return fmt.Sprintf("llmretry: gave up after %d %s: %s", e.Attempts, plural(e.Attempts, "attempt"), last)
	}
	return fmt.Sprintf("llmretry: gave up after %d %s, %s: %s", e.Attempts, plural(e.Attempts, "attempt"), reasonText(e.Reason), last)
}

// routeList renders routes as "0 (primary), 1, 2".
func routeList(routes []int) string {
	var b strings.Builder
	for i, r := range routes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r))
		if r == 0 {
			b.WriteString(" (primary)")
		}
	}
	return b.String()
}

// Unwrap returns the reason and the last attempt's error, so that errors.Is
// and errors.As reach both: errors.Is(err, ErrNoTimeLeft), and the
// underlying network error or *DownError.
func (e *Exhausted) Unwrap() []error {
	switch {
	case e.Reason == nil || e.Reason == e.Err:
		if e.Err == nil {
			return nil
		}
		return []error{e.Err}
	case e.Err == nil:
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// GaveUp returns the record of the call that ended with resp: non-nil when
// a Transport returned resp with a failure status (400 or above), or as a
// 2xx stream that opened with an error event (see Policy.RetryStreams),
// because it sent no further attempt, with the attempts made and the
// Reason. It is nil for nil, for a success, and for a response that did
// not come through llmretry.
//
// The record travels with resp.Request's context, so GaveUp finds it on
// the *http.Response that an SDK keeps in its error after reading the body
// (openai-go's and anthropic-sdk-go's *Error.Response).
func GaveUp(resp *http.Response) *Exhausted {
	if resp == nil || resp.Request == nil {
		return nil
	}
	e, _ := resp.Request.Context().Value(gaveUpKey{}).(*Exhausted)
	return e
}

// gaveUpKey is the context key of the record GaveUp returns.
type gaveUpKey struct{}

// markGaveUp attaches e to resp for GaveUp: resp.Request becomes a shallow
// copy of the request that got resp (out when the base set none), whose
// context carries e.
func markGaveUp(resp *http.Response, out *http.Request, e *Exhausted) {
	r := resp.Request
	if r == nil {
		r = out
	}
	resp.Request = r.WithContext(context.WithValue(r.Context(), gaveUpKey{}, e))
}

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
