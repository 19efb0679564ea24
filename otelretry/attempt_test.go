package otelretry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Three attempts (503, 503, 200) are three CLIENT spans, children of the
// caller's span, with resend counts absent, 1 and 2; the two waits are
// events on the caller's span; the discarded bodies' spans end when
// llmretry closes them, the last when the caller does.
func TestEachAttemptIsAClientSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 503}, step{status: 200})
		var seen []llmretry.Attempt
		rt, err := New(p, llmretry.Policy{
			Waits: []time.Duration{time.Second, time.Second},
			OnAttempt: func(a llmretry.Attempt) {
				// The user's hook runs after ours: the wait is already on the span.
				if a.RetryIn > 0 {
					caller := trace.SpanFromContext(a.Request.Context()).(sdktrace.ReadOnlySpan)
					assert.Len(t, events(caller, eventWait), a.N, "wait event recorded before the user's OnAttempt")
				}
				seen = append(seen, a)
			},
		}, r.opts()...)
		require.NoError(t, err)

		ctx, turn := r.turn(t.Context())
		resp, err := rt.RoundTrip(post(t, ctx, chatURL))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)

		require.Len(t, r.spans.Started(), 4, "the caller's span and three attempts")
		require.Len(t, r.clientSpans(), 2, "the two discarded attempts' spans ended with their bodies")
		for i, b := range p.bodies[:2] {
			assert.Truef(t, b.closed.Load(), "discarded body %d closed", i+1)
		}
		finish(t, resp)
		turn.End()
		r.requireAllEnded(t)

		spans := r.clientSpans()
		require.Len(t, spans, 3)
		caller := turn.SpanContext()
		for i, s := range spans {
			assert.Equal(t, trace.SpanKindClient, s.SpanKind())
			assert.Equal(t, "POST", s.Name(), "the span is named by the method alone")
			assert.Equal(t, caller.TraceID(), s.SpanContext().TraceID())
			assert.Equalf(t, caller.SpanID(), s.Parent().SpanID(), "attempt %d is a child of the caller's span", i+1)
			rc, ok := attr(s.Attributes(), semconv.HTTPRequestResendCountKey)
			if i == 0 {
				assert.False(t, ok, "the first attempt has no resend count")
			} else {
				require.Truef(t, ok, "attempt %d has a resend count", i+1)
				assert.Equal(t, int64(i), rc.AsInt64())
			}
			u, _ := attr(s.Attributes(), semconv.URLFullKey)
			assert.Equal(t, chatURL, u.AsString())
			status, _ := attr(s.Attributes(), semconv.HTTPResponseStatusCodeKey)
			assert.Equal(t, []int64{503, 503, 200}[i], status.AsInt64())
		}
		assert.Equal(t, time.Second, spans[1].StartTime().Sub(spans[0].StartTime()), "the first wait")
		assert.Equal(t, time.Second, spans[2].StartTime().Sub(spans[1].StartTime()), "the second wait")

		turnSpan := r.spans.Ended()[len(r.spans.Ended())-1]
		require.Equal(t, "turn", turnSpan.Name())
		waits := events(turnSpan, eventWait)
		require.Len(t, waits, 2)
		for i, e := range waits {
			assert.Equal(t, map[attribute.Key]any{
				keyReason:   "503",
				keyDuration: 1.0,
				keyAttempt:  int64(i + 1),
			}, eventAttrs(e))
			assert.Equal(t, spans[i].EndTime(), e.Time, "the wait begins when the attempt ends")
		}
		assert.Len(t, turnSpan.Events(), 2, "no other event")

		require.Len(t, seen, 3, "the user's OnAttempt still runs")
		for i, a := range seen {
			assert.Equal(t, i+1, a.N)
		}
		assert.Equal(t, []time.Duration{time.Second, time.Second, 0}, []time.Duration{seen[0].RetryIn, seen[1].RetryIn, seen[2].RetryIn})
	})
}

