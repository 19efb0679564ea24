package llmretry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaitsWithoutDeadlineTheListIsTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(502))
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, 2 * time.Second}})
		start := time.Now()
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode)
		assert.Equal(t, "error 502", bodyOf(t, resp), "the provider's own final response, body intact")
		assert.Equal(t, 3, prov.attempts())
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, prov.gaps())
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "marked so SDKs above do not resend it")
	})
}

func TestMaxRetriesCapsWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(502))
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, MaxRetries: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, prov.attempts())
	})
}

// With a deadline the last wait repeats while, after the wait, the reserve
// still fits before the deadline; then the failure is returned without
// waiting.
func TestWaitsWithDeadlineRepeatLastWaitAndKeepReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(503))
		var rec recorder
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, Reserve: time.Minute, OnAttempt: rec.on})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		// attempts at 0, 5, 15, 25, 35, 45, 55: the next wait would end at
		// 65 s, leaving 55 s < 60 s reserve.
		assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}, prov.gaps())
		assert.Equal(t, 55*time.Second, time.Since(start))
		deadline, _ := ctx.Deadline()
		assert.GreaterOrEqual(t, time.Until(deadline), time.Minute, "the reserve is left")
		assert.Equal(t, time.Duration(0), rec.attempts[len(rec.attempts)-1].RetryIn)
	})
}

// With a deadline a zero last wait is not repeated: the list is the bound,
// as without a deadline, since repeating it would send to a provider that
// is down without pause until the deadline.
func TestWaitsWithDeadlineZeroLastWaitIsNotRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(503), fail(503), fail(503), ok) // a fourth attempt would be answered
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second, 0}, Reserve: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 3, prov.attempts(), "one attempt per wait listed, and the first")
		assert.Equal(t, []time.Duration{time.Second, 0}, prov.gaps())
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrRetriesSpent)
	})
}

func TestDeadlineTooCloseReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(502), ok)
		rt := mustNew(t, prov.mock, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode)
		assert.Equal(t, 1, prov.attempts())
		assert.Zero(t, time.Since(start), "no wait")
	})
}

// Waits empty: retry k waits a random time in [0, min(MaxWait, 2^(k-1) s)],
// at most MaxRetries times (6 by default).
func TestExponentialFullJitterBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, p := range []Policy{{}, {MaxWait: 1500 * time.Millisecond, MaxRetries: 4}} {
			seen := map[time.Duration]bool{}
			for run := 0; run < 50; run++ {
				prov := newProvider(fail(503))
				var rec recorder
				p.OnAttempt = rec.on
				rt := mustNew(t, prov.mock, p)
				start := time.Now()
				_, err := post(t, rt, context.Background())
				require.NoError(t, err)
				want := p.MaxRetries
				if want == 0 {
					want = DefaultMaxRetries
				}
				require.Equal(t, want+1, prov.attempts())
				maxWait := p.MaxWait
				if maxWait == 0 {
					maxWait = DefaultMaxWait
				}
				var total time.Duration
				for k, g := range prov.gaps() {
					ceiling := min(maxWait, time.Duration(1<<k)*time.Second)
					assert.GreaterOrEqual(t, g, time.Duration(0))
					assert.LessOrEqual(t, g, ceiling, "retry %d", k+1)
					assert.Equal(t, g, rec.attempts[k].RetryIn, "the record says the real wait")
					total += g
					seen[g] = true
				}
				assert.Equal(t, total, time.Since(start))
			}
			assert.Greater(t, len(seen), 100, "waits are random")
		}
	})
}

func TestExponentialRespectsDeadlineAndReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := newProvider(fail(503))
		rt := mustNew(t, prov.mock, Policy{MaxRetries: 1000, MaxWait: 10 * time.Second, Reserve: 30 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := post(t, rt, ctx)
		require.NoError(t, err)
		deadline, _ := ctx.Deadline()
		assert.GreaterOrEqual(t, time.Until(deadline), 30*time.Second)
		assert.Greater(t, prov.attempts(), 5)
	})
}

func TestServerWaitTooLongEndsRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// above MaxRetryAfter
		prov := newProvider(fail(429, "Retry-After", "86400"), ok)
		resp, err := post(t, mustNew(t, prov.mock, Policy{}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, "error 429", bodyOf(t, resp))
		assert.Equal(t, 1, prov.attempts())
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrWaitTooLong)

		// within MaxRetryAfter but past the deadline and reserve
		prov = newProvider(fail(503, "Retry-After", "120"), ok)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		defer cancel()
		start := time.Now()
		resp, err = post(t, mustNew(t, prov.mock, Policy{Reserve: time.Minute}), ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrNoTimeLeft)
		assert.Equal(t, 1, prov.attempts())
		assert.Zero(t, time.Since(start))
	})
}
