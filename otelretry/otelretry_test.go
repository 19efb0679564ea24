package otelretry

import (
	"context"
	"errors"
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
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The zero Transport sends as the zero llmretry Transport does.
func TestZeroTransport(t *testing.T) {
	var zt Transport
	assert.Nil(t, zt.Retrying())
	_, err := zt.RoundTrip(&http.Request{Method: http.MethodGet})
	assert.ErrorContains(t, err, "no URL")
	zt.CloseIdleConnections()
}

// Without options the global providers are used; each attempt's headers
// carry its own span (the global propagator's traceparent), since
// otelhttp is below llmretry. This test alone sets the globals.
func TestDefaultsAreTheGlobalProviders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		otel.SetTracerProvider(r.tp)
		otel.SetMeterProvider(r.mp)
		otel.SetTextMapPropagator(propagation.TraceContext{})
		defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())

		p := newProvider(step{status: 502}, step{status: 200})
		rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second}})
		require.NoError(t, err)

		r.callInTurn(t, rt)

		spans := r.clientSpans()
		require.Len(t, spans, 2)
		reqs := p.requests()
		require.Len(t, reqs, 2)
		for i, s := range spans {
			sc := s.SpanContext()
			assert.Equal(t, fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()), reqs[i].Header.Get("Traceparent"),
				"attempt %d carries its own span", i+1)
		}
		assert.Len(t, counts(t, findMetric(t, r.collect(t), metricAttempts)), 2)
	})
}

// A call without a span in its context still gets attempt spans (roots)
// and resend counts; there is no caller's span for the events.
func TestNoCallerSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 529}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second}})

		resp, err := rt.RoundTrip(post(t, t.Context(), chatURL))
		require.NoError(t, err)
		finish(t, resp)
		r.requireAllEnded(t)

		spans := r.clientSpans()
		require.Len(t, spans, 2)
		assert.False(t, spans[0].Parent().IsValid(), "a root span")
		assert.NotEqual(t, spans[0].SpanContext().TraceID(), spans[1].SpanContext().TraceID(), "each attempt its own trace")
		rc, ok := attr(spans[1].Attributes(), semconv.HTTPRequestResendCountKey)
		assert.True(t, ok)
		assert.Equal(t, int64(1), rc.AsInt64())
		assert.Len(t, histogram[float64](t, findMetric(t, r.collect(t), metricWaitDuration)), 1, "the wait is still measured")
	})
}

// Under another llmretry Transport, which does the retrying, the inner one
// passes each attempt through: one span per outer attempt, with the outer
// attempt's resend count.
func TestUnderAnotherTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 503}, step{status: 200})
		inner := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Minute}})
		outer, err := llmretry.New(inner, llmretry.Policy{Waits: []time.Duration{time.Second, time.Second}})
		require.NoError(t, err)

		r.callInTurn(t, outer)

		spans := r.clientSpans()
		require.Len(t, spans, 3)
		for i, s := range spans[1:] {
			rc, _ := attr(s.Attributes(), semconv.HTTPRequestResendCountKey)
			assert.Equal(t, int64(i+1), rc.AsInt64())
		}
	})
}

