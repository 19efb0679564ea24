// Package otelretry traces and measures an llmretry Transport with
// OpenTelemetry: one CLIENT span per attempt, the waits and coordinated
// holds between attempts as events on the caller's span, and counters and
// histograms of attempts, waits and holds.
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
// New and NewCoordinated return the *llmretry.Transport that llmretry.New
// and llmretry.NewCoordinated would, with the same policy, built as three
// layers:
//
//	llmretry  → otelhttp  → base
//	(retries)   (a span per attempt)
//
// otelhttp (go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp)
// sits below llmretry, so that each physical attempt is its own span, as
// OpenTelemetry's HTTP conventions ask, rather than one span hiding the
// resends. A small layer between otelhttp and base completes each span.
//
// # Spans
//
// Each attempt is a CLIENT span made by otelhttp, a child of the span in
// the request's context (the caller's). On top of what otelhttp records:
//
//   - The second attempt and later carry http.request.resend_count 1, 2,
//     …; the first carries none. It is read from
//     llmretry.AttemptFromContext.
//   - url.full is the URL as scheme://host/path: no query (Gemini's key=
//     travels there), no user information, no fragment. It replaces the
//     full URL otelhttp records, before the span ends and is exported.
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
// On a Transport made by NewCoordinated, each hold (see
// llmretry.Coordination) is an event "llmretry.hold", added when the hold
// ends and stamped when it began, with llmretry.reason (Hold.Reason:
// "provider down", "server wait", "retry budget spent"), llmretry.duration
// (how long it lasted, in seconds), llmretry.outcome (Hold.Outcome: "sent
// as the probe", "released", "gave up", "canceled"), llmretry.key (the
// provider key's name: host and credential hash, never the credential) and
// llmretry.attempt (Hold.N, the number of the attempt it delayed). An
// attempt whose retry is held (Attempt.Held) adds no wait event: its hold
// is the wait.
//
// # Metrics
//
// Besides otelhttp's own (http.client.request.duration and the body
// sizes), on the meter "github.com/llmretry/llmretry/otelretry":
//
//	llmretry.attempts        counter, one per attempt sent; attributes
//	                         server.address, http.response.status_code or
//	                         error.type, and llmretry.resend (false for
//	                         the first try, true for a resend)
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
// The policy's own OnAttempt and OnHold still run: each is called after
// this package has recorded the attempt or hold, so a slow or panicking
// hook neither delays the event's timestamp nor loses it.
//
// A request that carries its own policy (llmretry.WithPolicy) runs that
// policy's hooks instead of the Transport's: its attempts are still spans,
// resend counts and llmretry.attempts, but its waits and holds are not
// recorded.
//
// # Providers and concurrency
//
// Spans are made with the TracerProvider of WithTracerProvider, metrics
// recorded with the MeterProvider of WithMeterProvider, each by default
// the global one as it is when the Transport is made. Trace context is injected into each attempt's headers
// with the global propagator (otel.SetTextMapPropagator), as otelhttp does.
// The Transport is safe for concurrent use, like any llmretry Transport;
// this package starts no goroutine.
package otelretry
