package otelretry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Names of the events, instruments and attributes this package records
// (see the package documentation).
const (
	eventWait = "llmretry.wait"
	eventHold = "llmretry.hold"

	metricAttempts     = "llmretry.attempts"
	metricWaitDuration = "llmretry.wait.duration"
	metricHolds        = "llmretry.holds"
	metricHoldDuration = "llmretry.hold.duration"

	keyReason   = attribute.Key("llmretry.reason")
	keyDuration = attribute.Key("llmretry.duration")
	keyAttempt  = attribute.Key("llmretry.attempt")
	keyOutcome  = attribute.Key("llmretry.outcome")
	keyKey      = attribute.Key("llmretry.key")
	keyResend   = attribute.Key("llmretry.resend")
)

// waitBuckets are the histogram boundaries for waits and holds, in
// seconds: from the sub-second waits of a jittered backoff to the
// five-minute server waits llmretry honours by default.
var waitBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 120, 180, 240, 300, 600}

// telemetry holds one Transport's instruments. Instruments are safe for
// concurrent use, and so is telemetry.
type telemetry struct {
	attempts     metric.Int64Counter
	waits        metric.Float64Histogram
	holds        metric.Int64Counter
	holdDuration metric.Float64Histogram
}

// newTelemetry creates the instruments on m.
func newTelemetry(m metric.Meter) (*telemetry, error) {
	var t telemetry
	var err error
	if t.attempts, err = m.Int64Counter(metricAttempts,
		metric.WithDescription("Attempts sent by llmretry: the first try and every resend."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricAttempts, err)
	}
	if t.waits, err = m.Float64Histogram(metricWaitDuration,
		metric.WithDescription("Waits llmretry chose before a retry, on the call's own schedule or the server's."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricWaitDuration, err)
	}
	if t.holds, err = m.Int64Counter(metricHolds,
		metric.WithDescription("Coordinated holds that ended, by outcome."),
		metric.WithUnit("{hold}")); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricHolds, err)
	}
	if t.holdDuration, err = m.Float64Histogram(metricHoldDuration,
		metric.WithDescription("How long coordinated holds lasted, by outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, fmt.Errorf("otelretry: creating %s: %w", metricHoldDuration, err)
	}
	return &t, nil
}

// onAttempt returns a Policy.OnAttempt that records a's wait, if any, and
// then calls user (if not nil).
//
// Ours runs first: it is quick and never blocks, so the event is stamped
// when the attempt ended even if user is slow, and it is recorded even if
// user panics.
func (t *telemetry) onAttempt(user func(llmretry.Attempt)) func(llmretry.Attempt) {
	return func(a llmretry.Attempt) {
		t.recordWait(a)
		if user != nil {
			user(a)
		}
	}
}

// onHold returns a Policy.OnHold that records h once it has ended, and
// then calls user (if not nil), for the same reasons as onAttempt.
func (t *telemetry) onHold(user func(llmretry.Hold)) func(llmretry.Hold) {
	return func(h llmretry.Hold) {
		if h.Outcome != llmretry.HoldWaiting {
			t.recordHold(h)
		}
		if user != nil {
			user(h)
		}
	}
}

// recordWait adds a wait event to the caller's span and the wait to the
// histogram, if a wait follows a. An attempt whose retry is Held waits in
// a hold instead, which recordHold records.
func (t *telemetry) recordWait(a llmretry.Attempt) {
	if a.RetryIn <= 0 || a.Held || a.Request == nil {
		return
	}
	ctx := a.Request.Context()
	reason, result := outcome(a.Response, a.Err)
	secs := a.RetryIn.Seconds()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventWait, trace.WithAttributes(
			keyReason.String(reason),
			keyDuration.Float64(secs),
			keyAttempt.Int(a.N),
		))
	}
	t.waits.Record(ctx, secs, metric.WithAttributes(serverAddress(a.Request), result))
}

// recordHold adds a hold event to the caller's span, stamped when the hold
// began (so that, like a wait's, it marks the start of the pause), and
// counts the hold and its duration.
func (t *telemetry) recordHold(h llmretry.Hold) {
	ctx := context.Background()
	if h.Request != nil {
		ctx = h.Request.Context()
	}
	secs := h.End.Sub(h.Start).Seconds()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventHold, trace.WithTimestamp(h.Start), trace.WithAttributes(
			keyReason.String(h.Reason.String()),
			keyDuration.Float64(secs),
			keyOutcome.String(h.Outcome.String()),
			keyKey.String(h.Key),
			keyAttempt.Int(h.N),
		))
	}
	attrs := metric.WithAttributes(
		serverAddress(h.Request),
		keyOutcome.String(h.Outcome.String()),
		keyReason.String(h.Reason.String()),
	)
	t.holds.Add(ctx, 1, attrs)
	t.holdDuration.Record(ctx, secs, attrs)
}

// outcome names an attempt's result: the reason text for an event (the
// status code, or the error's type) and the matching attribute,
// http.response.status_code or error.type.
func outcome(resp *http.Response, err error) (string, attribute.KeyValue) {
	if err != nil || resp == nil {
		et := semconv.ErrorType(err)
		return et.Value.AsString(), et
	}
	return strconv.Itoa(resp.StatusCode), semconv.HTTPResponseStatusCode(resp.StatusCode)
}

// serverAddress is the server.address attribute of req: its URL's host
// without the port.
func serverAddress(req *http.Request) attribute.KeyValue {
	if req == nil || req.URL == nil {
		return semconv.ServerAddress("")
	}
	return semconv.ServerAddress(req.URL.Hostname())
}
