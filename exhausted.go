package llmretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// Exhausted is the record of a call that sent no further attempt: the
// question put to Policy.OnExhausted, the error RoundTrip returns when the last
// attempt got no response or the caller's context ended during a wait (Do
// returns it whenever its last attempt failed), and, through GaveUp, the
// record of a failed response RoundTrip returns.
//
// When the last attempt did get a response, RoundTrip returns that response
// with a nil error instead, as a plain http.RoundTripper would; GaveUp finds
// this record on it, and OnExhausted sees the response here, in Response.
type Exhausted struct {
	// Request is the caller's request (nil for Do).
	Request *http.Request
	// Attempts is the number of attempts made, across all rounds.
	Attempts int
	// Reason says why no further attempt was sent: one of ErrRetriesSpent,
	// ErrNoTimeLeft, ErrWaitTooLong, ErrProviderRefused and
	// ErrNotRetryable, or the context's error when the caller's context
	// ended; ErrStreamCut for the error a committed stream's read fails
	// with (Err then says how it broke and why it was not continued).
	// OnExhausted is shown ErrRetriesSpent.
	Reason error
	// Response is the last attempt's response, or nil. Its body belongs to
	// the caller of RoundTrip; OnExhausted must not read or close it.
	Response *http.Response
	// Err is the last attempt's error, or nil; the context's error when
	// the caller's context ended during a wait. It also carries the error
	// of a Route the call passed over (see Policy.Fallback), joined,
	// even when the last attempt got a response.
	Err error
	// Routes are the routes the call's attempts took, each once, in the
	// order first taken: 0 the primary, k the policy's Fallback[k-1],
	// len(Fallback)+k its LongContext[k-1] (see Policy.Fallback and
	// Policy.LongContext). Nil when the policy has neither.
	Routes []int
	// Event is the provider's error event (its type: "overloaded_error")
	// the last attempt's 2xx stream opened with, which failed it (see
	// Attempt.Event); empty when it opened with none.
	Event string
	// Continued is how many of the Attempts continued a stream that broke
	// after the caller had bytes of it (see Policy.ContinueStreams).
	Continued int

	// sent is the request the last attempt sent, when it is not Request
	// (a route's, with credentials of its own): Error redacts both.
	sent *http.Request
}

// redact renders err without the credentials its text may carry: the
// caller's request's, and those of the request the last attempt sent.
func (e *Exhausted) redact(err error) string {
	s := redactErr(err, e.Request)
	if e.sent != nil && e.sent != e.Request {
		s = Redact(s, e.sent)
	}
	return s
}

// Error says why the call stopped, after how many attempts, and how the
// last one ended. It names neither the method nor the URL (net/http's
// *url.Error, which wraps it for an http.Client's caller, already does) and
// never includes a header or a credential-like query value.
func (e *Exhausted) Error() string {
	last := "no result"
	switch {
	case e.Response != nil && e.Err != nil:
		last = e.Response.Status + " (" + e.redact(e.Err) + ")"
	case e.Err != nil:
		last = e.redact(e.Err)
	case e.Response != nil:
		last = e.Response.Status
	}
	if e.Event != "" {
		last += " (stream error " + e.Event + ")"
	}
	if e.Continued > 0 {
		last = fmt.Sprintf("%s (%d of the attempts continued the stream)", last, e.Continued)
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
// underlying network error or *coordination.HeldError.
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

// GaveUp returns the record of the call behind v, whatever the caller
// holds of it, or nil when no llmretry call gave up there:
//
//   - an error: the *Exhausted RoundTrip returned (when no response came,
//     or the caller's context ended during a wait), found through any
//     wrapping (an http.Client's *url.Error, an SDK's error); or an SDK's
//     error that carries the failure response a Transport returned in a
//     field named Response of type *http.Response (openai-go's and
//     anthropic-sdk-go's *Error), read as that response;
//   - an *http.Response: the record of a response a Transport returned
//     with a failure status (400 or above), or as a 2xx stream that opened
//     with an error event (see Policy.RetryStreams), because it sent no
//     further attempt.
//
// The record says why the call stopped (Reason: one of the stop
// sentinels, or the context's error), after how many attempts, and on
// which routes. GaveUp returns nil for nil, for a success, for a value of
// another type, and for a response or error that did not come through
// llmretry. It is safe for concurrent use.
//
// A response's record travels with resp.Request's context, so GaveUp finds
// it on the *http.Response an SDK keeps in its error after reading the
// body.
func GaveUp(v any) *Exhausted {
	switch v := v.(type) {
	case *http.Response:
		return recordOf(v)
	case error:
		var e *Exhausted
		if errors.As(v, &e) {
			return e
		}
		return recordOf(carriedResponse(v))
	}
	return nil
}

// recordOf returns the record a Transport attached to resp (see
// markGaveUp), or nil.
func recordOf(resp *http.Response) *Exhausted {
	if resp == nil || resp.Request == nil {
		return nil
	}
	e, _ := resp.Request.Context().Value(gaveUpKey{}).(*Exhausted)
	return e
}

// responseType is the type of the field carriedResponse reads.
var responseType = reflect.TypeFor[*http.Response]()

// carriedResponse returns the response an error in err's chain carries in
// an exported field named Response of type *http.Response, as the
// Stainless SDKs' *Error do, or nil. It looks at each error of the chain
// (both Unwrap forms), depth first.
func carriedResponse(err error) *http.Response {
	if err == nil {
		return nil
	}
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		// Looked up by type first: a field promoted through a nil embedded
		// pointer cannot be read (Value.FieldByName would panic), and is
		// no response.
		if sf, ok := v.Type().FieldByName("Response"); ok && sf.Type == responseType {
			if f, err := v.FieldByIndexErr(sf.Index); err == nil && f.CanInterface() {
				if resp := f.Interface().(*http.Response); resp != nil {
					return resp
				}
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return carriedResponse(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if resp := carriedResponse(e); resp != nil {
				return resp
			}
		}
	}
	return nil
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

// plural returns word with an "s" unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
