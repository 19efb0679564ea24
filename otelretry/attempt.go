package otelretry

import (
	"net/http"

	"github.com/llmretry/llmretry"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// attemptTransport is the layer between otelhttp and base. The request it
// gets carries the attempt's span (otelhttp's) and the attempt's number
// (llmretry's), so it is where the span learns what otelhttp cannot know:
// that it is a resend, and the URL without its query. It also counts the
// attempt. It is safe for concurrent use.
type attemptTransport struct {
	base http.RoundTripper
	tel  *telemetry
}

// RoundTrip sets the attempt span's http.request.resend_count (for the
// second attempt and later) and a redacted url.full, sends req through
// base, and counts the attempt. An error whose text quotes a credential of
// req is returned with that text redacted (see redactedError).
func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	n := llmretry.AttemptFromContext(ctx)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		// otelhttp has set url.full from the whole URL, query included;
		// the later value wins (the span has not been exported yet).
		span.SetAttributes(semconv.URLFull(redactURL(req.URL)))
		if n > 1 {
			span.SetAttributes(semconv.HTTPRequestResendCount(n - 1))
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		err = redactError(err, req)
	}
	_, result := outcome(resp, err)
	t.tel.attempts.Add(ctx, 1, metric.WithAttributes(serverAddress(req), result, keyResend.Bool(n > 1)))
	return resp, err
}
