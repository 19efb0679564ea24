package otelretry

import (
	"context"
	"fmt"
	"net/http"
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
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

const chatURL = "https://api.example.com/v1/chat/completions"

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
	rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second}}, r.opts()...)
	require.NoError(t, err)

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

// The attempts counter counts each attempt by status or error type and
// resend; the wait histogram has each wait, in seconds, by what it followed;
// otelhttp's own metrics go to the same MeterProvider.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{err: &opError{}}, step{status: 429}, step{status: 200})
		rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}}, r.opts()...)
		require.NoError(t, err)

		r.callInTurn(t, rt)

		rm := r.collect(t)
		attempts := findMetric(t, rm, metricAttempts)
		assert.Equal(t, "{attempt}", attempts.Unit)
		assert.Equal(t, map[string]int64{
			"http.response.status_code=503 llmretry.resend=false server.address=api.example.com": 1,
			"error.type=*otelretry.opError llmretry.resend=true server.address=api.example.com":  1,
			"http.response.status_code=429 llmretry.resend=true server.address=api.example.com":  1,
			"http.response.status_code=200 llmretry.resend=true server.address=api.example.com":  1,
		}, counts(t, attempts))

		waits := findMetric(t, rm, metricWaitDuration)
		assert.Equal(t, "s", waits.Unit)
		assert.Equal(t, map[string][2]float64{
			"http.response.status_code=503 server.address=api.example.com": {1, 1},
			"error.type=*otelretry.opError server.address=api.example.com": {1, 2},
			"http.response.status_code=429 server.address=api.example.com": {1, 4},
		}, histogram(t, waits))

		duration := findMetric(t, rm, "http.client.request.duration")
		var n uint64
		for _, dp := range duration.Data.(metricdata.Histogram[float64]).DataPoints {
			n += dp.Count
		}
		assert.Equal(t, uint64(4), n, "otelhttp measured every attempt")

		// The error's wait event names its type, like error.type.
		turnSpan := r.spans.Ended()[len(r.spans.Ended())-1]
		reasons := []any{}
		for _, e := range events(turnSpan, eventWait) {
			reasons = append(reasons, eventAttrs(e)[keyReason])
		}
		assert.Equal(t, []any{"503", "*otelretry.opError", "429"}, reasons)

		// The failed connection's span is an error span, ended at once.
		spans := r.clientSpans()
		require.Len(t, spans, 4)
		assert.Equal(t, codes.Error, spans[1].Status().Code)
		et, _ := attr(spans[1].Attributes(), semconv.ErrorTypeKey)
		assert.Equal(t, "*otelretry.opError", et.AsString())
	})
}