// A first-try success is one span, without a resend count, and no event.
func TestFirstTrySuccess(t *testing.T) {
	r := newRig()
	p := newProvider(step{status: 200})
	rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second}})

	turn := r.callInTurn(t, rt)

	spans := r.clientSpans()
	require.Len(t, spans, 1)
	assert.Equal(t, turn.SpanContext().SpanID(), spans[0].Parent().SpanID())
	_, ok := attr(spans[0].Attributes(), semconv.HTTPRequestResendCountKey)
	assert.False(t, ok, "no resend count on a first try")
	for _, s := range r.spans.Ended() {
		assert.Emptyf(t, s.Events(), "span %q has no event", s.Name())
	}
	assert.Equal(t, map[string]int64{
		"http.response.status_code=200 llmretry.resend=false server.address=api.example.com": 1,
	}, counts(t, findMetric(t, r.collect(t), metricAttempts)))
}

// An attempt on a fallback route carries llmretry.route on its span and on
// its llmretry.attempts point; an attempt on the primary carries none.
func TestRouteAttribute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 503}, step{status: 200})
		route, err := llmretry.RouteTo("https://api.example.com/v1", "https://fallback.example.com/v1", http.Header{"Authorization": {"Bearer fb"}})
		require.NoError(t, err)
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}, Fallback: []llmretry.Route{route}})

		turn := r.callInTurn(t, rt)

		spans := r.clientSpans()
		require.Len(t, spans, 3, "a blip on the primary, the primary again, then the fallback")
		_, ok := attr(spans[1].Attributes(), keyRoute)
		assert.False(t, ok, "none on the primary")
		v, ok := attr(spans[2].Attributes(), keyRoute)
		assert.True(t, ok)
		assert.Equal(t, int64(1), v.AsInt64())
		addr, _ := attr(spans[2].Attributes(), semconv.ServerAddressKey)
		assert.Equal(t, "fallback.example.com", addr.AsString())
		assert.Equal(t, map[string]int64{
			"http.response.status_code=503 llmretry.resend=false server.address=api.example.com":                      1,
			"http.response.status_code=503 llmretry.resend=true server.address=api.example.com":                       1,
			"http.response.status_code=200 llmretry.resend=true llmretry.route=1 server.address=fallback.example.com": 1,
		}, counts(t, findMetric(t, r.collect(t), metricAttempts)))

		// Why the call moved, on the caller's span.
		ro, ok := turn.(sdktrace.ReadOnlySpan)
		require.True(t, ok)
		moves := events(ro, eventMove)
		require.Len(t, moves, 1)
		assert.Equal(t, map[attribute.Key]any{keyReason: "provider down", keyAttempt: int64(2), keyRoute: int64(0)}, eventAttrs(moves[0]))
	})
}

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
		rt := r.transport(t, newProvider(step{status: 200}), llmretry.Policy{})
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
		rt := r.transport(t, newProvider(step{status: 200}), llmretry.Policy{})
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
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}})
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

// url.full is redacted as the HTTP conventions ask: user information
// becomes REDACTED:REDACTED, credential query values REDACTED with their
// names and the other parameters kept, the fragment goes; a URL with
// nothing to redact is left to otelhttp (ok false).
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@host:8443/v1/models/g:generateContent?key=K&alt=sse#frag": "https://REDACTED:REDACTED@host:8443/v1/models/g:generateContent?key=REDACTED&alt=sse",
		"https://u@host/v1": "https://REDACTED:REDACTED@host/v1",
		"https://host/a%2Fb?api-version=2024-06-01&subscription-key=S":                    "https://host/a%2Fb?api-version=2024-06-01&subscription-key=REDACTED",
		"https://b.s3.amazonaws.com/o?X-Amz-Credential=C&X-Amz-Signature=S&x-id=Get":      "https://b.s3.amazonaws.com/o?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&x-id=Get",
		"https://acct.blob.core.windows.net/c?sv=2022&sig=S&AWSAccessKeyId=A&Signature=G": "https://acct.blob.core.windows.net/c?sv=2022&sig=REDACTED&AWSAccessKeyId=REDACTED&Signature=REDACTED",
		"https://host/v1?access_token=T&X-Goog-Signature=G&x%2Dapi%2Dkey=K":               "https://host/v1?access_token=REDACTED&X-Goog-Signature=REDACTED&x%2Dapi%2Dkey=REDACTED",
		"https://host/v1#frag": "https://host/v1",
		// A parameter after a ';' (which llmretry.Redact's texts read as
		// a separator too) is masked, the separator kept.
		"https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?alt=sse;key=K": "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?alt=sse;key=REDACTED",
	} {
		u, err := url.Parse(in)
		require.NoError(t, err)
		got, ok := redactURL(u)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{
		"https://api.openai.com/v1/chat/completions",
		"https://host/v1?alt=sse&api-version=2024-06-01",
		"https://host/v1?key=", // no value to hide
	} {
		u, err := url.Parse(in)
		require.NoError(t, err)
		_, ok := redactURL(u)
		assert.False(t, ok, "nothing to redact in %s", in)
	}
	_, ok := redactURL(nil)
	assert.False(t, ok)
}

