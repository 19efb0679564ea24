package otelretry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry"
	"github.com/llmretry/llmretry/coordination"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

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
				}, intHistogram(t, findMetric(t, rm, metricCallAttempts)))

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
		}, intHistogram(t, findMetric(t, rm, metricCallAttempts)))
	})
}

// A request with its own policy is a call too; a request that an outer
// llmretry Transport is retrying is not one here (the outer one retries).
func TestCallsCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		p := newProvider(step{status: 503}, step{status: 200})
		rt, err := New(p, llmretry.Policy{}, r.opts()...)
		require.NoError(t, err)
		ctx := llmretry.WithPolicy(t.Context(), llmretry.Policy{Waits: []time.Duration{time.Second}})
		resp, err := rt.RoundTrip(post(t, ctx, chatURL))
		require.NoError(t, err)
		finish(t, resp)
		assert.Equal(t, map[string]int64{
			"llmretry.outcome=answered_after_retries server.address=api.example.com": 1,
		}, counts(t, findMetric(t, r.collect(t), metricCalls)))

		r = newRig()
		inner, err := New(newProvider(step{status: 503}, step{status: 200}), llmretry.Policy{}, r.opts()...)
		require.NoError(t, err)
		outer, err := llmretry.New(inner, llmretry.Policy{Waits: []time.Duration{time.Second}})
		require.NoError(t, err)
		resp, err = outer.RoundTrip(post(t, t.Context(), chatURL))
		require.NoError(t, err)
		finish(t, resp)
		assert.False(t, hasMetric(r.collect(t), metricCalls), "no call of its own under another Transport")
	})
}