// Many concurrent calls through one Transport, each retried once: every
// span ends, every attempt is counted (run with -race).
func TestConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const calls = 50
		r := newRig()
		var mu sync.Mutex
		sent := map[string]int{}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			id := req.URL.Query().Get("call")
			sent[id]++
			n := sent[id]
			mu.Unlock()
			return newProvider(step{status: []int{503, 200}[min(n-1, 1)]}).RoundTrip(req)
		})
		rt := r.transport(t, base, llmretry.Policy{Waits: []time.Duration{time.Second}})

		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				ctx, turn := r.turn(t.Context())
				defer turn.End()
				resp, err := rt.RoundTrip(post(t, ctx, fmt.Sprintf("%s?call=%d", chatURL, i)))
				if assert.NoError(t, err) {
					finish(t, resp)
				}
			})
		}
		wg.Wait()
		r.requireAllEnded(t)
		assert.Len(t, r.clientSpans(), 2*calls)
		assert.Equal(t, map[string]int64{
			"http.response.status_code=503 llmretry.resend=false server.address=api.example.com": calls,
			"http.response.status_code=200 llmretry.resend=true server.address=api.example.com":  calls,
		}, counts(t, findMetric(t, r.collect(t), metricAttempts)))
	})
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// CloseIdleConnections on the Transport reaches the base through otelhttp,
// which has no such method.
func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	r := newRig()
	p := newProvider(step{status: 200})
	rt := r.transport(t, p, llmretry.Policy{})
	rt.CloseIdleConnections()
	assert.Equal(t, int32(1), p.idle.Load())

	// A base without the method is fine too.
	r.transport(t, roundTripFunc(p.RoundTrip), llmretry.Policy{}).CloseIdleConnections()
}

// An invalid policy or coordination makes no Transport, and says so once:
// llmretry's error, which names the bad field, with one prefix.
func TestInvalid(t *testing.T) {
	r := newRig()
	_, err := New(nil, llmretry.Policy{Reserve: -time.Second}, r.opts()...)
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), "retry:"), err.Error())
	assert.True(t, strings.HasPrefix(err.Error(), "llmretry: Policy.Reserve is negative"), err.Error())

	_, err = NewCoordinated(nil, llmretry.Policy{}, coordination.Config{RetryBudget: 2}, r.opts()...)
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), "retry:"), err.Error())
	assert.True(t, strings.HasPrefix(err.Error(), "llmretry: coordination.Config.RetryBudget"), err.Error())

	// Nil options are ignored; a nil base is http.DefaultTransport.
	rt, err := New(nil, llmretry.Policy{}, nil, WithTracerProvider(nil), WithMeterProvider(nil))
	require.NoError(t, err)
	require.NotNil(t, rt)
}

// A request with its own policy (llmretry.WithPolicy) runs that policy's
// hooks, not the Transport's: its attempts are still spans with resend
// counts and are counted, but its waits are not recorded.
func TestPerRequestPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{})

		ctx, turn := r.turn(t.Context())
		ctx = llmretry.WithPolicy(ctx, llmretry.Policy{Waits: []time.Duration{time.Second}})
		resp, err := rt.RoundTrip(post(t, ctx, chatURL))
		require.NoError(t, err)
		finish(t, resp)
		turn.End()
		r.requireAllEnded(t)

		spans := r.clientSpans()
		require.Len(t, spans, 2)
		rc, _ := attr(spans[1].Attributes(), semconv.HTTPRequestResendCountKey)
		assert.Equal(t, int64(1), rc.AsInt64())
		rm := r.collect(t)
		assert.Len(t, counts(t, findMetric(t, rm, metricAttempts)), 2)
		assert.Empty(t, turn.(interface{ Events() []sdktrace.Event }).Events(), "no wait event")
	})
}

// Every sentinel, and the context's errors, have their short name, found
// through wrapping; any other error is the request's own: not_retryable.
func TestReasonName(t *testing.T) {
	for err, want := range map[error]string{
		nil:                         "",
		llmretry.ErrRetriesSpent:    "retries_spent",
		llmretry.ErrNoTimeLeft:      "no_time_left",
		llmretry.ErrWaitTooLong:     "wait_too_long",
		llmretry.ErrProviderRefused: "provider_refused",
		llmretry.ErrNotRetryable:    "not_retryable",
		llmretry.ErrStreamCut:       "stream_cut",
		&llmretry.Exhausted{Reason: llmretry.ErrStreamCut}: "stream_cut",
		context.Canceled:                            "canceled",
		context.DeadlineExceeded:                    "deadline_exceeded",
		fmt.Errorf("w: %w", llmretry.ErrNoTimeLeft): "no_time_left",
		errors.New("llmretry: request has no URL"):  "not_retryable",
	} {
		assert.Equal(t, want, reasonName(err), "%v", err)
	}
}

