package otelretry_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/otelretry"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// overloaded is an in-memory provider: 503 on the first request, then 200.
type overloaded struct{ calls int }

func (o *overloaded) RoundTrip(req *http.Request) (*http.Response, error) {
	o.calls++
	status := http.StatusServiceUnavailable
	if o.calls > 1 {
		status = http.StatusOK
	}
	return &http.Response{
		StatusCode: status,
		Status:     http.StatusText(status),
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader("{}")),
		Request:    req,
	}, nil
}

// A call that fails once and comes through on the retry: two attempt
// spans named by their method under the agent's span, the second a
// resend, the wait between them an event on the agent's span, how the call
// ended on it and in llmretry.calls, and no API key anywhere.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	rt, err := otelretry.New(&overloaded{}, llmretry.Policy{
		Waits: []time.Duration{10 * time.Millisecond},
	}, otelretry.WithTracerProvider(tp), otelretry.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: rt}

	ctx, turn := tp.Tracer("agent").Start(context.Background(), "agent turn")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=SECRET",
		strings.NewReader(`{"contents":[]}`))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // ends the last attempt's span
	turn.End()

	for _, s := range spans.Ended() {
		var shown []attribute.KeyValue
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "url.full", "server.port", "http.response.status_code", "http.request.resend_count",
				"llmretry.outcome", "llmretry.attempts":
				shown = append(shown, kv)
			}
		}
		fmt.Println(strings.TrimSpace(fmt.Sprintf("span %q %s", s.Name(), encode(shown))))
		for _, e := range s.Events() {
			fmt.Printf("  event %s %s\n", e.Name, encode(e.Attributes))
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "llmretry.attempts", "llmretry.calls":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					lines = append(lines, fmt.Sprintf("%s %s: %d", m.Name, encode(dp.Attributes.ToSlice()), dp.Value))
				}
			}
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// span "POST" http.response.status_code=503 server.port=443 url.full=https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=REDACTED
	// span "POST" http.request.resend_count=1 http.response.status_code=200 server.port=443 url.full=https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=REDACTED
	// span "agent turn" llmretry.attempts=2 llmretry.outcome=answered_after_retries
	//   event llmretry.wait llmretry.attempt=1 llmretry.duration=0.01 llmretry.reason=503
	// llmretry.attempts http.response.status_code=200 llmretry.resend=true server.address=generativelanguage.googleapis.com: 1
	// llmretry.attempts http.response.status_code=503 llmretry.resend=false server.address=generativelanguage.googleapis.com: 1
	// llmretry.calls llmretry.outcome=answered_after_retries server.address=generativelanguage.googleapis.com: 1
}

// encode renders attributes as sorted key=value pairs.
func encode(kvs []attribute.KeyValue) string {
	set := attribute.NewSet(kvs...)
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, " ")
}
