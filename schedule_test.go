package llmretry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmretry/llmretry/internal/coord"
	"github.com/llmretry/llmretry/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaitsWithoutDeadlineTheListIsTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502))
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, 2 * time.Second}})
		start := time.Now()
		resp, err := post(t, rt, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode)
		assert.Equal(t, "error 502", bodyOf(t, resp), "the provider's own final response, body intact")
		assert.Equal(t, 3, prov.Attempts())
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, prov.Gaps())
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "marked so SDKs above do not resend it")
	})
}

func TestMaxRetriesCapsWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502))
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, time.Second, time.Second}, MaxRetries: 1})
		ctx := withDeadline(t, time.Hour)
		_, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, prov.Attempts())
	})
}

// With a deadline the last wait repeats while, after the wait, the reserve
// still fits before the deadline; then the failure is returned without
// waiting.
func TestWaitsWithDeadlineRepeatLastWaitAndKeepReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(503))
		var rec recorder
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{5 * time.Second, 10 * time.Second}, Reserve: time.Minute, OnAttempt: rec.on})
		ctx := withDeadline(t, 2*time.Minute)
		start := time.Now()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		// attempts at 0, 5, 15, 25, 35, 45, 55: the next wait would end at
		// 65 s, leaving 55 s < 60 s reserve.
		assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}, prov.Gaps())
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
		prov := testkit.NewProvider(testkit.Fail(503), testkit.Fail(503), testkit.Fail(503), testkit.OK()) // a fourth attempt would be answered
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second, 0}, Reserve: time.Minute})
		ctx := withDeadline(t, time.Hour)
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		assert.Equal(t, 3, prov.Attempts(), "one attempt per wait listed, and the first")
		assert.Equal(t, []time.Duration{time.Second, 0}, prov.Gaps())
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrRetriesSpent)
	})
}

func TestDeadlineTooCloseReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prov := testkit.NewProvider(testkit.Fail(502), testkit.OK())
		rt := mustNew(t, prov, Policy{Waits: []time.Duration{time.Second}, Reserve: time.Minute})
		ctx := withDeadline(t, 30*time.Second)
		start := time.Now()
		resp, err := post(t, rt, ctx)
		require.NoError(t, err)
		assert.Equal(t, 502, resp.StatusCode)
		assert.Equal(t, 1, prov.Attempts())
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
				prov := testkit.NewProvider(testkit.Fail(503))
				var rec recorder
				p.OnAttempt = rec.on
				rt := mustNew(t, prov, p)
				start := time.Now()
				_, err := post(t, rt, context.Background())
				require.NoError(t, err)
				want := p.MaxRetries
				if want == 0 {
					want = defaultMaxRetries
				}
				require.Equal(t, want+1, prov.Attempts())
				maxWait := p.MaxWait
				if maxWait == 0 {
					maxWait = defaultMaxWait
				}
				var total time.Duration
				for k, g := range prov.Gaps() {
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
		prov := testkit.NewProvider(testkit.Fail(503))
		rt := mustNew(t, prov, Policy{MaxRetries: 1000, MaxWait: 10 * time.Second, Reserve: 30 * time.Second})
		ctx := withDeadline(t, 2*time.Minute)
		_, err := post(t, rt, ctx)
		require.NoError(t, err)
		deadline, _ := ctx.Deadline()
		assert.GreaterOrEqual(t, time.Until(deadline), 30*time.Second)
		assert.Greater(t, prov.Attempts(), 5)
	})
}

func TestServerWaitTooLongEndsRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// above MaxRetryAfter
		prov := testkit.NewProvider(testkit.Fail(429, "Retry-After", "86400"), testkit.OK())
		resp, err := post(t, mustNew(t, prov, Policy{}), context.Background())
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, "error 429", bodyOf(t, resp))
		assert.Equal(t, 1, prov.Attempts())
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrWaitTooLong)

		// within MaxRetryAfter but past the deadline and reserve
		prov = testkit.NewProvider(testkit.Fail(503, "Retry-After", "120"), testkit.OK())
		ctx := withDeadline(t, 150*time.Second)
		start := time.Now()
		resp, err = post(t, mustNew(t, prov, Policy{Reserve: time.Minute}), ctx)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		require.NotNil(t, GaveUp(resp))
		assert.ErrorIs(t, GaveUp(resp).Reason, ErrNoTimeLeft)
		assert.Equal(t, 1, prov.Attempts())
		assert.Zero(t, time.Since(start))
	})
}

// A 429 that states no wait is never hammered: under full jitter, its
// retry's wait is drawn from the upper half of the step's range, so a
// persistent 429 meets at most 3 attempts in its first 3 s in every run
// (failoverbench's S02 allows 4); a 503 keeps the whole range.
func TestRefusedWaitUpperHalf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		low := map[int]bool{} // statuses that drew a wait below half a step
		for _, status := range []int{429, 503} {
			for range 50 {
				prov := testkit.NewProvider(testkit.Fail(status))
				rt := mustNew(t, prov, Policy{})
				_, err := post(t, rt, context.Background())
				require.NoError(t, err)
				require.Equal(t, defaultMaxRetries+1, prov.Attempts())
				var at time.Duration
				within := 1
				for k, g := range prov.Gaps() {
					ceiling := min(defaultMaxWait, time.Duration(1<<k)*time.Second)
					assert.LessOrEqual(t, g, ceiling, "retry %d", k+1)
					if g < ceiling/2 {
						low[status] = true
					}
					if status == 429 {
						assert.GreaterOrEqual(t, g, ceiling/2, "retry %d after a 429", k+1)
					}
					if at += g; at < 3*time.Second {
						within++
					}
				}
				if status == 429 {
					assert.LessOrEqual(t, within, 3, "attempts in the first 3 s")
				}
			}
		}
		assert.False(t, low[429])
		assert.True(t, low[503], "full jitter for a 503")
	})
}

// A stated wait, and a Waits schedule, are kept as they are.
func TestRefusedWaitKeepsStatedWaitsAndWaits(t *testing.T) {
	p := Policy{}.resolved()
	s := coord.Pause{D: 7 * time.Millisecond, Set: true}
	assert.Equal(t, coord.Pause{}, p.refusedWait(1, coord.Pause{}), "no retry: none")
	got := p.refusedWait(3, s)
	assert.GreaterOrEqual(t, got.D, 2*time.Second)
	assert.LessOrEqual(t, got.D, 4*time.Second)
	w := Policy{Waits: []time.Duration{time.Millisecond}}.resolved()
	assert.Equal(t, s, w.refusedWait(1, s))
	assert.Zero(t, upperJitter(1, 0), "a zero ceiling: no wait")
}
