package otelretry

import (
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
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
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
		rt, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Second}}, r.opts()...)
		require.NoError(t, err)

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
		assert.Len(t, histogram(t, findMetric(t, r.collect(t), metricWaitDuration)), 1, "the wait is still measured")
	})
}

// Under another llmretry Transport, which does the retrying, the inner one
// passes each attempt through: one span per outer attempt, with the outer
// attempt's resend count.
func TestUnderAnotherTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 503}, step{status: 200})
		inner, err := New(p, llmretry.Policy{Waits: []time.Duration{time.Minute}}, r.opts()...)
		require.NoError(t, err)
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
		rt, err := New(base, llmretry.Policy{Waits: []time.Duration{time.Second}}, r.opts()...)
		require.NoError(t, err)

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
	rt, err := New(p, llmretry.Policy{}, r.opts()...)
	require.NoError(t, err)
	rt.CloseIdleConnections()
	assert.Equal(t, int32(1), p.idle.Load())

	// A base without the method is fine too.
	rt, err = New(roundTripFunc(p.RoundTrip), llmretry.Policy{}, r.opts()...)
	require.NoError(t, err)
	rt.CloseIdleConnections()
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
		rt, err := New(p, llmretry.Policy{}, r.opts()...)
		require.NoError(t, err)

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