// Each way a call ends is one llmretry.calls point with its outcome (and
// reason), one llmretry.call.attempts measurement, and the same on the
// caller's span; a default-port https URL, server.address its host.
func TestCallOutcomes(t *testing.T) {
	retryAfter := step{status: 429, header: map[string]string{"Retry-After": "3600"}}
	refused := step{status: 429, header: map[string]string{"X-Should-Retry": "false"}}
	for _, c := range []struct {
		name     string
		script   []step
		deadline time.Duration // 0: none
		cancelAt time.Duration // 0: never
		outcome  string
		reason   string
		attempts int64
	}{
		{"first time", []step{{status: 200}}, 0, 0, "answered_first_time", "", 1},
		{"after retries", []step{{status: 503}, {err: &opError{}}, {status: 200}}, 0, 0, "answered_after_retries", "", 3},
		{"retries spent", []step{{status: 503}}, 0, 0, "gave_up", "retries_spent", 3},
		{"retries spent on errors", []step{{err: &opError{}}}, 0, 0, "gave_up", "retries_spent", 3},
		{"a 400 at once", []step{{status: 400}}, 0, 0, "gave_up", "not_retryable", 1},
		{"server wait too long", []step{retryAfter}, 0, 0, "gave_up", "wait_too_long", 1},
		{"provider refused", []step{refused}, 0, 0, "gave_up", "provider_refused", 1},
		{"no time left", []step{{status: 503}}, time.Second, 0, "gave_up", "no_time_left", 1}, // a 200-ms reserve: a 1-s wait does not fit
		{"canceled in a wait", []step{{status: 503}}, 0, 1500 * time.Millisecond, "gave_up", "canceled", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig()
				rt, err := New(newProvider(c.script...), llmretry.Policy{
					Waits:         []time.Duration{time.Second, time.Second},
					MaxRetryAfter: time.Minute,
				}, r.opts()...)
				require.NoError(t, err)

				ctx := t.Context()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				if c.cancelAt > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
					go func() {
						time.Sleep(c.cancelAt) // synctest's clock: no real wait
						cancel()
					}()
				}
				ctx, turn := r.turn(ctx)
				resp, err := rt.RoundTrip(post(t, ctx, chatURL))
				if err == nil {
					finish(t, resp)
				}
				turn.End()
				r.requireAllEnded(t)

				set := "llmretry.outcome=" + c.outcome + " server.address=api.example.com"
				if c.reason != "" {
					set = "llmretry.outcome=" + c.outcome + " llmretry.reason=" + c.reason + " server.address=api.example.com"
				}
				rm := r.collect(t)
				assert.Equal(t, map[string]int64{set: 1}, counts(t, findMetric(t, rm, metricCalls)))
				assert.Equal(t, map[string][2]int64{
					"llmretry.outcome=" + c.outcome + " server.address=api.example.com": {1, c.attempts},
				}, histogram[int64](t, findMetric(t, rm, metricCallAttempts)))

				want := map[attribute.Key]any{keyOutcome: c.outcome, keyAttempts: c.attempts}
				if c.reason != "" {
					want[keyReason] = c.reason
				}
				got := map[attribute.Key]any{}
				for _, kv := range turn.(sdktrace.ReadOnlySpan).Attributes() {
					got[kv.Key] = kv.Value.AsInterface()
				}
				assert.Equal(t, want, got, "the caller's span")
			})
		})
	}
}