// A coordinated Transport records each hold as an event on the caller's
// span and counts it by outcome when it ends; the user's OnHold still runs.
func TestCoordinatedHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		var mu sync.Mutex
		var seen []coordination.Hold
		rt, err := NewCoordinated(p, llmretry.Policy{
			Waits:   []time.Duration{time.Second},
			Reserve: time.Second,
		}, coordination.Config{
			OnHold: func(h coordination.Hold) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, h)
			},
		}, r.opts()...)
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		turns := make([]trace.Span, 2)
		call := func(i int) {
			ctx, turn := r.turn(ctx)
			turns[i] = turn
			defer turn.End()
			resp, err := rt.RoundTrip(post(t, ctx, chatURL))
			if assert.NoError(t, err) {
				assert.Equal(t, 200, resp.StatusCode)
				finish(t, resp)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call(0) })
		synctest.Wait() // the first call got its 503 and is held: the key is down
		wg.Go(func() { call(1) })
		wg.Wait()
		r.requireAllEnded(t)

		// Each call was held once, while the provider was down: one went
		// as the probe, the other was released when the probe came back.
		var outcomes []string
		var delayed []int64
		for i, turn := range turns {
			s := turn.(sdktrace.ReadOnlySpan)
			assert.Emptyf(t, events(s, eventWait), "call %d: a held retry adds no wait event", i+1)
			holds := events(s, eventHold)
			require.Lenf(t, holds, 1, "call %d", i+1)
			a := eventAttrs(holds[0])
			assert.Equal(t, "provider down", a[keyReason])
			assert.Equal(t, "api.example.com", a[keyKey])
			assert.Greater(t, a[keyDuration], 0.0)
			outcomes = append(outcomes, a[keyOutcome].(string))
			delayed = append(delayed, a[keyAttempt].(int64))
		}
		assert.ElementsMatch(t, []string{"sent as the probe", "released"}, outcomes)
		assert.ElementsMatch(t, []int64{1, 2}, delayed, "the attempt each hold delayed: the new call's first, the held call's retry")

		// The attempt sent as the probe, and only it, is marked on its span.
		var probes []int64
		for _, s := range r.clientSpans() {
			if v, ok := attr(s.Attributes(), keyProbe); ok {
				assert.True(t, v.AsBool())
				status, _ := attr(s.Attributes(), semconv.HTTPResponseStatusCodeKey)
				probes = append(probes, status.AsInt64())
			}
		}
		assert.Equal(t, []int64{200}, probes, "one probe, answered")

		rm := r.collect(t)
		probeAttempts := int64(0)
		for k, n := range counts(t, findMetric(t, rm, metricAttempts)) {
			if strings.Contains(k, "llmretry.probe=true") {
				probeAttempts += n
			}
		}
		assert.Equal(t, int64(1), probeAttempts, "the probe is marked on its llmretry.attempts point too")
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=sent as the probe llmretry.reason=provider down server.address=api.example.com": 1,
			"llmretry.outcome=released llmretry.reason=provider down server.address=api.example.com":          1,
		}, counts(t, findMetric(t, rm, metricHolds)))
		hd := histogram(t, findMetric(t, rm, metricHoldDuration))
		assert.Len(t, hd, 2)

		// The user's OnHold saw each hold begin and end, and the event
		// durations are the holds'.
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 4)
		ended := map[string]coordination.Hold{}
		for _, h := range seen {
			if h.Outcome != coordination.HoldWaiting {
				ended[h.Outcome.String()] = h
			}
		}
		for _, turn := range turns {
			e := events(turn.(sdktrace.ReadOnlySpan), eventHold)[0]
			a := eventAttrs(e)
			h := ended[a[keyOutcome].(string)]
			assert.Equal(t, h.End.Sub(h.Start).Seconds(), a[keyDuration])
			assert.Equal(t, h.Start, e.Time, "the event is stamped when the hold began")
		}
	})
}

// A hold for pacing (a response said the key's published rate limit is
// spent) is its own reason on the hold event and the holds counter.
func TestPacedHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		spent := map[string]string{"X-Ratelimit-Limit-Requests": "10", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "10s"}
		p := newProvider(step{status: 200, header: spent}, step{status: 200})
		rt, err := NewCoordinated(p, llmretry.Policy{}, coordination.Config{}, r.opts()...)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		for range 2 {
			ctx, turn := r.turn(ctx)
			resp, err := rt.RoundTrip(post(t, ctx, chatURL))
			require.NoError(t, err)
			finish(t, resp)
			turn.End()
		}
		r.requireAllEnded(t)
		rm := r.collect(t)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=released llmretry.reason=paced under a rate limit server.address=api.example.com": 1,
		}, counts(t, findMetric(t, rm, metricHolds)), "the second call waited its turn: one request back a second")
	})
}

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
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			default:
				t.Fatalf("metric %s: unexpected %T", m.Name, m.Data)
			}
			for _, s := range sets {
				fmt.Fprintf(&b, "metric %s: %s\n", m.Name, render(s))
			}
		}
	}
	return b.String()
}

// An attempt on a fallback route carries llmretry.route on its span and on
// its llmretry.attempts point; an attempt on the primary carries none.
func TestRouteAttribute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 503}, step{status: 200})
		route, err := llmretry.RouteTo("https://api.example.com/v1", "https://fallback.example.com/v1", http.Header{"Authorization": {"Bearer fb"}})
		require.NoError(t, err)
		rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}, Fallback: []llmretry.Route{route}}, r.opts()...)
		require.NoError(t, err)

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
