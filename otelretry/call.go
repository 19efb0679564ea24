package otelretry

import (
	"context"
	"errors"
	"net/http"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// How a call ended: the values of llmretry.outcome on llmretry.calls, on
// llmretry.call.attempts and on the caller's span.
const (
	outcomeFirstTime    = "answered_first_time"    // one attempt, and it was answered
	outcomeAfterRetries = "answered_after_retries" // answered by a later attempt
	outcomeGaveUp       = "gave_up"                // no answer; llmretry.reason says why
)

// reasonName is the short name of why a call gave up: the snake_case name
// of the llmretry sentinel (llmretry.ErrRetriesSpent is "retries_spent")
// or of the context's error ("canceled", "deadline_exceeded"). Any other
// error, which RoundTrip returns only when it sent nothing (a request
// without a URL, an invalid per-request policy, a body that could not be
// read), is the request's own fault and named "not_retryable", as
// llmretry.ErrNotRetryable is. nil is "".
func reasonName(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "not_retryable"
}

// reasons are the errors reasonName names, in the order it tries them.
var reasons = [...]struct {
	err  error
	name string
}{
	{llmretry.ErrRetriesSpent, "retries_spent"},
	{llmretry.ErrNoTimeLeft, "no_time_left"},
	{llmretry.ErrWaitTooLong, "wait_too_long"},
	{llmretry.ErrProviderRefused, "provider_refused"},
	{llmretry.ErrNotRetryable, "not_retryable"},
	{llmretry.ErrStreamCut, "stream_cut"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// callEnd says how the call that returned (resp, err) ended: its outcome,
// the reason of a give-up, and the attempts it made.
//
// A response is an answer unless llmretry.GaveUp has a record on it: a
// failure status returned because no further attempt was sent, a 400 on
// the first try included (reason not_retryable: the caller got no answer,
// and no retry would have given one). An error is a give-up, with the
// reason and attempts of its *llmretry.Exhausted.
func callEnd(resp *http.Response, err error) (outcome, reason string, attempts int) {
	if err != nil {
		var ex *llmretry.Exhausted
		if errors.As(err, &ex) {
			return outcomeGaveUp, reasonName(ex.Reason), ex.Attempts
		}
		return outcomeGaveUp, reasonName(err), 0
	}
	if resp == nil {
		return outcomeGaveUp, reasonName(llmretry.ErrNotRetryable), 0
	}
	if ex := llmretry.GaveUp(resp); ex != nil {
		return outcomeGaveUp, reasonName(ex.Reason), ex.Attempts
	}
	n := 1
	if resp.Request != nil {
		// The request the base answered carries the attempt's number.
		a, _ := llmretry.AttemptFromContext(resp.Request.Context())
		n = max(1, a.N)
	}
	if resp.StatusCode >= 400 {
		// Not llmretry's answer (GaveUp marks every failure status it
		// returns), so not one it retried: a give-up at once.
		return outcomeGaveUp, reasonName(llmretry.ErrNotRetryable), n
	}
	if n == 1 {
		return outcomeFirstTime, "", 1
	}
	return outcomeAfterRetries, "", n
}

// firstTimeAttrs are the caller's span's attributes for a call answered
// the first time. SetAttributes copies them.
var firstTimeAttrs = []attribute.KeyValue{keyOutcome.String(outcomeFirstTime), keyAttempts.Int(1)}

// recordCall records how the call of req ended: it counts the call by
// outcome (and reason), measures its attempts, and sets both on the
// caller's span (the span in req's context), if it is recording.
func (t *telemetry) recordCall(req *http.Request, resp *http.Response, err error) {
	outcome, reason, n := callEnd(resp, err)
	ctx := req.Context()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		switch {
		case outcome == outcomeFirstTime:
			span.SetAttributes(firstTimeAttrs...) // the usual case: passing them allocates nothing
		case reason != "":
			span.SetAttributes(keyOutcome.String(outcome), keyReason.String(reason), keyAttempts.Int(n))
		default:
			span.SetAttributes(keyOutcome.String(outcome), keyAttempts.Int(n))
		}
	}
	h := host(req)
	t.calls.Add(ctx, 1, t.sets.get(setKey{kind: setCall, host: h, what: outcome, reason: reason}).add...)
	t.callAttempts.Record(ctx, int64(n), t.sets.get(setKey{kind: setCallAttempts, host: h, what: outcome}).rec...)
}