// A coordinated call that its gate holds until it can wait no longer
// sends nothing: a give-up after 0 attempts, with the reason.
func TestCallHeldToTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		rt, err := NewCoordinated(newProvider(step{status: 503}, step{status: 200}), llmretry.Policy{
			Waits: []time.Duration{time.Second}, Reserve: time.Second,
		}, coordination.Config{}, r.opts()...)
		require.NoError(t, err)

		var first error
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			resp, err := rt.RoundTrip(post(t, ctx, chatURL))
			if first = err; err == nil {
				finish(t, resp)
			}
		}()
		synctest.Wait() // the first call got its 503: the key is down

		// The second has less time than the key's next probe: held, and
		// given up, before any attempt.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err = rt.RoundTrip(post(t, ctx, chatURL))
		require.Error(t, err)
		<-done
		require.NoError(t, first)

		rm := r.collect(t)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=answered_after_retries server.address=api.example.com":               1,
			"llmretry.outcome=gave_up llmretry.reason=no_time_left server.address=api.example.com": 1,
		}, counts(t, findMetric(t, rm, metricCalls)))
		assert.Equal(t, map[string][2]int64{
			"llmretry.outcome=answered_after_retries server.address=api.example.com": {1, 2},
			"llmretry.outcome=gave_up server.address=api.example.com":                {1, 0},
		}, histogram[int64](t, findMetric(t, rm, metricCallAttempts)))
	})
}

// A request with its own policy is a call too; a request that an outer
// llmretry Transport is retrying is not one here (the outer one retries).
func TestCallsCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{})
		ctx := llmretry.WithPolicy(t.Context(), llmretry.Policy{Waits: []time.Duration{time.Second}})
		resp, err := rt.RoundTrip(post(t, ctx, chatURL))
		require.NoError(t, err)
		finish(t, resp)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=answered_after_retries server.address=api.example.com": 1,
		}, counts(t, findMetric(t, r.collect(t), metricCalls)))

		r = newRig()
		inner := r.transport(t, newProvider(step{status: 503}, step{status: 200}), llmretry.Policy{})
		outer, err := llmretry.New(inner, llmretry.Policy{Waits: []time.Duration{time.Second}})
		require.NoError(t, err)
		resp, err = outer.RoundTrip(post(t, t.Context(), chatURL))
		require.NoError(t, err)
		finish(t, resp)
		assert.False(t, hasMetric(r.collect(t), metricCalls), "no call of its own under another Transport")
	})
}

// A failure status puts error.type on its attempt's
// http.client.request.duration point, and a success puts none, also when
// the caller's context already carries an otelhttp client Labeler (the
// caller's own labels): every attempt of the call shares that context,
// and each gets a labeler of its own.
func TestErrorTypeStaysWithItsAttemptUnderACallersLabeler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second}})

		lab := &otelhttp.Labeler{}
		ctx := otelhttp.ContextWithClientLabeler(t.Context(), lab)
		resp, err := rt.RoundTrip(post(t, ctx, chatURL))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		finish(t, resp)

		assert.Equal(t, map[int64]string{503: "503", 200: ""}, errorTypes(t, r),
			"the answered attempt's duration point carries no error.type")
		assert.Empty(t, lab.Get(), "the caller's labeler is not written into")
	})
}

// The same through an outer otelhttp.Transport (a client that was already
// instrumented, wrapped around the otelretry Transport): the outer layer
// puts its Labeler in the context; each inner attempt gets its own.
func TestErrorTypeStaysWithItsAttemptUnderOuterOtelhttp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		rt := r.transport(t, p, llmretry.Policy{Waits: []time.Duration{time.Second}})
		outer := otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(r.tp))

		resp, err := outer.RoundTrip(post(t, t.Context(), chatURL))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		finish(t, resp)

		assert.Equal(t, map[int64]string{503: "503", 200: ""}, errorTypes(t, r),
			"the answered attempt's duration point carries no error.type")
	})
}

// errorTypes returns the error.type of each http.client.request.duration
// point r collected, by status code ("" for none).
func errorTypes(t *testing.T, r *rig) map[int64]string {
	t.Helper()
	byStatus := map[int64]string{}
	d := findMetric(t, r.collect(t), "http.client.request.duration").Data.(metricdata.Histogram[float64])
	for _, dp := range d.DataPoints {
		status, _ := dp.Attributes.Value(semconv.HTTPResponseStatusCodeKey)
		et, _ := dp.Attributes.Value(semconv.ErrorTypeKey)
		byStatus[status.AsInt64()] = et.AsString()
	}
	return byStatus
}
