package interop

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fake providers themselves: what they admit and what they say, at
// exact instants (the bubble's clock starts at 2000-01-01 00:00:00 UTC).
func TestRateLimitProviders(t *testing.T) {
	// burst sends n requests at once to l and returns their responses,
	// bodies read, once all have come back.
	burst := func(t *testing.T, l *rateLimiter, n int) (resps []*http.Response, bodies []string) {
		t.Helper()
		resps, bodies = make([]*http.Response, n), make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, fakeOpenAIURL+"chat/completions", strings.NewReader(`{}`))
				if !assert.NoError(t, err) {
					return
				}
				resp, err := l.RoundTrip(req)
				if !assert.NoError(t, err) {
					return
				}
				b, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				resps[i], bodies[i] = resp, string(b)
			})
		}
		wg.Wait()
		require.NotContains(t, resps, (*http.Response)(nil))
		return resps, bodies
	}
	// refused sends a burst of n to l and returns its responses, the only
	// 429 among them and its body, and the others' values of header k.
	refused := func(t *testing.T, l *rateLimiter, n int, k string) ([]*http.Response, *http.Response, string, []string) {
		t.Helper()
		resps, bodies := burst(t, l, n)
		var r *http.Response
		var b string
		var vs []string
		for i, resp := range resps {
			if resp.StatusCode == http.StatusTooManyRequests {
				require.Nil(t, r, "one refusal")
				r, b = resp, bodies[i]
				continue
			}
			require.Equal(t, http.StatusOK, resp.StatusCode)
			vs = append(vs, resp.Header.Get(k))
		}
		require.NotNil(t, r, "one refusal")
		return resps, r, b, vs
	}
	// bubble runs f as the subtest name, in a synctest bubble, against a
	// new limiter of the spec id.
	bubble := func(name, id string, f func(t *testing.T, l *rateLimiter)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, newRateLimiter(rateSpecByID(id))) })
		})
	}
	spent := []string{"9", "8", "7", "6", "5", "4", "3", "2", "1", "0"}

	bubble("OpenAI: 10 at once, then one a second; the message states the wait, the reset the time to full", "openai", func(t *testing.T, l *rateLimiter) {
		_, r, b, remaining := refused(t, l, 11, "X-Ratelimit-Remaining-Requests")
		assert.Equal(t, genTime, time.Since(l.start), "answers take the generation time")
		assert.ElementsMatch(t, spent, remaining)
		assert.Empty(t, r.Header.Get("Retry-After"))
		assert.Equal(t, "10", r.Header.Get("X-Ratelimit-Limit-Requests"))
		assert.Equal(t, "0", r.Header.Get("X-Ratelimit-Remaining-Requests"))
		assert.Equal(t, "10s", r.Header.Get("X-Ratelimit-Reset-Requests"), "spent at 0: full at 10 s")
		assert.Contains(t, b, "Please try again in 1s.", "one request back at 1 s")
		assert.Contains(t, b, `"type":"requests","param":null,"code":"rate_limit_exceeded"`)

		// At 2.5 s, 2.5 requests are back: 2 admitted, the third
		// told to wait 0.5 s for the next.
		time.Sleep(500 * time.Millisecond)
		_, r, b, remaining = refused(t, l, 3, "X-Ratelimit-Remaining-Requests")
		assert.ElementsMatch(t, []string{"1", "0"}, remaining)
		assert.Equal(t, "9.5s", r.Header.Get("X-Ratelimit-Reset-Requests"))
		assert.Contains(t, b, "Please try again in 500ms.")

		recs := l.records()
		require.Len(t, recs, 14)
		assert.Equal(t, 2, l.refusals())
		f, ok := l.throughput()
		require.True(t, ok)
		assert.InDelta(t, 0.8, f, 1e-9, "from the refusal at 0 to the last admission at 2.5 s: 2 admitted of 2.5 s at 1/s")
		assert.Equal(t, rateRecord{call: -1, at: 2500 * time.Millisecond, status: 429, left: 2600 * time.Millisecond}, recs[13])
	})

	bubble("Anthropic: the same bucket, reset an instant, retry-after rounded up", "anthropic", func(t *testing.T, l *rateLimiter) {
		_, r, b, remaining := refused(t, l, 11, "Anthropic-Ratelimit-Requests-Remaining")
		assert.ElementsMatch(t, spent, remaining)
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		assert.Equal(t, "true", r.Header.Get("X-Should-Retry"))
		assert.Equal(t, "10", r.Header.Get("Anthropic-Ratelimit-Requests-Limit"))
		assert.Equal(t, "2000-01-01T00:00:10Z", r.Header.Get("Anthropic-Ratelimit-Requests-Reset"))
		assert.Contains(t, b, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit`)

		time.Sleep(500 * time.Millisecond)
		_, r, _, _ = refused(t, l, 3, "Anthropic-Ratelimit-Requests-Remaining")
		assert.Equal(t, "1", r.Header.Get("Retry-After"), "0.5 s rounded up")
		assert.Equal(t, "2000-01-01T00:00:12Z", r.Header.Get("Anthropic-Ratelimit-Requests-Reset"))
	})

	bubble("concurrency: 8 in flight, the 9th refused with retry-after 1; answered slots free", "concurrency", func(t *testing.T, l *rateLimiter) {
		for range 2 {
			_, r, b, _ := refused(t, l, 9, "Retry-After")
			assert.Equal(t, "1", r.Header.Get("Retry-After"))
			assert.Contains(t, b, "Number of concurrent connections has exceeded your rate limit")
			assert.Empty(t, r.Header.Get("Anthropic-Ratelimit-Requests-Limit"), "no header states a concurrency limit")
		}
		assert.Equal(t, 2, l.refusals())
		assert.Equal(t, 4*time.Second, time.Since(l.start))
		f, ok := l.throughput()
		require.True(t, ok)
		assert.InDelta(t, 1.0, f, 1e-9, "all 8 slots busy from the refusal at 0 to the last admission at 2 s")
	})

	bubble("OpenAI tokens: 20 requests of 1,000 tokens at once, then one every 3 s; Used and the wait in the message", "tpm", func(t *testing.T, l *rateLimiter) {
		resps, r, b, remaining := refused(t, l, 21, "X-Ratelimit-Remaining-Tokens")
		var tokensLeft, resets, reqsLeft, reqResets []string
		for i := range 20 {
			tokensLeft = append(tokensLeft, strconv.Itoa(19000-1000*i))
			resets = append(resets, (time.Duration(i+1) * 3 * time.Second).String())
		}
		for i := range 21 {
			reqsLeft = append(reqsLeft, strconv.Itoa(9999-i))
			reqResets = append(reqResets, (time.Duration(i+1) * 6 * time.Millisecond).String())
		}
		assert.ElementsMatch(t, tokensLeft, remaining)
		var gotResets, gotReqsLeft, gotReqResets []string
		for _, resp := range resps {
			if resp.StatusCode == http.StatusOK {
				gotResets = append(gotResets, resp.Header.Get("X-Ratelimit-Reset-Tokens"))
			}
			gotReqsLeft = append(gotReqsLeft, resp.Header.Get("X-Ratelimit-Remaining-Requests"))
			gotReqResets = append(gotReqResets, resp.Header.Get("X-Ratelimit-Reset-Requests"))
			assert.Equal(t, "20000", resp.Header.Get("X-Ratelimit-Limit-Tokens"))
			assert.Equal(t, "10000", resp.Header.Get("X-Ratelimit-Limit-Requests"))
		}
		assert.ElementsMatch(t, resets, gotResets, "3 s a request until the bucket is full: 3s … 57s, 1m0s")
		assert.ElementsMatch(t, reqsLeft, gotReqsLeft, "every request counts against the request limit")
		assert.ElementsMatch(t, reqResets, gotReqResets, "one request back every 6 ms")
		assert.Empty(t, r.Header.Get("Retry-After"))
		assert.Equal(t, "0", r.Header.Get("X-Ratelimit-Remaining-Tokens"))
		assert.Equal(t, "1m0s", r.Header.Get("X-Ratelimit-Reset-Tokens"))
		assert.Contains(t, b, "on tokens per min (TPM): Limit 20000, Used 20000, Requested 1000. Please try again in 3s. Visit")
		assert.Contains(t, b, `"type":"tokens","param":null,"code":"rate_limit_exceeded"`)

		// At 4.5 s (the burst came back at 2 s), 1,500 tokens are
		// back: one request admitted, and the next told that 19,500
		// are used and 1,000 are back in 1.5 s; the request limit is
		// full again.
		time.Sleep(2500 * time.Millisecond)
		resps, r, b, remaining = refused(t, l, 2, "X-Ratelimit-Remaining-Tokens")
		assert.Equal(t, []string{"500"}, remaining)
		assert.Equal(t, "500", r.Header.Get("X-Ratelimit-Remaining-Tokens"), "not 0: the tokens left are too few")
		assert.Equal(t, "58.5s", r.Header.Get("X-Ratelimit-Reset-Tokens"))
		assert.Contains(t, b, "Limit 20000, Used 19500, Requested 1000. Please try again in 1.5s.")
		assert.ElementsMatch(t, []string{"9999", "9998"}, []string{resps[0].Header.Get("X-Ratelimit-Remaining-Requests"), resps[1].Header.Get("X-Ratelimit-Remaining-Requests")})

		// At 8.468 s the bucket, full at 63 s, has room for one; the
		// next waits 532 ms for the 1,000 tokens of its own.
		time.Sleep(1968 * time.Millisecond)
		_, r, b, _ = refused(t, l, 2, "X-Ratelimit-Remaining-Tokens")
		assert.Equal(t, "57.532s", r.Header.Get("X-Ratelimit-Reset-Tokens"))
		assert.Equal(t, "822", r.Header.Get("X-Ratelimit-Remaining-Tokens"), "57.532 s of 3 ms: 19,178 used, rounded up")
		assert.Contains(t, b, "Used 19178, Requested 1000. Please try again in 532ms.")

		assert.Equal(t, 3, l.refusals())
		f, ok := l.throughput()
		require.True(t, ok)
		assert.InDelta(t, 2/(8.468/3), f, 1e-9, "from the refusal at 0 to the last admission at 8.468 s: 2 admitted at one per 3 s")
	})

	bubble("OpenRouter: the reset in Unix milliseconds, no stated wait", "openrouter", func(t *testing.T, l *rateLimiter) {
		_, r, b, remaining := refused(t, l, 11, "X-Ratelimit-Remaining")
		assert.ElementsMatch(t, spent, remaining)
		assert.Empty(t, r.Header.Get("Retry-After"))
		full := time.Date(2000, 1, 1, 0, 0, 10, 0, time.UTC).UnixMilli()
		assert.Equal(t, strconv.FormatInt(full, 10), r.Header.Get("X-Ratelimit-Reset"))
		assert.Equal(t, "10", r.Header.Get("X-Ratelimit-Limit"))
		assert.Contains(t, b, `"code":429`)
		assert.NotContains(t, b, "try again")
	})

	bubble("OpenAI published per minute: the headers state 60, the bucket of 10 refuses the 11th", "openai-minute", func(t *testing.T, l *rateLimiter) {
		resps, r, b, remaining := refused(t, l, 11, "X-Ratelimit-Remaining-Requests")
		assert.ElementsMatch(t, spent, remaining, "the enforced bucket's remaining")
		for _, resp := range resps {
			assert.Equal(t, "60", resp.Header.Get("X-Ratelimit-Limit-Requests"), "the per-minute figure")
		}
		assert.Empty(t, r.Header.Get("Retry-After"))
		assert.Equal(t, "10s", r.Header.Get("X-Ratelimit-Reset-Requests"), "the enforced bucket's time to full")
		assert.Contains(t, b, "Limit 60, Used 60, Requested 1. Please try again in 1s.")
	})

	bubble("acceleration: 5 at first, then twice the second before; the headers say requests remain", "acceleration", func(t *testing.T, l *rateLimiter) {
		_, r, b, remaining := refused(t, l, 6, "Anthropic-Ratelimit-Requests-Remaining")
		assert.ElementsMatch(t, []string{"59", "58", "57", "56", "55"}, remaining)
		assert.Equal(t, "55", r.Header.Get("Anthropic-Ratelimit-Requests-Remaining"), "room in the published limit")
		assert.Equal(t, "60", r.Header.Get("Anthropic-Ratelimit-Requests-Limit"))
		assert.Equal(t, "1", r.Header.Get("Retry-After"), "until the next second")
		assert.Contains(t, b, `"type":"rate_limit_error"`)
		assert.Contains(t, b, "ramp up your traffic gradually")
		assert.Equal(t, 1, l.refusals())
	})

	t.Run("acceleration: in a second, at most twice the second before's, at least 5", func(t *testing.T) {
		a := rateSpecByID("acceleration")
		ms := time.Millisecond
		for _, c := range []struct {
			perSec  []int
			at      time.Duration
			refused bool
			next    time.Duration
		}{
			{nil, 0, false, time.Second},
			{[]int{5}, 300 * ms, true, 700 * ms},
			{[]int{5, 9}, 1500 * ms, false, 500 * ms},
			{[]int{5, 10}, 1500 * ms, true, 500 * ms},
			{[]int{5, 10, 0}, 2999 * ms, false, ms},
			{[]int{5, 10, 19}, 2100 * ms, false, 900 * ms},
			{[]int{5, 10, 20}, 2100 * ms, true, 900 * ms},
			{[]int{5, 10, 0, 5}, 3 * time.Second, true, time.Second},
		} {
			refused, next := a.accelerating(c.perSec, c.at)
			assert.Equal(t, c.refused, refused, "%v at %v", c.perSec, c.at)
			assert.Equal(t, c.next, next, "%v at %v", c.perSec, c.at)
		}
	})

	t.Run("throughput and idle time, from records", func(t *testing.T) {
		rec := func(at, left time.Duration, admitted bool) rateRecord {
			return rateRecord{at: at, left: left, admitted: admitted}
		}
		s := time.Second
		bucket := rateSpecByID("openai")
		// 10 at 0 and a refusal at 0; then admissions at 2 s and 10 s:
		// 2 in 10 s of a 1/s limit. The bucket, spent at 0, would be
		// full at 10 s, and the one at 2 s puts that off to 11 s.
		recs := []rateRecord{}
		for range 10 {
			recs = append(recs, rec(0, 2*s, true))
		}
		recs = append(recs, rec(0, s/10, false), rec(2*s, 4*s, true), rec(10*s, 12*s, true))
		f, ok := throughputOf(bucket, recs)
		require.True(t, ok)
		assert.InDelta(t, 0.2, f, 1e-9)
		assert.Equal(t, time.Duration(0), longestIdle(bucket, recs), "the bucket never filled up")
		recs = append(recs, rec(30*s, 32*s, true))
		f, _ = throughputOf(bucket, recs)
		assert.InDelta(t, 3.0/30, f, 1e-9)
		assert.Equal(t, 18*s, longestIdle(bucket, recs), "full at 12 s, next admission at 30 s")

		_, ok = throughputOf(bucket, recs[:10])
		assert.False(t, ok, "nothing refused: no call waited on the limit")

		conc := rateSpecByID("concurrency")
		recs = []rateRecord{rec(0, 2*s, true), rec(0, s/10, false), rec(3*s, 5*s, true), rec(4*s, 6*s, true)}
		f, ok = throughputOf(conc, recs)
		require.True(t, ok)
		// From 0 to 4 s: busy 2 s + 1 s + 0 s of 8 slots × 4 s.
		assert.InDelta(t, 3.0/32, f, 1e-9)
		assert.Equal(t, s, longestIdle(conc, recs), "none in flight from 2 s to 3 s")

		// The token limit counts in requests of 1,000 tokens: 20 at 0
		// and a refusal, then admissions at 3 s and 9 s: 2 in 9 s of one
		// per 3 s. The bucket, spent at 0, is full at 60 s, at 66 s after
		// the two; an admission at 100 s finds it idle since then.
		tpm := rateSpecByID("tpm")
		assert.Equal(t, 20, tpm.burst())
		assert.Equal(t, 3*s, tpm.every())
		assert.InDelta(t, 1.0/3, tpm.rate(), 1e-9)
		recs = nil
		for range 20 {
			recs = append(recs, rec(0, 2*s, true))
		}
		recs = append(recs, rec(0, s/10, false), rec(3*s, 5*s, true), rec(9*s, 11*s, true))
		f, ok = throughputOf(tpm, recs)
		require.True(t, ok)
		assert.InDelta(t, 2.0/3, f, 1e-9)
		assert.Equal(t, time.Duration(0), longestIdle(tpm, recs))
		recs = append(recs, rec(100*s, 102*s, true))
		assert.Equal(t, 34*s, longestIdle(tpm, recs), "full at 66 s, next admission at 100 s")
	})
}