// A base error that quotes the request's credentials is passed up with
// them blanked, and is still the original to errors.Is, errors.As,
// error.type and Timeout; a *url.Error stays one; an error that quotes no
// credential is passed up as it is.
func TestRedactError(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://u:pw@example.com/v1/x?key=K1&alt=sse", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer TOKEN")
	req.Header.Set("X-Goog-Api-Key", "GOOG")

	cause := &timeoutError{"sent Bearer TOKEN and GOOG, token=T2 and: i/o timeout"}
	orig := &url.Error{Op: "Get", URL: req.URL.String(), Err: cause}
	got := redactError(orig, req)
	require.IsType(t, &url.Error{}, got)
	assert.Equal(t, `Get "https://…@example.com/v1/x?…": sent … and …, token=… and: i/o timeout`, got.Error())
	assert.ErrorIs(t, got, cause)
	assert.Equal(t, semconv.ErrorType(orig), semconv.ErrorType(got))
	assert.True(t, got.(*url.Error).Timeout(), "url.Error asks its Err directly")
	assert.Equal(t, req.URL.String(), orig.URL, "the original is unchanged")

	got = redactError(cause, req)
	require.IsType(t, &typedRedactedError{}, got)
	assert.Equal(t, "sent … and …, token=… and: i/o timeout", got.Error())
	assert.Same(t, cause, errors.Unwrap(got))
	assert.Equal(t, semconv.ErrorType(cause), semconv.ErrorType(got))
	assert.True(t, got.(interface{ Timeout() bool }).Timeout())

	plain := errors.New("connection refused")
	assert.Same(t, plain, redactError(plain, req))
}

// timeoutError is a network timeout.
type timeoutError struct{ text string }

func (e *timeoutError) Error() string { return e.text }

func (*timeoutError) Timeout() bool { return true }

// No credential — key= in the query, user information, Authorization,
// x-api-key, api-key, x-goog-api-key — appears in any span (name,
// attributes, events, status) or metric attribute, even when the base's
// error quotes the URL and a header; the provider still gets them all.
func TestNoCredentialInTelemetry(t *testing.T) {
	const (
		secretURL = "https://user:pa55word@generativelanguage.googleapis.com/v1beta/models/gemini:generateContent?key=SECRET-KEY&alt=json"
		cleanURL  = "https://REDACTED:REDACTED@generativelanguage.googleapis.com/v1beta/models/gemini:generateContent?key=REDACTED&alt=json"
	)
	for _, coordinated := range []bool{false, true} {
		name := "New"
		if coordinated {
			name = "NewCoordinated"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig()
				p := newProvider(step{leak: true}, step{status: 503}, step{status: 200})
				policy := llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second}
				var rt *Transport
				var err error
				if coordinated {
					rt, err = NewCoordinated(p, policy, coordination.Config{}, r.opts()...)
				} else {
					rt, err = New(p, policy, r.opts()...)
				}
				require.NoError(t, err)

				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
				defer cancel()
				ctx, turn := r.turn(ctx)
				req := post(t, ctx, secretURL)
				req.Header.Set("Authorization", "Bearer SECRET-BEARER")
				req.Header.Set("X-Api-Key", "SECRET-XAPI")
				req.Header.Set("Api-Key", "SECRET-AZURE")
				req.Header.Set("X-Goog-Api-Key", "SECRET-GOOG")
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				finish(t, resp)
				turn.End()
				r.requireAllEnded(t)

				text := telemetryText(t, r)
				for _, secret := range []string{"SECRET", "pa55word", "user:", "user@"} {
					assert.NotContainsf(t, text, secret, "telemetry:\n%s", text)
				}
				spans := r.clientSpans()
				require.Len(t, spans, 3)
				for _, s := range spans {
					u, _ := attr(s.Attributes(), semconv.URLFullKey)
					assert.Equal(t, cleanURL, u.AsString())
				}
				assert.Contains(t, spans[0].Status().Description, "connection reset by peer (sent …)")
				assert.NotContains(t, text, "redactedError", "the leaky error is still a *url.Error to otelhttp's metrics")
				if coordinated {
					assert.Contains(t, text, "event llmretry.hold")
				}

				// The provider got the request as it was sent.
				for _, got := range p.requests() {
					assert.Equal(t, "SECRET-KEY", got.URL.Query().Get("key"))
					assert.Equal(t, "Bearer SECRET-BEARER", got.Header.Get("Authorization"))
					assert.Equal(t, "SECRET-GOOG", got.Header.Get("X-Goog-Api-Key"))
				}
			})
		})
	}
}

