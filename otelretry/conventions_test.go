package otelretry

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// An attempt span is named by its method as http.request.method records
// it, or "HTTP" when that is _OTHER.
func TestSpanNames(t *testing.T) {
	for method, want := range map[string]string{
		"POST": "POST", "GET": "GET", "PUT": "PUT", "DELETE": "DELETE", "PATCH": "PATCH",
		"HEAD": "HEAD", "OPTIONS": "OPTIONS", "CONNECT": "CONNECT", "TRACE": "TRACE",
		"post": "POST", "PROPFIND": "HTTP", "QUERY": "HTTP", "": "HTTP",
	} {
		assert.Equal(t, want, spanName("", &http.Request{Method: method}), "method %q", method)
	}

	// Through the Transport, beside otelhttp's http.request.method.
	for method, want := range map[string]string{"POST": "POST", "PROPFIND": "HTTP"} {
		r := newRig()
		rt, err := New(newProvider(step{status: 200}), llmretry.Policy{}, r.opts()...)
		require.NoError(t, err)
		req := post(t, t.Context(), chatURL)
		req.Method = method
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		finish(t, resp)
		spans := r.clientSpans()
		require.Len(t, spans, 1)
		assert.Equal(t, want, spans[0].Name())
		m, _ := attr(spans[0].Attributes(), semconv.HTTPRequestMethodKey)
		assert.Equal(t, map[string]string{"POST": "POST", "PROPFIND": "_OTHER"}[method], m.AsString())
	}
}

// server.port is on every attempt span and every http.client.request.duration
// point, the scheme's default port included (otelhttp leaves it out), once.
func TestServerPortAlwaysSet(t *testing.T) {
	for url, want := range map[string]int64{
		"https://api.openai.com/v1/chat/completions":     443,
		"https://api.openai.com:443/v1/chat/completions": 443,
		"http://localhost/v1/chat/completions":           80,
		"https://gateway.internal:8443/v1/chat":          8443,
	} {
		r := newRig()
		rt, err := New(newProvider(step{status: 200}), llmretry.Policy{}, r.opts()...)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(post(t, t.Context(), url))
		require.NoError(t, err)
		finish(t, resp)

		spans := r.clientSpans()
		require.Len(t, spans, 1)
		n := 0
		for _, kv := range spans[0].Attributes() {
			if kv.Key == semconv.ServerPortKey {
				n++
				assert.Equal(t, want, kv.Value.AsInt64(), url)
			}
		}
		assert.Equal(t, 1, n, "one server.port on the span of %s", url)

		d := findMetric(t, r.collect(t), "http.client.request.duration").Data.(metricdata.Histogram[float64])
		require.Len(t, d.DataPoints, 1)
		p, ok := d.DataPoints[0].Attributes.Value(semconv.ServerPortKey)
		assert.True(t, ok, "server.port on the duration metric for %s", url)
		assert.Equal(t, want, p.AsInt64(), url)
	}
}

// A failure status puts error.type on http.client.request.duration, the
// status code as on the span; a success puts none; a failed connection has
// the one otelhttp records.
func TestErrorTypeOnDurationMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 502}, step{err: &opError{}}, step{status: 200})
		rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}}, r.opts()...)
		require.NoError(t, err)
		r.callInTurn(t, rt)

		spans := r.clientSpans()
		require.Len(t, spans, 3)
		spanType, ok := attr(spans[0].Attributes(), semconv.ErrorTypeKey)
		require.True(t, ok)
		assert.Equal(t, "502", spanType.AsString())

		byStatus := map[int64]string{}
		d := findMetric(t, r.collect(t), "http.client.request.duration").Data.(metricdata.Histogram[float64])
		require.Len(t, d.DataPoints, 3)
		for _, dp := range d.DataPoints {
			status, _ := dp.Attributes.Value(semconv.HTTPResponseStatusCodeKey)
			et, _ := dp.Attributes.Value(semconv.ErrorTypeKey)
			byStatus[status.AsInt64()] = et.AsString()
		}
		assert.Equal(t, map[int64]string{
			502: spanType.AsString(),                              // as on the span
			0:   "github.com/llmretry/llmretry/otelretry.opError", // otelhttp's own
			200: "",
		}, byStatus)
	})
}

// Every attribute this package names follows OpenTelemetry's naming
// rules: lowercase snake_case words in dot-separated namespaces, under
// llmretry, and no name is also a namespace of another (so no
// llmretry.continued beside llmretry.continued.from).
func TestAttributeNames(t *testing.T) {
	keys := []attribute.Key{keyReason, keyDuration, keyAttempt, keyOutcome, keyKey, keyResend, keyProbe,
		keyRoute, keyAttempts, keyContinued, keyContinuedFrom, keyEvent}
	word := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	names := map[string]bool{}
	for _, k := range keys {
		name := string(k)
		assert.Falsef(t, names[name], "%s named twice", name)
		names[name] = true
		parts := strings.Split(name, ".")
		assert.Equal(t, "llmretry", parts[0], name)
		for _, w := range parts {
			assert.Regexp(t, word, w, name)
		}
	}
	for a := range names {
		for b := range names {
			assert.Falsef(t, strings.HasPrefix(b, a+"."), "%s is an attribute and a namespace of %s", a, b)
		}
	}
}
