// Package otelretry traces and measures an llmretry Transport with
// OpenTelemetry: one CLIENT span per attempt, to the letter of the HTTP
// semantic conventions; the waits and coordinated holds between attempts
// as events on the caller's span; how each call ended on that span and in
// a metric; and counters and histograms of attempts, waits and holds.
//
//	rt, err := otelretry.New(nil, llmretry.Policy{
//		Waits:   []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute},
//		Reserve: time.Minute,
//	}, otelretry.WithTracerProvider(tp), otelretry.WithMeterProvider(mp))
//	if err != nil {
//		return err
//	}
//	client := &http.Client{Transport: rt}
//
// New and NewCoordinated return a *Transport over the *llmretry.Transport
// that llmretry.New and llmretry.NewCoordinated would make, with the same
// policy, built as four layers:
//
//	call record  → llmretry  → otelhttp  → base
//	(how it ended) (retries)   (a span per attempt)
//
// otelhttp (go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp)
// sits below llmretry, so that each physical attempt is its own span, as
// OpenTelemetry's HTTP conventions ask, rather than one span hiding the
// resends. A small layer between otelhttp and base completes each span;
// the layer above llmretry, the only one that sees every way a call ends,
// records the call.
//
// # Spans
//
// Each attempt is a CLIENT span made by otelhttp, a child of the span in
// the request's context (the caller's). Where otelhttp departs from the
// HTTP conventions, this package corrects it:
//
//   - The span is named by the method ("POST"), or "HTTP" for a method
//     that http.request.method records as _OTHER, not "HTTP POST".
//   - server.port is always set: otelhttp leaves it out when it is the
//     scheme's default (443 for https, 80 for http), that is, for every
//     real provider's URL. It is added to the span and to
//     http.client.request.duration (through otelhttp's Labeler).
//   - A failure status (400 and above) puts error.type, the status code
//     as on the span ("502"), on http.client.request.duration too; otelhttp
//     puts it there only for an error. For an error otelhttp spells the two
//     differently (the span's "*url.Error", the metric's "net/url.Error",
//     both from otelhttp), and its own value on the metric wins over any
//     other.
//   - url.full is redacted as the conventions' SHOULD asks: user
//     information becomes REDACTED:REDACTED, and the value of each query
//     parameter whose name marks a credential (one of its words, in any
//     case, is key, sig or auth, or ends in token, secret, password,
//     signature or credential: the rule llmretry.Redact blanks by;
//     Gemini's key=, Azure's sig= and subscription-key=, AWS's
//     X-Amz-Signature=, the conventions' AWSAccessKeyId= and
//     X-Goog-Signature=) becomes REDACTED, names and other parameters kept
//     (…?key=REDACTED&alt=sse; a parameter ends at '&' or ';', as in the
//     texts llmretry.Redact blanks). The fragment, never sent and where
//     OAuth's implicit flow puts tokens, is dropped. The value replaces
//     otelhttp's, before the span ends and is exported, only when there is
//     something to redact.
//
// And on top of what otelhttp records:
//
//   - The second attempt and later carry http.request.resend_count 1, 2,
//     …; the first carries none. It is read from
//     llmretry.AttemptFromContext.
//   - An attempt sent as its provider key's probe (NewCoordinated) carries
//     llmretry.probe=true on its span and on its llmretry.attempts point,
//     read from llmretry.AttemptFromContext as it is sent, whatever its
//     result.
//   - An attempt sent on a fallback route (llmretry.Policy.Fallback)
//     carries llmretry.route=k (its Fallback[k-1]) on its span and on its
//     llmretry.attempts point, read from llmretry.AttemptFromContext; an
//     attempt on the primary carries none. Its span's server.address and
//     url.full are the fallback's.
//   - An attempt that continues a stream the caller was reading, which
//     broke (llmretry.Policy.ContinueStreams), carries
//     llmretry.continued.strategy (Attempt.Continued: "resume", "prefill"
//     or "regenerate") on its span and on its llmretry.attempts point, and
//     llmretry.continued.from (Attempt.From: the bytes of the answer's
//     text the caller had when the stream broke) on its span only: an
//     offset on a metric would make a point per stream. Both are read
//     from llmretry.AttemptFromContext as it is sent.
//   - An attempt whose 2xx stream opened with an error event in place of
//     the answer (llmretry.Policy.RetryStreams) carries llmretry.event,
//     the provider's word for it (Attempt.Event: "overloaded_error",
//     "server_error", "UNAVAILABLE" …; never its message), on its span
//     and on its llmretry.attempts point, beside its status (200). It is
//     known once llmretry has read the stream's opening, after the
//     response came back: a 2xx text/event-stream attempt is therefore
//     counted when its record reaches the policy's OnAttempt, or, for a
//     request with a policy of its own (which records no event), when its
//     body ends or is closed.
//   - A base error whose text quotes a credential of the request (its
//     query, user information, the value of Authorization, x-api-key,
//     api-key, x-goog-api-key, Proxy-Authorization or Cookie, or a key=,
//     token=, sig=, … value) is passed up with those blanked, so neither
//     the span's status nor llmretry's records carry them: a *url.Error
//     stays a *url.Error, any other error is wrapped, and errors.Is and
//     errors.As still find the original. No header value is recorded.
//
// otelhttp ends an attempt's span when its response body is closed or
// read to the end: llmretry closes every body it discards, and the caller
// must close the last one, as with any http.Client.
//
// # Events on the caller's span
//
// The wait before a retry is an event "llmretry.wait" on the caller's span
// (the span in the request's context above llmretry), added when the
// attempt ends, with the attributes
//
//	llmretry.reason    why: the failed attempt's status code ("503"), or
//	                   its error's type (as error.type names it)
//	llmretry.duration  the wait llmretry chose, in seconds (a call canceled
//	                   during it waits less)
//	llmretry.attempt   the number of the failed attempt: 1 for the first try
//
// On a Transport made by NewCoordinated, each hold (see package
// coordination) is an event "llmretry.hold", added when the hold
// ends and stamped when it began, with llmretry.reason (Hold.Reason:
// "provider down", "server wait", "retry budget spent", "paced under a
// rate limit", "at the limit on calls in flight"), llmretry.duration
// (how long it lasted, in seconds), llmretry.outcome (Hold.Outcome: "sent
// as the probe", "released", "gave up", "canceled"), llmretry.key (the
// provider key's name: host and credential hash, never the credential) and
// llmretry.attempt (Hold.N, the number of the attempt it delayed). An
// attempt whose retry is held (Attempt.Held) adds no wait event: its hold
// is the wait.
//
// A call that moves to another route (llmretry.Policy.Fallback and
// LongContext) adds an event "llmretry.move" when the attempt it moves
// after ends, with llmretry.reason (Attempt.Moved: "provider down",
// "waiting cannot win", "FallbackAfter", "context too long", "credential
// refused"), llmretry.attempt (that attempt's number) and llmretry.route
// (the route it took: 0 the primary); the next attempt's span carries the
// route it moved to. A move to a fallback bills another account or model:
// this event, with llmretry.route on the attempts, is where to see it. A
// continuation's prefill that its route refused adds the event too, with
// llmretry.reason "prefill refused, regenerating": the call stays on the
// route and regenerates the answer (see llmretry.Policy.ContinueStreams).
//
// # How each call ended
//
// Each call through the Transport ends one of three ways, its
// llmretry.outcome:
//
//	answered_first_time     one attempt, answered (a status below 400)
//	answered_after_retries  answered by a later attempt
//	gave_up                 no answer came back; llmretry.reason says why
//
// llmretry.reason is the short name of the *llmretry.Exhausted's Reason
// (on the error, or on the response through llmretry.GaveUp):
// retries_spent, no_time_left, wait_too_long, provider_refused,
// not_retryable, stream_cut, or the context's canceled or
// deadline_exceeded. A 4xx
// returned without a retry (a 400, say) is gave_up with not_retryable:
// the caller got no answer, and no retry would have given one. A call
// that RoundTrip refuses before sending anything (no URL, an invalid
// per-request policy) is gave_up, not_retryable, after 0 attempts, as is a
// coordinated call held until it could wait no longer (no_time_left).
//
// A call ends when RoundTrip returns. A stream the caller then reads may
// still break (llmretry.ErrStreamCut): its continuations are attempts,
// with their spans and llmretry.attempts points (llmretry.continued.*
// above), and a cut that is not continued, or whose continuation fails,
// is the error of the caller's Read, an *llmretry.Exhausted whose Reason
// is ErrStreamCut. The call stays counted as it ended at RoundTrip
// (answered): stream_cut is the reason of a call only when the error
// RoundTrip itself returns carries ErrStreamCut.
//
// The caller's span (the one in the request's context) gets
// llmretry.outcome, llmretry.reason (for a give-up) and llmretry.attempts
// (the attempts sent) when the call ends; a span that holds several calls
// keeps the last one's. A request that another llmretry Transport is
// already retrying (under which this one passes attempts through) is not
// a call of its own.
//
// # Metrics
//
// Besides otelhttp's own (http.client.request.duration and the body
// sizes), on the meter "github.com/llmretry/llmretry/otelretry":
//
//	llmretry.calls           counter, one per call when it ends;
//	                         attributes server.address, llmretry.outcome
//	                         and, for gave_up, llmretry.reason
//	llmretry.call.attempts   histogram of the attempts each call sent;
//	                         attributes server.address, llmretry.outcome
//	llmretry.attempts        counter, one per attempt sent; attributes
//	                         server.address, http.response.status_code or
//	                         error.type, and llmretry.resend (false for
//	                         the first try, true for a resend); and, when
//	                         they apply, llmretry.probe, llmretry.route,
//	                         llmretry.continued.strategy and
//	                         llmretry.event (see Spans)
//	llmretry.wait.duration   histogram (s) of the waits above; attributes
//	                         server.address and the failed attempt's
//	                         http.response.status_code or error.type
//	llmretry.holds           counter (NewCoordinated), one per hold when it
//	                         ends; attributes server.address,
//	                         llmretry.outcome and llmretry.reason
//	llmretry.hold.duration   histogram (s) of those holds, same attributes
//
// # Hooks and per-request policies
//
// The policy's own OnAttempt and the coordination.Config's OnHold still
// run: each is called after this package has recorded the attempt or
// hold, so a slow or panicking hook neither delays the event's timestamp
// nor loses it.
//
// A request that carries its own policy (llmretry.WithPolicy) runs that
// policy's hooks instead of the Transport's: its attempts are still spans,
// resend counts and llmretry.attempts, and the call is still counted in
// llmretry.calls (a probe is marked, llmretry.probe, as it is read from
// the attempt itself), but its waits are not recorded: they are read from
// the Transport's policy's OnAttempt. Its holds are: OnHold belongs to the
// Transport's coordination.Config, not to a policy.
//
// # Cost
//
// A request that works the first time costs 3 allocations more than
// through otelhttp alone (4 inside a caller's span, which gets the
// outcome, into its own attribute storage): llmretry's own 2 (the marked
// context and the request copy that carries it), the attempt ID llmretry
// makes for OnAttempt, and 2 for otelhttp's Labeler, which carries
// server.port to the duration metric; less 2 that otelhttp makes on its
// own (its "HTTP POST" span name, and a copy of its metric attributes that
// the Labeler's slice spares). The usual attribute sets are made once per
// Transport and kept (at most 1,024), and no attribute is built for a span
// that is not recording. See docs/performance.md. An attempt answered with
// a 2xx stream (text/event-stream) costs 4 allocations more, which keep
// its count until its record says whether the stream opened with an
// error event.
//
// # Providers and concurrency
//
// Spans are made with the TracerProvider of WithTracerProvider, metrics
// recorded with the MeterProvider of WithMeterProvider, each by default
// the global one as it is when the Transport is made. Trace context is
// injected into each attempt's headers with the global propagator
// (otel.SetTextMapPropagator), as otelhttp does. The Transport is safe for
// concurrent use, like any llmretry Transport; this package starts no
// goroutine.
package otelretry