// No credential is in the attributes a span starts with either (what a
// Sampler and a SpanProcessor's OnStart are handed), where the attempt
// layer's redacted url.full cannot reach: otelhttp sets its url.full after
// the span starts (docs/decisions.md, 34), and an otelhttp that set it at
// the start would fail here.
func TestNoCredentialAtSpanStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := new(startAttrs)
		r := newRig()
		r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans), sdktrace.WithSpanProcessor(c), sdktrace.WithSampler(c))
		rt := r.transport(t, newProvider(step{status: 503}, step{status: 200}), llmretry.Policy{Waits: []time.Duration{time.Second}, Reserve: time.Second})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		ctx, turn := r.turn(ctx)
		resp, err := rt.RoundTrip(post(t, ctx, "https://user:pa55word@generativelanguage.googleapis.com/v1beta/models/g:generateContent?key=SECRET-KEY&alt=sse;sig=SECRET-SIG"))
		require.NoError(t, err)
		finish(t, resp)
		turn.End()
		require.Len(t, c.texts, 2*len(r.spans.Started()), "every span's start, seen by the Sampler and by OnStart")
		started := c.String()
		for _, secret := range []string{"SECRET", "pa55word"} {
			assert.NotContains(t, started, secret, "attributes at span start:\n%s", started)
		}
	})
}

// startAttrs records the attributes each span starts with, as a Sampler
// and a SpanProcessor's OnStart are handed them.
type startAttrs struct {
	mu    sync.Mutex
	texts []string
}

func (c *startAttrs) add(kvs []attribute.KeyValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.texts = append(c.texts, render(attribute.NewSet(kvs...)))
}

// String renders every span's start attributes, a line each.
func (c *startAttrs) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.texts, "\n")
}

func (c *startAttrs) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) { c.add(s.Attributes()) }
func (*startAttrs) OnEnd(sdktrace.ReadOnlySpan)                           {}
func (*startAttrs) Shutdown(context.Context) error                        { return nil }
func (*startAttrs) ForceFlush(context.Context) error                      { return nil }

func (c *startAttrs) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	c.add(p.Attributes)
	return sdktrace.AlwaysSample().ShouldSample(p)
}
func (*startAttrs) Description() string { return "startAttrs" }

// telemetryText renders everything r recorded: every span's name,
// attributes, events and status, and every metric's attributes.
func telemetryText(t *testing.T, r *rig) string {
	var b strings.Builder
	spans := append([]sdktrace.ReadOnlySpan(nil), r.spans.Ended()...)
	for _, s := range r.spans.Started() {
		spans = append(spans, s)
	}
	for _, s := range spans {
		fmt.Fprintf(&b, "span %s %v: %s\n", s.Name(), s.Status(), render(attribute.NewSet(s.Attributes()...)))
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "  event %s: %s\n", e.Name, render(attribute.NewSet(e.Attributes...)))
		}
		for _, l := range s.Links() {
			fmt.Fprintf(&b, "  link: %s\n", render(attribute.NewSet(l.Attributes...)))
		}
	}
	rm := r.collect(t)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []string
			switch m.Data.(type) {
			case metricdata.Sum[int64]:
				sets = slices.Collect(maps.Keys(counts(t, m)))
			case metricdata.Histogram[int64]:
				sets = slices.Collect(maps.Keys(histogram[int64](t, m)))
			case metricdata.Histogram[float64]:
				sets = slices.Collect(maps.Keys(histogram[float64](t, m)))
			default:
				t.Fatalf("metric %s: unexpected %T", m.Name, m.Data)
			}
			for _, s := range sets {
				fmt.Fprintf(&b, "metric %s: %s\n", m.Name, s)
			}
		}
	}
	return b.String()
}
