package llmretry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every stop says why: each reason through RoundTrip (a response given up
// on carries its record, found by GaveUp; an error is an *Exhausted whose
// Reason errors.Is finds, through an http.Client's *url.Error too), with
// the last attempt's Stop saying the same.
func TestEveryStopSaysWhy(t *testing.T) {
	cases := []struct {
		name     string
		script   []testkit.Reply
		policy   Policy
		deadline time.Duration // zero: none
		want     error
		attempts int
		status   int // the response returned; 0 for an error
	}{
		{"retries spent, a response", []testkit.Reply{testkit.Fail(502)}, Policy{Waits: []time.Duration{time.Second}}, 0, ErrRetriesSpent, 2, 502},
		{"retries spent, an error", []testkit.Reply{testkit.Refused()}, Policy{Waits: []time.Duration{time.Second}}, 0, ErrRetriesSpent, 2, 0},
		{"no time left", []testkit.Reply{testkit.Fail(503)}, Policy{Waits: []time.Duration{3 * time.Second}, Reserve: 5 * time.Second}, 10 * time.Second, ErrNoTimeLeft, 2, 503},
		{"no time left, an error", []testkit.Reply{testkit.Refused()}, Policy{Waits: []time.Duration{3 * time.Second}, Reserve: 5 * time.Second}, 10 * time.Second, ErrNoTimeLeft, 2, 0},
		{"wait too long", []testkit.Reply{testkit.Fail(429, "Retry-After", "86400")}, Policy{}, 0, ErrWaitTooLong, 1, 429},
		{"provider refused", []testkit.Reply{testkit.Fail(429, "X-Should-Retry", "false")}, Policy{}, 0, ErrProviderRefused, 1, 429},
		{"spent quota", []testkit.Reply{{Status: 429, Header: http.Header{"Content-Type": {"application/json"}}, Body: `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`}}, Policy{}, 0, ErrProviderRefused, 1, 429},
		{"not retryable status", []testkit.Reply{testkit.Fail(400)}, Policy{}, 0, ErrNotRetryable, 1, 400},
		{"not retryable error", []testkit.Reply{{Err: Permanent(errors.New("refused by policy"))}}, Policy{}, 0, ErrNotRetryable, 1, 0},
		{"not retryable after retries", []testkit.Reply{testkit.Fail(503), testkit.Fail(404)}, Policy{Waits: []time.Duration{time.Second}}, 0, ErrNotRetryable, 2, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := testkit.NewProvider(c.script...)
				var rec recorder
				c.policy.OnAttempt = rec.on
				ctx := withDeadline(t, c.deadline)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, testURL, strings.NewReader(`{"model":"m"}`))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer sk-secret")
				client := &http.Client{Transport: mustNew(t, prov, c.policy)}
				resp, err := client.Do(req)
				assert.Equal(t, c.attempts, prov.Attempts())
				require.Len(t, rec.attempts, c.attempts)
				last := rec.attempts[len(rec.attempts)-1]
				assert.ErrorIs(t, last.Stop, c.want, "the last attempt's Stop")
				for _, a := range rec.attempts[:len(rec.attempts)-1] {
					assert.Nil(t, a.Stop, "a retry followed attempt %d", a.N)
				}
				if c.status == 0 {
					require.Error(t, err)
					assert.ErrorIs(t, err, c.want)
					var ex *Exhausted
					require.ErrorAs(t, err, &ex)
					assert.Equal(t, c.attempts, ex.Attempts)
					assert.Contains(t, err.Error(), reasonText(c.want))
					assert.NotContains(t, err.Error(), "sk-secret")
					assert.Equal(t, 1, strings.Count(err.Error(), "api.example.test"), "the URL once, quoted by net/http: %s", err)
					return
				}
				require.NoError(t, err)
				defer resp.Body.Close()
				assert.Equal(t, c.status, resp.StatusCode)
				ex := GaveUp(resp)
				require.NotNil(t, ex, "the record travels with the response")
				assert.ErrorIs(t, ex.Reason, c.want)
				assert.Equal(t, c.attempts, ex.Attempts)
				assert.Same(t, resp, ex.Response)
				assert.Equal(t, resp.Request.URL.String(), testURL)
			})
		})
	}
}

// The caller's context ending is the reason, whatever else was true.
func TestStopReasonIsTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(1500*time.Millisecond, cancel)
		resp, err := post(t, mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second}}), ctx)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
		var ex *Exhausted
		require.ErrorAs(t, err, &ex)
		assert.Equal(t, context.Canceled, ex.Reason)
		assert.Equal(t, "llmretry: gave up after 2 attempts: context canceled", err.Error())
	})
}

// Do says why as RoundTrip does: a Permanent error is "not retryable", not
// "gave up".
func TestDoStopReasons(t *testing.T) {
	busy := errors.New("busy")
	cases := []struct {
		name     string
		policy   Policy
		deadline time.Duration
		err      error
		want     error
		calls    int
		text     string
	}{
		{"spent", Policy{Waits: []time.Duration{time.Second}}, 0, busy, ErrRetriesSpent, 2, "llmretry: gave up after 2 attempts, retries spent: busy"},
		{"no time left", Policy{Waits: []time.Duration{3 * time.Second}, Reserve: 5 * time.Second}, 10 * time.Second, busy, ErrNoTimeLeft, 2, "llmretry: gave up after 2 attempts, no time left before the deadline less the reserve: busy"},
		{"permanent", Policy{}, 0, Permanent(errors.New("bad args")), ErrNotRetryable, 1, "llmretry: not retryable: bad args"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := withDeadline(t, c.deadline)
				var rec recorder
				c.policy.OnAttempt = rec.on
				calls := 0
				_, err := Do(ctx, c.policy, func(context.Context) (int, error) { calls++; return 0, c.err })
				assert.Equal(t, c.calls, calls)
				assert.ErrorIs(t, err, c.want)
				assert.ErrorIs(t, err, c.err)
				assert.EqualError(t, err, c.text)
				require.Len(t, rec.attempts, c.calls)
				assert.ErrorIs(t, rec.attempts[c.calls-1].Stop, c.want)
			})
		})
	}
}
